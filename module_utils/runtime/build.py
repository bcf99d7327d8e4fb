# -*- coding: utf-8 -*-
"""How the runtime is built and linked: the CMake definitions of the
runtime stage's build (its build script, roles/runtime_build/templates/
build.sh.j2, passes them to cmake) and the libraries its link gate lets a
binary need. One place for the stage and `make gpu-proof`
(tools/gpu_proof.py), which builds with the same definitions.

What cannot be static:
- a CPU build with neither RDMA nor CUDA is fully static (-static);
- RDMA: libibverbs loads its providers at run time, so it stays dynamic,
  and with it glibc;
- CUDA: the driver's library (libcuda.so.1) comes with the kernel module
  it must match, so it stays dynamic, and with it glibc. The CUDA runtime
  and cuBLAS are the toolkit's, not the node's. The runtime is linked from
  libcudart_static.a (every toolkit has it). cuBLAS (runtime_build_cublas):
  static, from libcublas_static.a and libcublasLt_static.a, where the
  toolkit has the archives (a full CUDA toolkit, DGX OS's /usr/local/cuda);
  shared where it has only libcublas.so.N and libcublasLt.so.N (the CUDA
  toolkit's packages on the Python package index): then those libraries
  are shipped in the release's lib/ beside bin/, found through the
  binaries' RUNPATH $ORIGIN/../lib and hashed with them, so a node still
  needs the driver and nothing of the toolkit. The archives and libraries
  are named to CMake's FindCUDAToolkit through its own cache variables.
  libstdc++ and libgcc go in statically (-static-libstdc++ -static-libgcc).
- VMM (GGML_CUDA_NO_VMM) stays on, llama.cpp's default: its CUDA memory
  pool maps physical memory into one reserved range as it grows (no
  fragmentation, no copy), through the driver's API, which libcuda.so.1
  already brings; off would only spare a library the node has anyway.
No RUNPATH other than the shipped one: a build-tree path (the toolkit's
stubs, the build directory) in what ships is refused by the link gate.
Pure Python."""

from __future__ import annotations

import fnmatch

# glibc's libraries a dynamic executable needs (ld.so by architecture)
GLIBC = ("libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1")
# the NVIDIA driver's user-space library: the only CUDA library left dynamic
CUDA_DRIVER = ("libcuda.so.1",)
# FindCUDAToolkit's cache variables and the toolkit's static archive for each
CUDA_STATIC = {"CUDA_cudart_LIBRARY": "libcudart_static.a", "CUDA_cublas_LIBRARY": "libcublas_static.a",
               "CUDA_cublasLt_LIBRARY": "libcublasLt_static.a"}
# runtime_build_cublas: where cuBLAS comes from
CUBLAS_MODES = ("static", "shared")
# shared: the libraries shipped in the release's lib/ (any soname version), and
# the one RUNPATH that finds them
CUBLAS_SHARED = ("libcublas.so.*", "libcublasLt.so.*")
SHIPPED_RUNPATH = "$ORIGIN/../lib"


def fully_static(cuda: bool, rdma: bool) -> bool:
    """Whether the build links with -static (neither RDMA nor CUDA)."""
    return not cuda and not rdma


def cmake_definitions(isa_flags: list, cuda: bool, cuda_archs: str, rdma: bool, cuda_root: str = "/usr/local/cuda",
                      extra: dict | None = None, cublas: str = "static") -> dict:
    """The -D definitions of the build, NAME -> value (strings)."""
    if cublas not in CUBLAS_MODES:
        raise ValueError(f"runtime_build_cublas: expected one of {', '.join(CUBLAS_MODES)}, got {cublas!r}")
    flags = " ".join(isa_flags or [])
    out = {"CMAKE_BUILD_TYPE": "Release", "BUILD_SHARED_LIBS": "OFF", "GGML_RPC": "ON", "GGML_NATIVE": "OFF",
           "GGML_OPENMP": "OFF", "LLAMA_OPENSSL": "OFF", "LLAMA_CURL": "OFF", "LLAMA_BUILD_TESTS": "OFF",
           "LLAMA_BUILD_EXAMPLES": "OFF", "LLAMA_BUILD_SERVER": "ON",
           "GGML_RPC_RDMA": "ON" if rdma else "OFF", "GGML_CUDA": "ON" if cuda else "OFF",
           "CMAKE_C_FLAGS": flags, "CMAKE_CXX_FLAGS": flags}
    if cuda:
        out["CMAKE_CUDA_ARCHITECTURES"] = str(cuda_archs)
        libdir = f"{str(cuda_root).rstrip('/')}/lib64"
        archives = CUDA_STATIC if cublas == "static" else {"CUDA_cudart_LIBRARY": CUDA_STATIC["CUDA_cudart_LIBRARY"]}
        out.update({name: f"{libdir}/{archive}" for name, archive in archives.items()})
    out["CMAKE_EXE_LINKER_FLAGS"] = "-static" if fully_static(cuda, rdma) else "-static-libstdc++ -static-libgcc"
    if cuda and cublas == "shared":
        # the binaries find the shipped cuBLAS beside them, wherever the release lies; no build-tree path
        out.update({"CMAKE_BUILD_WITH_INSTALL_RPATH": "ON", "CMAKE_INSTALL_RPATH": SHIPPED_RUNPATH,
                    "CMAKE_EXE_LINKER_FLAGS": out["CMAKE_EXE_LINKER_FLAGS"] + " -Wl,--enable-new-dtags"})
    out.update({str(k): str(v) for k, v in (extra or {}).items()})
    return out


def link_allowlist(base: list, rdma_allowlist: list, cuda: bool, rdma: bool, cublas: str = "static") -> list:
    """The shared libraries the link gate accepts: the site's own, RDMA's
    (libibverbs and glibc), CUDA's (the driver's library and glibc; with
    shared cuBLAS its libraries, any version: shipped in the release)."""
    out = list(base or [])
    if rdma:
        out += [lib for lib in rdma_allowlist or [] if lib not in out]
    if cuda:
        out += [lib for lib in CUDA_DRIVER + GLIBC if lib not in out]
        if cublas == "shared":
            out += [lib for lib in CUBLAS_SHARED if lib not in out]
    return out


def runpaths(cuda: bool, cublas: str = "static") -> list:
    """The RUNPATH entries the link gate accepts: the shipped libraries'
    only ($ORIGIN/../lib) with shared cuBLAS, none otherwise."""
    return [SHIPPED_RUNPATH] if cuda and cublas == "shared" else []


def shipped(needed: list, needed_of: dict | None = None) -> list:
    """Of a binary's NEEDED libraries, those the release ships in lib/, and
    what they need in turn of the same (libcublas.so.N needs
    libcublasLt.so.N): ``needed_of`` is each shipped library's own NEEDED
    where it was read (elf_link.needed_libraries)."""
    def ours(libs):
        return {lib for lib in libs if any(fnmatch.fnmatch(lib, pattern) for pattern in CUBLAS_SHARED)}

    out, todo = set(), ours(needed)
    while todo - out:
        out |= todo
        todo = ours(lib for name in out for lib in (needed_of or {}).get(name, []))
    return sorted(out)
