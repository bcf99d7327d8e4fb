#!/usr/bin/env python3
"""make vllm-gpu-check: the vLLM engine's CUDA locks checked on a machine
without a GPU.

For each CUDA lock (roles/runtime_build/files/vllm/cuda-*.lock):
1. its wheels fetched as the controller's bundle holds them
   (tools/bundle.py vllm --lock NAME: every wheel's sha256 against the lock);
2. the device code of vLLM's kernels (vllm/_C, vllm/_moe_C, flash-attention
   2) and of torch's CUDA library, listed by cuobjdump (the pinned toolkit's,
   from the package index) straight from the wheels, whatever their
   architecture, and each CUDA profile that installs the lock judged against
   it: every GPU of the profile (runtime_build_cuda_archs) runs vLLM's and
   torch's code from a cubin, or from PTX the driver compiles, or the check
   fails naming the GPU and what the libraries hold;
3. where this machine can run the lock (its architecture and CPython), the
   lock installed from the bundle into a fresh environment the way a node
   installs it, imported, and torch's CUDA, NCCL and architecture list read
   (torch answers them without a GPU).

Writes build/vllm-gpu-check/<lock>.json with the figures and, when the lock
passed, its record tests/vllm-gpu-check/<lock>.json (the lock's sha256, what
was found, the figures) and the list of the code every GPU must run beside
the lock (roles/runtime_build/files/vllm/<lock>.code.json), which preflight
judges each node's GPUs against: make test (tests/unit/test_vllm_gpu_check.py)
fails when a lock changed since its record or its list.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
import twinrail.loader  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.engines.vllm import env  # noqa: E402
from ansible.module_utils.engines.vllm.env import lock_needs, lock_pins  # noqa: E402
from ansible.module_utils.gpu import cuda_code  # noqa: E402
from ansible.module_utils.inventory import profiles  # noqa: E402
import bundle  # noqa: E402  pylint: disable=wrong-import-position

LOCKS = REPO / "roles" / "runtime_build" / "files" / "vllm"
RECORDS = REPO / "tests" / "vllm-gpu-check"
OUT = REPO / "build" / "vllm-gpu-check"
CACHE = Path.home() / ".cache" / "twinrail" / "vllm-gpu-check"
CUOBJDUMP = "nvidia-cuda-cuobjdump==13.5.37"  # the toolkit cuda-check pins
# the libraries whose code must run on each GPU, and one that is only reported
MUST = {"vllm": ("vllm/_C_stable_libtorch.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so"),
        "torch": ("torch/lib/libtorch_cuda.so",)}
REPORTED = {"vllm": ("vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",)}
IMPORT = """
import json, torch, vllm
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
                  "nccl": ".".join(map(str, torch.cuda.nccl.version())), "arch_list": torch.cuda.get_arch_list(),
                  "vllm": vllm.__version__, "gpus_seen": torch.cuda.device_count()}))
