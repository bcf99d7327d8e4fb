#!/usr/bin/env python3
"""make cuda-check: the runtime stage's CUDA build compiled, linked and
checked on a machine without a GPU, for each CUDA profile's architectures
and on the profile's own CPU architecture (its expect.architecture).

1. The toolkit, assembled from pinned packages of the Python package index
   (the cuda-toolkit 13.5.0 set: nvcc, NVVM's cicc, the CUDA runtime with
   libcudart_static.a, crt, CCCL, cuBLAS, cuobjdump) into a root CMake's
   FindCUDAToolkit accepts: lib64, unversioned .so links, and a libcuda.so
   stub (every driver function cuda.h declares, soname libcuda.so.1), in
   lib64/stubs, where a toolkit keeps its stubs. One root per target: the
   compilers are this machine's packages, the runtime, cuBLAS and CCCL the
   target's, the stub built by the target's compiler. cuBLAS comes only as
   libcublas.so.N there: the build uses runtime_build_cublas shared.
2. The build: the runtime stage's own build script (rendered by Ansible from
   roles/runtime_build/templates/build.sh.j2 with the stage's definitions,
   module_utils/runtime/build.py) with the profile's CUDA architectures and
   ISA flags; for another CPU architecture than this machine's (dgx-spark's
   aarch64 here) a CMake toolchain file with Debian's cross compilers (C,
   C++, nvcc's host compiler) and the target's sysroot. ccache for the C,
   C++ and CUDA compilers, kept between runs where the stage's script keeps
   it, one per target (~/.cache/twinrail/cuda-check/work-<arch>/ccache).
3. The checks the stage's gates make, and what a node without a GPU sees:
   each binary's NEEDED against the link gate's allowlist and its RUNPATH
   (only $ORIGIN/../lib: no build-tree or stub path, no empty element), its
   ELF machine and interpreter (and the shipped libraries' machine) against
   the profile's architecture, the release assembled as the stage ships it
   (bin/, and lib/ with the shipped cuBLAS), the embedded device code
   (`cuobjdump --list-elf`: one sm_XX per architecture of the profile, no
   other), and the binaries run (under qemu's user mode for another
   architecture): without a driver the loader must refuse naming
   libcuda.so.1; with the stub as libcuda.so.1 llama-server --version must
   load, llama-bench --list-devices must get the CUDA runtime's "driver
   version is insufficient" and go on, and llama-bench must run the
   bundle's small model on the CPU.

Writes build/cuda-check/<profile>.json with the figures (seconds per step)
and, when the profile passed, its record in tests/cuda-check/<profile>.json:
what it checked (the profile's archs, architecture and ISA flags, the
toolkit pins, the runtime's source pin, the build recipe's files by sha256),
what it saw and the figures. The record is committed: `make test`
(tests/unit/test_cuda_check.py) fails when any of those changed since it, so
a change to the CUDA build lands with a green make cuda-check of it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tools"))
# pylint: disable=wrong-import-position
from gpu_proof import parse_bench  # noqa: E402
from gpu_proof_prepare import ARCHIVE, SMOLLM2, SUBDIR, ProofError, render_build_scripts  # noqa: E402
import twinrail.loader  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.runtime import elf_link  # noqa: E402
from ansible.module_utils.runtime import build as runtime_build  # noqa: E402
from ansible.module_utils.stages import catalogue as stages  # noqa: E402
from ansible.module_utils.weights import sums as weights_sums  # noqa: E402

CACHE = Path(os.environ.get("TWINRAIL_CUDA_CHECK_CACHE", Path.home() / ".cache" / "twinrail" / "cuda-check"))
OUT = REPO / "build" / "cuda-check"
# the cuda-toolkit 13.5.0 set (its metadata's pins), what the build needs of it
TOOLKIT_VERSION = "13.5.37"
WHEELS = ("nvidia-cuda-nvcc==13.5.37", "nvidia-nvvm==13.5.37", "nvidia-cuda-runtime==13.5.37",
          "nvidia-cuda-crt==13.5.37", "nvidia-cuda-cccl==13.3.5.0.6", "nvidia-cublas==13.10.0.20",
          "nvidia-cuda-cuobjdump==13.5.37")
# of those, what runs on the build machine (the compilers, cuobjdump): the others are the target's libraries
# and headers, taken for the profile's architecture
HOST_PACKAGES = ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-cuobjdump")
# each architecture a CUDA profile may have (the profile's expect.architecture): its wheels' platforms, how
# readelf -h names its machine, its program interpreter, and where it differs from this machine's, the cross
# compilers (Debian's), their sysroot and the emulator the binary is run under
ARCHITECTURES = {
    "x86_64": {"platforms": ("manylinux_2_28_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64"),
               "machine": "Advanced Micro Devices X86-64", "interpreter": "/lib64/ld-linux-x86-64.so.2",
               "cross": "x86_64-linux-gnu", "sysroot": "/usr/x86_64-linux-gnu", "qemu": "qemu-x86_64-static"},
    "aarch64": {"platforms": ("manylinux_2_28_aarch64", "manylinux2014_aarch64", "manylinux_2_17_aarch64"),
                "machine": "AArch64", "interpreter": "/lib/ld-linux-aarch64.so.1",
                "cross": "aarch64-linux-gnu", "sysroot": "/usr/aarch64-linux-gnu", "qemu": "qemu-aarch64-static"},
}
HOST = platform.machine()
TARGETS = ("llama-server", "ggml-rpc-server", "llama-bench")
# the last green check of each CUDA profile, committed (make test compares)
RECORDS = REPO / "tests" / "cuda-check"
PROFILES = ("dgx-spark", "gpu-server")
# what the CUDA build is made from, besides the profile's archs and the toolkit pins
RECIPE = ("roles/runtime_build/templates/build.sh.j2", "module_utils/runtime/build.py", "module_utils/runtime/elf_link.py")


class CheckError(RuntimeError):
    """A step of the check failed; the message says which and why."""


def log(msg: str) -> None:
    print(f"cuda-check: {msg}", flush=True)


def profile_settings(name: str, repo: Path = REPO) -> dict:
    return _profile(name, repo)[0]


def profile_architecture(name: str, repo: Path = REPO) -> str:
    """The architecture the profile's nodes have (its expect.architecture)."""
    return _profile(name, repo)[1]


