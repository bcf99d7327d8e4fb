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
  and cuBLAS are the toolkit's, not the node's: they are linked from the
  toolkit's static archives (libcudart_static.a, libcublas_static.a,
  libcublasLt_static.a), named to CMake's FindCUDAToolkit through its own
  cache variables, so a node needs the driver and nothing of the toolkit.
  libstdc++ and libgcc go in statically (-static-libstdc++ -static-libgcc).
Pure Python."""

from __future__ import annotations

# glibc's libraries a dynamic executable needs (ld.so by architecture)
GLIBC = ("libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1")
# the NVIDIA driver's user-space library: the only CUDA library left dynamic
CUDA_DRIVER = ("libcuda.so.1",)
# FindCUDAToolkit's cache variables and the toolkit's static archive for each
CUDA_STATIC = {"CUDA_cudart_LIBRARY": "libcudart_static.a", "CUDA_cublas_LIBRARY": "libcublas_static.a",
               "CUDA_cublasLt_LIBRARY": "libcublasLt_static.a"}


def fully_static(cuda: bool, rdma: bool) -> bool:
    """Whether the build links with -static (neither RDMA nor CUDA)."""
    return not cuda and not rdma


def cmake_definitions(isa_flags: list, cuda: bool, cuda_archs: str, rdma: bool, cuda_root: str = "/usr/local/cuda",
                      extra: dict | None = None) -> dict:
    """The -D definitions of the build, NAME -> value (strings)."""
    flags = " ".join(isa_flags or [])
    out = {"CMAKE_BUILD_TYPE": "Release", "BUILD_SHARED_LIBS": "OFF", "GGML_RPC": "ON", "GGML_NATIVE": "OFF",
           "GGML_OPENMP": "OFF", "LLAMA_OPENSSL": "OFF", "LLAMA_CURL": "OFF", "LLAMA_BUILD_TESTS": "OFF",
           "LLAMA_BUILD_EXAMPLES": "OFF", "LLAMA_BUILD_SERVER": "ON",
           "GGML_RPC_RDMA": "ON" if rdma else "OFF", "GGML_CUDA": "ON" if cuda else "OFF",
           "CMAKE_C_FLAGS": flags, "CMAKE_CXX_FLAGS": flags}
    if cuda:
        out["CMAKE_CUDA_ARCHITECTURES"] = str(cuda_archs)
        libdir = f"{str(cuda_root).rstrip('/')}/lib64"
        out.update({name: f"{libdir}/{archive}" for name, archive in CUDA_STATIC.items()})
    out["CMAKE_EXE_LINKER_FLAGS"] = "-static" if fully_static(cuda, rdma) else "-static-libstdc++ -static-libgcc"
    out.update({str(k): str(v) for k, v in (extra or {}).items()})
    return out


def link_allowlist(base: list, rdma_allowlist: list, cuda: bool, rdma: bool) -> list:
    """The shared libraries the link gate accepts: the site's own, RDMA's
    (libibverbs and glibc), CUDA's (the driver's library and glibc)."""
    out = list(base or [])
    if rdma:
        out += [lib for lib in rdma_allowlist or [] if lib not in out]
    if cuda:
        out += [lib for lib in CUDA_DRIVER + GLIBC if lib not in out]
    return out