"""


class CheckError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"vllm-gpu-check: {msg}", flush=True)


def cuobjdump() -> Path:
    tool = CACHE / "cuobjdump" / "nvidia" / "cu13" / "bin" / "cuobjdump"
    if not tool.exists():
        wheels = CACHE / "wheels"
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                        CUOBJDUMP, "-d", str(wheels)], check=True)
        with zipfile.ZipFile(next(wheels.glob("nvidia_cuda_cuobjdump-*.whl"))) as wheel:
            wheel.extractall(CACHE / "cuobjdump")
        tool.chmod(0o755)
    return tool


def device_code(tool: Path, wheel: Path, member: str) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
        path = Path(archive.extract(member, tmp))
        codes = []
        for flag in ("--list-elf", "--list-ptx"):
            proc = subprocess.run([str(tool), flag, str(path)], capture_output=True, text=True, check=False)
            if proc.returncode != 0 and "does not contain" not in proc.stderr:
                raise CheckError(f"cuobjdump {flag} {member}: {(proc.stdout + proc.stderr).strip()[-400:]}")
            codes += cuda_code.listed(proc.stdout)
    return codes


def install(lock: Path, wheels: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "env"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        start = time.monotonic()
        proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index",
                               "--no-deps", "--require-hashes", "--find-links", str(wheels), "-r", str(lock)],
                              capture_output=True, text=True, check=False)
        seconds = round(time.monotonic() - start, 1)
        if proc.returncode:
            raise CheckError(f"{lock.name}: pip install failed: {proc.stderr.strip()[-600:]}")
        start = time.monotonic()
        proc = subprocess.run([str(venv / "bin" / "python"), "-c", IMPORT], capture_output=True, text=True,
                              check=False)
        if proc.returncode:
            raise CheckError(f"{lock.name}: the environment does not import: {proc.stderr.strip()[-600:]}")
        found = json.loads(proc.stdout.strip().splitlines()[-1])
        found.update(install_seconds=seconds, import_seconds=round(time.monotonic() - start, 1))
        # the runtime gate's own import (vLLM's platform and kernels), as a node runs it: without a GPU
        # vLLM's platform is not CUDA, and what it says is recorded as it is
        proc = subprocess.run([str(venv / "bin" / "python"), "-c", env.IMPORT], capture_output=True, text=True,
                              check=False)
        found["gate_import"] = {"rc": proc.returncode, "stdout": proc.stdout.strip().splitlines()[-1:],
                                "stderr": [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-3:]}
        return found


def check(name: str, do_install: bool) -> dict:
    lock = LOCKS / f"{name}.lock"
    text = lock.read_text()
    pins = lock_pins(text, str(lock))
    needs = lock_needs(pins, str(lock))
    start = time.monotonic()
    wheels = bundle.fetch_vllm_wheels(name)
    fetched = {p["wheel"]: (wheels / p["wheel"]).stat().st_size for p in pins.values()}
    result = {"lock": name, "lock_sha256": hashlib.sha256(text.encode()).hexdigest(), "needs": needs,
              "wheels": len(fetched), "bytes": sum(fetched.values()),
              "bundle_seconds": round(time.monotonic() - start, 1), "code": {}, "coverage": {}, "failures": []}
    tool, codes = cuobjdump(), {}
    for dist, members in (*MUST.items(), *REPORTED.items()):
        wheel = wheels / pins[dist]["wheel"]
        for member in members:
            codes[member] = device_code(tool, wheel, member)
            result["code"][member] = [cuda_code.name(c) for c in codes[member]]
            log(f"{name}: {member}: {', '.join(result['code'][member])}")
    if do_install and platform.machine() == needs["arch"] and ".".join(platform.python_version_tuple()[:2]) == needs["python"]:
        result["installed"] = install(lock, wheels)
        log(f"{name}: installed in {result['installed']['install_seconds']} s: torch {result['installed']['torch']} "
            f"CUDA {result['installed']['cuda']} NCCL {result['installed']['nccl']}, vllm {result['installed']['vllm']}")
        result["code"]["torch.cuda.get_arch_list()"] = [
            cuda_code.name(c) for c in cuda_code.from_names(result["installed"]["arch_list"])]
    for profile in profiles.names():
        if profiles.setting(profile, "runtime_build_vllm_lock_name") != name:
            continue
        verdicts = []
        for cc in str(profiles.setting(profile, "runtime_build_cuda_archs")).split(";"):
            for member in (m for ms in MUST.values() for m in ms):
                found = cuda_code.coverage(codes[member], cc.strip())
                verdicts.append(cuda_code.said(cc.strip(), member, found, codes[member]))
                if not found["runs"]:
                    result["failures"].append(f"{profile}: {verdicts[-1]}")
        result["coverage"][profile] = verdicts
    return result


def code_list(record: dict) -> dict:
    """What preflight reads beside the lock (<lock>.code.json): the device
    code of the libraries every GPU must run, for this lock's sha256."""
    return {"lock": record["lock"], "lock_sha256": record["lock_sha256"],
            "code": {m: record["code"][m] for ms in MUST.values() for m in ms}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--lock", action="append", help="the CUDA lock(s) to check (default: every cuda-*.lock)")
    parser.add_argument("--no-install", action="store_true", help="list and judge the code only")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    failed = False
    for name in args.lock or sorted(p.stem for p in LOCKS.glob("cuda-*.lock")):
        try:
            result = check(name, not args.no_install)
        except (CheckError, bundle.BundleError, subprocess.CalledProcessError, OSError, ValueError) as exc:
            log(f"{name}: FAILED: {exc}")
            failed = True
            continue
        (OUT / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
        for profile, verdicts in result["coverage"].items():
            for verdict in verdicts:
                log(f"{name}: {profile}: {verdict}")
        if result["failures"]:
            log(f"{name}: FAILED: " + "; ".join(result["failures"]))
            failed = True
            continue
        RECORDS.mkdir(parents=True, exist_ok=True)
        record = {k: v for k, v in result.items() if k != "failures"}
        record["checked_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        (RECORDS / f"{name}.json").write_text(json.dumps(record, indent=2) + "\n")
        (LOCKS / f"{name}.code.json").write_text(json.dumps(code_list(record), indent=2) + "\n")
        log(f"{name}: passed; record {(RECORDS / f'{name}.json').relative_to(REPO)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