def _profile(name: str, repo: Path) -> tuple[dict, str]:
    import yaml  # pylint: disable=import-outside-toplevel

    path = repo / "profiles" / f"{name}.yml"
    if not path.is_file():
        raise CheckError(f"--profile: no profiles/{name}.yml")
    data = yaml.safe_load(path.read_text()) or {}
    settings = data.get("settings") or {}
    if not settings.get("runtime_build_cuda"):
        raise CheckError(f"--profile {name}: runtime_build_cuda is off in profiles/{name}.yml: nothing to check")
    arch = (data.get("expect") or {}).get("architecture")
    if arch not in ARCHITECTURES:
        raise CheckError(f"--profile {name}: expect.architecture in profiles/{name}.yml is {arch!r}; "
                         f"expected one of {', '.join(ARCHITECTURES)}")
    return settings, arch


def archs_of(value) -> list[str]:
    return [a.strip() for a in str(value).split(";") if a.strip()]


def pins(target: str) -> list[str]:
    """The toolkit's packages for a build of target: the compilers (for
    whichever machine builds: the same release), the libraries and headers
    named with target's architecture."""
    return [spec if spec.split("==")[0] in HOST_PACKAGES else f"{spec} ({target})" for spec in WHEELS]


def fingerprint(profile: str, repo: Path = REPO) -> dict:
    """What a check of `profile` vouches for: its archs, its architecture
    and ISA flags, the toolkit's pins, the runtime source's pin and the
    recipe's files (sha256)."""
    settings, target = _profile(profile, repo)
    return {"archs": archs_of(settings["runtime_build_cuda_archs"]), "target": target,
            "isa_flags": [str(f) for f in settings.get("runtime_build_isa_flags") or []],
            "toolkit": pins(target),
            "runtime_source": {k: stages.role_default(repo, k)
                               for k in ("runtime_build_version", "runtime_build_archive_sha256")},
            "recipe": {name: weights_sums.sha256_file(str(repo / name)) for name in RECIPE}}


