#!/usr/bin/env python3
"""make cuda-check: the runtime stage's CUDA build compiled, linked and
checked on a machine without a GPU, for each CUDA profile's architectures.

1. The toolkit, assembled from pinned packages of the Python package index
   (the cuda-toolkit 13.5.0 set: nvcc, NVVM's cicc, the CUDA runtime with
   libcudart_static.a, crt, CCCL, cuBLAS, cuobjdump) into a root CMake's
   FindCUDAToolkit accepts: lib64, unversioned .so links, and a libcuda.so
   stub for linking only (every driver function cuda.h declares, soname
   libcuda.so.1), in lib64/stubs, where a toolkit keeps its stubs. cuBLAS
   comes only as libcublas.so.N there: the build uses runtime_build_cublas
   shared.
2. The build: the runtime stage's own build script (rendered by Ansible from
   roles/runtime_build/templates/build.sh.j2 with the stage's definitions,
   module_utils/runtime/build.py) for the profile's CUDA architectures; host
   code for this machine (the device code is what a profile changes); ccache
   for the C, C++ and CUDA compilers, kept between runs where the stage's
   script keeps it (~/.cache/twinrail/cuda-check/work/ccache).
3. The checks the stage's gates make: each binary's NEEDED against the link
   gate's allowlist and its RUNPATH (only $ORIGIN/../lib: no build-tree or
   stub path), the release assembled as the stage ships it (bin/, and lib/
   with the shipped cuBLAS), the embedded device code (`cuobjdump
   --list-elf`: one sm_XX per architecture of the profile, no other), and
   the binary refusing clearly where there is no driver (the loader names
   libcuda.so.1).

Writes build/cuda-check/<profile>.json with the figures (seconds per step)
and, when the profile passed, its record in tests/cuda-check/<profile>.json:
what it checked (the profile's archs, the toolkit pins, the runtime's
source pin, the build recipe's files by sha256) and the figures. The
record is committed: `make test` (tests/unit/test_cuda_check.py) fails
when the recipe, the pin or a profile's archs changed since it, so a
change to the CUDA build lands with a green make cuda-check of it.
"""

from __future__ import annotations

import argparse
import json
import os
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
from gpu_proof_prepare import ARCHIVE, SUBDIR, ProofError, render_build_scripts  # noqa: E402
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
    import yaml  # pylint: disable=import-outside-toplevel

    path = repo / "profiles" / f"{name}.yml"
    if not path.is_file():
        raise CheckError(f"--profile: no profiles/{name}.yml")
    settings = (yaml.safe_load(path.read_text()) or {}).get("settings") or {}
    if not settings.get("runtime_build_cuda"):
        raise CheckError(f"--profile {name}: runtime_build_cuda is off in profiles/{name}.yml: nothing to check")
    return settings


def archs_of(value) -> list[str]:
    return [a.strip() for a in str(value).split(";") if a.strip()]


def fingerprint(profile: str, repo: Path = REPO) -> dict:
    """What a check of `profile` vouches for: its archs, the toolkit's
    pins, the runtime source's pin and the recipe's files (sha256)."""
    return {"archs": archs_of(profile_settings(profile, repo)["runtime_build_cuda_archs"]),
            "toolkit": list(WHEELS),
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
    for key in ("archs", "toolkit", "runtime_source"):
        if was.get(key) != current[key]:
            out.append(f"{key} {was.get(key)} -> {current[key]}")
    for name in sorted(set(was.get("recipe") or {}) | set(current["recipe"])):
        if (was.get("recipe") or {}).get(name) != current["recipe"].get(name):
            out.append(f"{name} changed")
    return out


# ---------------------------------------------------------------- the toolkit

def wheels() -> list[Path]:
    """The pinned wheels, downloaded once into the cache."""
    folder = CACHE / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {re.sub(r"[-_.]+", "_", spec.split("==")[0]) + "-" + spec.split("==")[1] for spec in WHEELS}
    if {"-".join(p.name.split("-")[:2]) for p in folder.glob("*.whl")} >= wanted:
        return sorted(folder.glob("*.whl"))
    log(f"downloading {len(WHEELS)} packages of the CUDA toolkit {TOOLKIT_VERSION}")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                           "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64",
                           "--platform", "manylinux_2_5_x86_64", "--python-version", "3.11", "-d", str(folder),
                           *[f"{spec}.*" if spec.count(".") < 4 else spec for spec in WHEELS]],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CheckError(f"pip download failed: {(proc.stdout + proc.stderr)[-1500:]}")
    return sorted(folder.glob("*.whl"))


def libcuda_stub(root: Path) -> Path:
    """A libcuda.so for linking only: every function cuda.h declares (its
    versioned names, as the preprocessor resolves them), soname
    libcuda.so.1, as a toolkit's lib64/stubs/libcuda.so is."""
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
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(source), "-Wl,-soname,libcuda.so.1"], check=True)
    return out


def toolkit() -> tuple[Path, float]:
    """The assembled toolkit's root (made once per version), and its seconds."""
    started = time.monotonic()
    root = CACHE / f"toolkit-{TOOLKIT_VERSION}"
    if (root / ".complete").is_file():
        return root, 0.0
    shutil.rmtree(root, ignore_errors=True)
    staging = CACHE / "staging"
    shutil.rmtree(staging, ignore_errors=True)
    for wheel in wheels():
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                target = staging / member.filename
                archive.extract(member, staging)
                mode = (member.external_attr >> 16) & 0o777
                if mode:
                    os.chmod(target, mode)
    shutil.move(str(staging / "nvidia" / "cu13"), str(root))
    shutil.rmtree(staging)
    (root / "lib64").symlink_to("lib")
    for lib in sorted((root / "lib").glob("*.so.*")):
        link = root / "lib" / lib.name.split(".so.")[0]
        link = link.with_name(link.name + ".so")
        if not link.exists():
            link.symlink_to(lib.name)
    libcuda_stub(root)
    (root / ".complete").write_text(TOOLKIT_VERSION + "\n")
    return root, round(time.monotonic() - started, 1)


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