def stale(record: dict | None, current: dict) -> list[str]:
    """How the last green check differs from what would be built now, in
    words (empty: it still vouches for the CUDA build)."""
    if not record:
        return ["no green make cuda-check is recorded"]
    was = record.get("fingerprint") or {}
    out = []
    for key in ("archs", "target", "isa_flags", "toolkit", "runtime_source"):
        if was.get(key) != current[key]:
            out.append(f"{key} {was.get(key)} -> {current[key]}")
    for name in sorted(set(was.get("recipe") or {}) | set(current["recipe"])):
        if (was.get("recipe") or {}).get(name) != current["recipe"].get(name):
            out.append(f"{name} changed")
    return out


# ---------------------------------------------------------------- the toolkit

def wheels(arch: str, names: list[str]) -> list[Path]:
    """The pinned wheels of `names` for arch, downloaded once into the cache."""
    folder = CACHE / "wheels" / arch
    folder.mkdir(parents=True, exist_ok=True)
    specs = [spec for spec in WHEELS if spec.split("==")[0] in names]
    wanted = {re.sub(r"[-_.]+", "_", spec.split("==")[0]) + "-" + spec.split("==")[1] for spec in specs}
    have = {"-".join(p.name.split("-")[:2]): p for p in folder.glob("*.whl")}
    if set(have) >= wanted:
        return sorted(have[name] for name in wanted)
    log(f"downloading {len(specs)} packages of the CUDA toolkit {TOOLKIT_VERSION} for {arch}")
    platforms = [arg for plat in ARCHITECTURES[arch]["platforms"] for arg in ("--platform", plat)]
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *platforms,
                           "--python-version", "3.11", "-d", str(folder),
                           *[f"{spec}.*" if spec.count(".") < 4 else spec for spec in specs]],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CheckError(f"pip download for {arch} failed: {(proc.stdout + proc.stderr)[-1500:]}")
    have = {"-".join(p.name.split("-")[:2]): p for p in folder.glob("*.whl")}
    return sorted(have[name] for name in wanted)


def compiler(target: str, name: str = "gcc") -> str:
    """This machine's compiler where it builds for its own architecture,
    Debian's cross compiler otherwise."""
    if target == HOST:
        return name
    cross = f"{ARCHITECTURES[target]['cross']}-{name}"
    if not shutil.which(cross):
        raise CheckError(f"{cross} is not installed: the {target} build needs Debian's cross compilers "
                         f"(apt-get install g++-{ARCHITECTURES[target]['cross']} qemu-user-static)")
    return cross


def libcuda_stub(root: Path, target: str) -> Path:
    """A libcuda.so for linking only: every function cuda.h declares (its
    versioned names, as the preprocessor resolves them), soname
    libcuda.so.1, as a toolkit's lib64/stubs/libcuda.so is; built for target.
    Each returns 999 (not CUDA_SUCCESS): the CUDA runtime reads that as a
    driver too old for it, which is what the binary meets where no GPU is."""
    stubs = root / "lib64" / "stubs"
    stubs.mkdir(parents=True, exist_ok=True)
    pre = subprocess.run(["gcc", "-E", "-P", "-I", str(root / "include"), "-x", "c", "-"],
                         input="#include <cuda.h>\n", capture_output=True, text=True, check=False)
    if pre.returncode != 0:
        raise CheckError(f"preprocessing cuda.h failed: {pre.stderr[-800:]}")
    names = sorted(set(re.findall(r"\bCUresult\s+(?:__attribute__\S*\s+)?(cu[A-Za-z0-9_]+)\s*\(", pre.stdout)))
    source = stubs / "libcuda_stub.c"
    source.write_text("".join(f"int {name}(void) {{ return 999; }}\n" for name in names))
    out = stubs / "libcuda.so"
    subprocess.run([compiler(target), "-shared", "-fPIC", "-o", str(out), str(source), "-Wl,-soname,libcuda.so.1"],
                   check=True)
    return out