def build(profile: str, archs: list[str], root: Path, jobs: int) -> tuple[Path, dict, float]:
    cmake = runtime_build.cmake_definitions([], True, ";".join(archs), False, str(root), cublas="shared")
    cmake["CUDAToolkit_ROOT"] = str(root)
    cmake["CMAKE_CUDA_COMPILER"] = str(root / "bin" / "nvcc")
    build_id = f"cuda-check-{profile}"
    work = CACHE / "work"
    top = work / build_id
    source(top)
    script = top / "build.sh"
    render_build_scripts({build_id: (script, cmake)}, work, ccache=bool(shutil.which("ccache")), jobs=str(jobs),
                         version="llama-cpp-python 0.3.36 (make cuda-check)")
    log(f"{profile}: building for sm {', '.join(archs)} with {jobs} jobs (log {top / 'build.log'})")
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


def check(profile: str, archs: list[str], bindir: Path, root: Path) -> dict:
    allow = runtime_build.link_allowlist([], [], True, False, "shared")
    release = CACHE / "release" / profile
    shutil.rmtree(release, ignore_errors=True)
    (release / "bin").mkdir(parents=True)
    result = {"binaries": [], "shipped": [], "failures": []}
    for name in TARGETS:
        shutil.copy2(bindir / name, release / "bin" / name)
        dyn = subprocess.run(["readelf", "-d", str(release / "bin" / name)], capture_output=True, text=True,
                             check=True).stdout
        kind = subprocess.run(["file", "-b", str(release / "bin" / name)], capture_output=True, text=True,
                              check=True).stdout
        seen = elf_link.verdict(name, dyn, kind, allow, runtime_build.runpaths(True, "shared"))
        seen["sm"] = elf_archs(root / "bin" / "cuobjdump", release / "bin" / name)
        result["binaries"].append({k: v for k, v in seen.items() if k != "file"})
        if not seen["passed"]:
            result["failures"].append(f"{name}: needs {seen['offending'] or 'nothing unexpected'}, RUNPATH "
                                      f"{seen['offending_runpath'] or 'as shipped'} (allowed {allow}, "
                                      f"{runtime_build.runpaths(True, 'shared')})")
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
    if sorted(result["shipped"]) != ["libcublas.so.13", "libcublasLt.so.13"]:
        result["failures"].append(f"the release ships {result['shipped']}, expected cuBLAS's two libraries")
    # where there is no driver: the loader finds the shipped cuBLAS through $ORIGIN/../lib, then refuses on the
    # driver's library
    proc = subprocess.run([str(release / "bin" / "llama-server"), "--version"], capture_output=True, text=True,
                          check=False, env={"PATH": "/usr/bin:/bin"})
    said = (proc.stdout + proc.stderr).strip()
    result["no_driver"] = {"exit": proc.returncode, "said": said[-400:]}
    if proc.returncode == 0 or "libcuda.so.1" not in said or "libcublas" in said:
        result["failures"].append(f"llama-server --version without a driver: exit {proc.returncode}: {said[-300:]!r}; "
                                  "expected the loader to refuse naming libcuda.so.1 (and find cuBLAS in ../lib)")
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
        root, toolkit_s = toolkit()
        log(f"toolkit {TOOLKIT_VERSION} at {root} ({toolkit_s} s)")
        for profile in args.profile or list(PROFILES):
            archs = archs_of(profile_settings(profile)["runtime_build_cuda_archs"])
            bindir, cmake, build_s = build(profile, archs, root, args.jobs)
            started = time.monotonic()
            result = check(profile, archs, bindir, root)
            result.update(profile=profile, archs=archs, toolkit=TOOLKIT_VERSION, toolkit_seconds=toolkit_s,
                          build_seconds=build_s, check_seconds=round(time.monotonic() - started, 1), jobs=args.jobs,
                          cmake=cmake, checked_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
            (OUT / f"{profile}.json").write_text(json.dumps(result, indent=2) + "\n")
            if not result["failures"]:
                RECORDS.mkdir(parents=True, exist_ok=True)
                (RECORDS / f"{profile}.json").write_text(json.dumps({
                    "profile": profile, "fingerprint": fingerprint(profile), "checked_at": result["checked_at"],
                    "toolkit_version": TOOLKIT_VERSION, "jobs": args.jobs, "build_seconds": build_s,
                    "check_seconds": result["check_seconds"],
                    "sm": sorted({sm for b in result["binaries"] for sm in b["sm"]}),
                    "needed": sorted({n for b in result["binaries"] for n in b["needed"]}),
                    "shipped": result["shipped"], "without_driver": result["no_driver"]["said"][-200:]},
                    indent=2) + "\n")
            for line in result["failures"]:
                log(f"{profile}: FAILED: {line}")
            failed |= bool(result["failures"])
            log(f"{profile}: sm {', '.join(archs)}: built in {build_s} s; "
                + ("passed" if not result["failures"] else "FAILED")
                + f"; NEEDED {sorted({n for b in result['binaries'] for n in b['needed']})}; "
                f"ships {result['shipped']}; without a driver: {result['no_driver']['said'][-120:]!r}")
    except (CheckError, ProofError) as exc:
        log(f"FAILED: {exc}")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