def toolkit(target: str) -> tuple[Path, float]:
    """The assembled toolkit's root for builds of target (made once per
    version and target): this machine's compilers, target's libraries
    and headers. Its seconds."""
    started = time.monotonic()
    root = CACHE / f"toolkit-{TOOLKIT_VERSION}-{target}"
    if (root / ".complete").is_file():
        return root, 0.0
    shutil.rmtree(root, ignore_errors=True)
    staging = CACHE / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    # the compilers first; the target's packages after them, so that a file both hold is the target's
    for wheel in wheels(HOST, list(HOST_PACKAGES)) + wheels(target, [spec.split("==")[0] for spec in WHEELS
                                                                     if spec.split("==")[0] not in HOST_PACKAGES]):
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                target_path = staging / member.filename
                archive.extract(member, staging)
                mode = (member.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(target_path, mode)
    shutil.move(str(staging / "nvidia" / "cu13"), str(root))
    shutil.rmtree(staging)
    (root / "lib64").symlink_to("lib")
    for lib in sorted((root / "lib").glob("*.so.*")):
        link = root / "lib" / lib.name.split(".so.")[0]
        link = link.with_name(link.name + ".so")
        if not link.exists():
            link.symlink_to(lib.name)
    libcuda_stub(root, target)
    (root / ".complete").write_text(TOOLKIT_VERSION + "\n")
    return root, round(time.monotonic() - started, 1)


def toolchain_file(target: str, root: Path) -> Path | None:
    """The CMake toolchain file of a build for another architecture (None
    for this machine's): the cross compilers, nvcc's host compiler, and
    libraries and headers looked up only in the target's sysroot and the
    toolkit (programs on this machine)."""
    if target == HOST:
        return None
    spec = ARCHITECTURES[target]
    path = CACHE / f"toolchain-{target}.cmake"
    path.write_text("\n".join([
        "# written by tools/cuda_check.py: a build on this machine for " + target,
        "set(CMAKE_SYSTEM_NAME Linux)",
        f"set(CMAKE_SYSTEM_PROCESSOR {target})",
        f"set(CMAKE_C_COMPILER {compiler(target, 'gcc')})",
        f"set(CMAKE_CXX_COMPILER {compiler(target, 'g++')})",
        f"set(CMAKE_CUDA_HOST_COMPILER {compiler(target, 'g++')})",
        f"set(CMAKE_FIND_ROOT_PATH {spec['sysroot']} {root})",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)", ""]))
    return path


# ---------------------------------------------------------------- the build

def source(top: Path) -> None:
    """The bundled llama.cpp sources under top/<subdir> (as the stage unpacks them)."""
    if (top / SUBDIR / "CMakeLists.txt").is_file():
        return
    if not ARCHIVE.is_file():
        raise CheckError(f"{ARCHIVE} is absent: run `make bundle` first")
    top.mkdir(parents=True, exist_ok=True)
    with tarfile.open(ARCHIVE) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(SUBDIR + "/")]
        archive.extractall(top, members=members)  # noqa: S202  (the pinned, hash-checked sdist)


def build(profile: str, settings: dict, target: str, root: Path, jobs: int) -> tuple[Path, dict, float]:
    """The runtime stage's build script for the profile (its settings and
    architecture): its archs, its ISA flags, for its architecture (a
    toolchain file where that is not this machine's); ccache kept per
    architecture."""
    archs = archs_of(settings["runtime_build_cuda_archs"])
    cmake = runtime_build.cmake_definitions([str(f) for f in settings.get("runtime_build_isa_flags") or []], True,
                                            ";".join(archs), False, str(root), cublas="shared")
    cmake["CUDAToolkit_ROOT"] = str(root)
    cmake["CMAKE_CUDA_COMPILER"] = str(root / "bin" / "nvcc")
    toolchain = toolchain_file(target, root)
    if toolchain:
        cmake["CMAKE_TOOLCHAIN_FILE"] = str(toolchain)
    build_id = f"cuda-check-{profile}"
    work = CACHE / f"work-{target}"
    top = work / build_id
    source(top)
    script = top / "build.sh"
    render_build_scripts({build_id: (script, cmake)}, work, ccache=bool(shutil.which("ccache")), jobs=str(jobs),
                         version="llama-cpp-python 0.3.36 (make cuda-check)")
    log(f"{profile}: building for {target}, sm {', '.join(archs)}, with {jobs} jobs (log {top / 'build.log'})")
    started = time.monotonic()
    env = dict(os.environ, PATH=f"{root / 'bin'}:{os.environ['PATH']}", CUDA_PATH=str(root))
    proc = subprocess.run(["bash", str(script)], env=env, check=False)
    seconds = round(time.monotonic() - started, 1)
    if proc.returncode != 0:
        tail = (top / "build.log").read_text(errors="replace")[-3000:]
        raise CheckError(f"{profile}: the build failed (exit {proc.returncode}) after {seconds} s: {tail}")
    return top / "build" / "bin", cmake, seconds


# ---------------------------------------------------------------- the checks

def elf_archs(cuobjdump: Path, binary: Path) -> list[str]:
    """The sm_XX of the device code embedded in the binary (cuobjdump --list-elf)."""
    proc = subprocess.run([str(cuobjdump), "--list-elf", str(binary)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CheckError(f"cuobjdump --list-elf {binary.name}: {(proc.stdout + proc.stderr).strip()[-500:]}")
    return sorted({m for m in re.findall(r"\.sm_(\d+a?)\.", proc.stdout)})


def elf_header(path: Path) -> dict:
    """The ELF machine (readelf -h) and program interpreter (readelf -l;
    None for a shared library) of a file, as binutils names them."""
    header = subprocess.run(["readelf", "-h", "-l", str(path)], capture_output=True, text=True, check=False,
                            env={"LC_ALL": "C", "PATH": os.environ["PATH"]})
    if header.returncode != 0:
        raise CheckError(f"readelf -h -l {path.name}: {(header.stdout + header.stderr).strip()[-300:]}")
    machine = re.search(r"^\s*Machine:\s+(.+?)\s*$", header.stdout, re.M)
    interpreter = re.search(r"\[Requesting program interpreter: ([^\]]+)\]", header.stdout)
    return {"machine": machine.group(1) if machine else None,
            "interpreter": interpreter.group(1) if interpreter else None}


def emulator(target: str) -> list[str]:
    """How a binary of target is run here: directly where it is this
    machine's, else under qemu's user mode with the target's sysroot."""
    if target == HOST:
        return []
    spec = ARCHITECTURES[target]
    if not shutil.which(spec["qemu"]):
        raise CheckError(f"{spec['qemu']} is not installed: apt-get install qemu-user-static")
    return [spec["qemu"], "-L", spec["sysroot"]]


def run_release(target: str, argv: list[str], stub_dir: Path | None = None) -> dict:
    """One of the release's binaries run as a node without a GPU would:
    no driver at all, or (stub_dir) the stub libcuda.so.1 in its place."""
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    if stub_dir:
        env["LD_LIBRARY_PATH"] = str(stub_dir)
    proc = subprocess.run(emulator(target) + argv, capture_output=True, text=True, check=False, env=env,
                          timeout=600)
    return {"argv": [Path(argv[0]).name, *argv[1:]], "exit": proc.returncode,
            "said": (proc.stdout + proc.stderr).strip(), "stdout": proc.stdout, "stderr": proc.stderr}


def driver_checks(target: str, release: Path, root: Path) -> tuple[dict, list[str]]:
    """The release where no GPU is: without a driver the loader refuses
    naming libcuda.so.1 (after finding the shipped cuBLAS through
    $ORIGIN/../lib); with the stub driver as libcuda.so.1 the binaries load
    and run (llama-server --version: its version line), and asking for
    the devices (llama-bench --list-devices, which starts the CUDA backend)
    gets the CUDA runtime's answer that the driver is too old, and a list
    without a GPU instead of a crash."""
    failures = []
    none = run_release(target, [str(release / "bin" / "llama-server"), "--version"])
    said = none["said"]
    if none["exit"] == 0 or "libcuda.so.1" not in said or "libcublas" in said:
        failures.append(f"llama-server --version without a driver: exit {none['exit']}: {said[-300:]!r}; "
                        "expected the loader to refuse naming libcuda.so.1 (and find cuBLAS in ../lib)")
    stub_dir = CACHE / f"stub-driver-{target}"
    stub_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(root / "lib64" / "stubs" / "libcuda.so", stub_dir / "libcuda.so.1")
    version = run_release(target, [str(release / "bin" / "llama-server"), "--version"], stub_dir)
    if version["exit"] != 0 or not version["said"].startswith("version:"):
        failures.append(f"llama-server --version with the stub driver: exit {version['exit']}: "
                        f"{version['said'][-300:]!r}; expected it to load and print its version")
    devices = run_release(target, [str(release / "bin" / "llama-bench"), "--list-devices"], stub_dir)
    if devices["exit"] < 0 or "driver version is insufficient" not in devices["said"]:
        failures.append(f"llama-bench --list-devices with the stub driver: exit {devices['exit']}: "
                        f"{devices['said'][-300:]!r}; expected the CUDA runtime's \"driver version is "
                        "insufficient\" and no crash")
    # and as far as a node without a GPU goes: the bundle's small model on the CPU, every layer there
    bench = run_release(target, [str(release / "bin" / "llama-bench"), "-m", str(SMOLLM2), "-ngl", "0", "-p", "16",
                                 "-n", "4", "-r", "1", "-t", "2", "-o", "json"], stub_dir)
    try:
        bench["figures"] = parse_bench(bench["stdout"], bench["stderr"])
    except ProofError as exc:
        bench["figures"] = {}
        failures.append(f"llama-bench on the CPU with the stub driver: exit {bench['exit']}: {exc}")
    if bench["figures"] and (bench["exit"] != 0 or not all(f["tokens_per_s"] > 0 for f in bench["figures"].values())):
        failures.append(f"llama-bench on the CPU with the stub driver: exit {bench['exit']}: {bench['figures']}; "
                        "expected a prompt and a generation row, each with tokens per second")
    return {"none": none, "stub": [version, devices], "cpu_bench": bench}, failures


def check(profile: str, archs: list[str], bindir: Path, root: Path, target: str = HOST) -> dict:
    """The release as the stage ships it, checked as its gates would: the
    link gate, the device code, the architecture of every file, and how
    it behaves without a GPU."""
    allow = runtime_build.link_allowlist([], [], True, False, "shared")
    spec = ARCHITECTURES[target]
    release = CACHE / "release" / profile
    shutil.rmtree(release, ignore_errors=True)
    (release / "bin").mkdir(parents=True)
    result = {"binaries": [], "shipped": [], "failures": [], "target": target}
    for name in TARGETS:
        shutil.copy2(bindir / name, release / "bin" / name)
        dyn = subprocess.run(["readelf", "-d", str(release / "bin" / name)], capture_output=True, text=True,
                             check=True).stdout
        kind = subprocess.run(["file", "-b", str(release / "bin" / name)], capture_output=True, text=True,
                              check=True).stdout
        seen = elf_link.verdict(name, dyn, kind, allow, runtime_build.runpaths(True, "shared"))
        seen["sm"] = elf_archs(root / "bin" / "cuobjdump", release / "bin" / name)
        seen.update(elf_header(release / "bin" / name))
        result["binaries"].append({k: v for k, v in seen.items() if k != "file"})
        if not seen["passed"]:
            result["failures"].append(f"{name}: needs {seen['offending'] or 'nothing unexpected'}, RUNPATH "
                                      f"{seen['offending_runpath'] or 'as shipped'} (allowed {allow}, "
                                      f"{runtime_build.runpaths(True, 'shared')})")
        if (seen["machine"], seen["interpreter"]) != (spec["machine"], spec["interpreter"]):
            result["failures"].append(f"{name}: an ELF for {seen['machine']} with interpreter {seen['interpreter']}; "
                                      f"the profile's nodes are {target}: {spec['machine']}, {spec['interpreter']}")
        # llama.cpp's CMake builds 120/121 as their architecture-specific 120a/121a (the features Blackwell's
        # consumer and GB10 parts have): the same GPU
        want = sorted(archs)
        if sorted(sm.rstrip("a") for sm in seen["sm"]) != want:
            result["failures"].append(f"{name}: device code for sm {seen['sm']}, the profile's are {want}")
        # what the binary needs of the toolkit, and what that needs in turn, as the stage reads it
        first = runtime_build.shipped(seen["needed"])
        needed_of = {lib: elf_link.needed_libraries(subprocess.run(["readelf", "-d", str(root / "lib64" / lib)],
                                                              capture_output=True, text=True, check=True).stdout)
                     for lib in first}
        for lib in runtime_build.shipped(seen["needed"], needed_of):
            if lib not in result["shipped"]:
                (release / "lib").mkdir(exist_ok=True)
                shutil.copy2((root / "lib64" / lib).resolve(), release / "lib" / lib)
                result["shipped"].append(lib)
                machine = elf_header(release / "lib" / lib)["machine"]
                if machine != spec["machine"]:
                    result["failures"].append(f"lib/{lib}: an ELF for {machine}; the profile's nodes are {target}")
    if sorted(result["shipped"]) != ["libcublas.so.13", "libcublasLt.so.13"]:
        result["failures"].append(f"the release ships {result['shipped']}, expected cuBLAS's two libraries")
    result["sizes"] = {str(path.relative_to(release)): path.stat().st_size
                       for path in sorted(release.rglob("*")) if path.is_file()}
    result["driver"], failures = driver_checks(target, release, root)
    result["failures"] += failures
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--profile", action="append", default=None,
                        help="a CUDA profile (repeat); default dgx-spark and gpu-server")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    failed = False
    try:
        for profile in args.profile or list(PROFILES):
            settings, target = _profile(profile, REPO)
            archs = archs_of(settings["runtime_build_cuda_archs"])
            root, toolkit_s = toolkit(target)
            log(f"toolkit {TOOLKIT_VERSION} for {target} at {root} ({toolkit_s} s)")
            bindir, cmake, build_s = build(profile, settings, target, root, args.jobs)
            steps = len(re.findall(r"^\[\d+/\d+\] ", (bindir.parent.parent / "build.log").read_text(errors="replace"),
                                   re.M))
            started = time.monotonic()
            result = check(profile, archs, bindir, root, target)
            result.update(profile=profile, archs=archs, toolkit=TOOLKIT_VERSION, toolkit_seconds=toolkit_s,
                          build_seconds=build_s, build_steps=steps, compile_job_seconds=compile_seconds(bindir.parent),
                          check_seconds=round(time.monotonic() - started, 1),
                          jobs=args.jobs, cmake=cmake, checked_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            (OUT / f"{profile}.json").write_text(json.dumps(result, indent=2) + "\n")
            if not result["failures"]:
                RECORDS.mkdir(parents=True, exist_ok=True)
                (RECORDS / f"{profile}.json").write_text(json.dumps(record(profile, result), indent=2) + "\n")
            for line in result["failures"]:
                log(f"{profile}: FAILED: {line}")
            failed |= bool(result["failures"])
            log(f"{profile}: {target}, sm {', '.join(archs)}: built in {build_s} s ({steps} steps); "
                + ("passed" if not result["failures"] else "FAILED")
                + f"; NEEDED {sorted({n for b in result['binaries'] for n in b['needed']})}; "
                f"ships {result['shipped']}; without a driver: {result['driver']['none']['said'][-120:]!r}; "
                f"with the stub: {result['driver']['stub'][-1]['said'][-160:]!r}")
    except (CheckError, ProofError) as exc:
        log(f"FAILED: {exc}")
        return 1
    return 1 if failed else 0


def compile_seconds(build_dir: Path) -> float:
    """What compiling the current outputs took, in job-seconds: ninja's log
    (.ninja_log: start and end in ms, the output) keeps each output's last
    build, so a build that compiled nothing still reports the build that
    made what it found."""
    last = {}
    try:
        lines = (build_dir / ".ninja_log").read_text().splitlines()[1:]
    except FileNotFoundError:
        return 0.0
    for line in lines:
        fields = line.split("\t")
        if len(fields) >= 4 and fields[0].isdigit() and fields[1].isdigit():
            last[fields[3]] = (int(fields[1]) - int(fields[0])) / 1000
    return round(sum(last.values()), 1)


def record(profile: str, result: dict) -> dict:
    """The committed record of a green check: what it vouches for and what it saw."""
    binaries = result["binaries"]
    return {"profile": profile, "fingerprint": fingerprint(profile), "checked_at": result["checked_at"],
            "host": HOST, "target": result["target"], "toolkit_version": TOOLKIT_VERSION, "jobs": result["jobs"],
            "build_seconds": result["build_seconds"], "build_steps": result["build_steps"],
            "compile_job_seconds": result["compile_job_seconds"],
            "check_seconds": result["check_seconds"],
            "machine": sorted({b["machine"] for b in binaries}),
            "interpreter": sorted({b["interpreter"] for b in binaries}),
            "sm": sorted({sm for b in binaries for sm in b["sm"]}),
            "needed": sorted({n for b in binaries for n in b["needed"]}),
            "runpath": sorted({p for b in binaries for p in b["runpath"]}),
            "shipped": result["shipped"], "release_bytes": result["sizes"],
            "without_driver": result["driver"]["none"]["said"][-200:],
            "with_stub_driver": {" ".join(ran["argv"]): {"exit": ran["exit"], "said": ran["said"][-400:]}
                                 for ran in result["driver"]["stub"]},
            "cpu_bench_with_stub_driver": result["driver"]["cpu_bench"]["figures"]}


if __name__ == "__main__":
    sys.exit(main())
