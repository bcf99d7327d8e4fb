"""make gpu-proof's first step, on the controller: the bundled llama.cpp
source trimmed to what the build needs, a small model derived from the
lab's SmolLM2-135M, the runtime stage's own build script rendered by
Ansible for a CPU and a CUDA build, and a manifest with every file's
sha256, all under 64 MiB (what one call to the GPU machine carries).
tools/gpu_proof.py runs the second step there."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tools"))
# pylint: disable=wrong-import-position
from bundle import sha256_file as sha256  # noqa: E402
import twinrail.loader  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.weights import gguf_figures  # noqa: E402
from ansible.module_utils.runtime import build as runtime_build  # noqa: E402

BUNDLE = Path.home() / ".cache" / "twinrail" / "bundle"
ARCHIVE = BUNDLE / "runtime" / "llama_cpp_python-0.3.36.tar.gz"
SUBDIR = "llama_cpp_python-0.3.36/vendor/llama.cpp"
SMOLLM2 = BUNDLE / "models" / "smollm2-135m-instruct" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PREPARED = REPO / "build" / "gpu-proof"
WORK = Path(os.environ.get("TWINRAIL_GPU_PROOF_WORK", "/tmp/twinrail-gpu-proof"))
CARRY_LIMIT = 64 << 20
LAYERS = 4
PLACEHOLDERS = ("@CUDA_ARCHS@", "@CUDA_ROOT@", "@ISA_FLAGS@")

# What the build does not need: the documentation, the vocabularies of the
# tests, the other backends, the web UI's sources (its build step provisions
# the assets it finds, none offline), tests, examples and Python tooling.
TRIM_DIRS = (
    "docs", "models", "media", "benches", "tests", "gguf-py", "examples", "pocs", "conversion", "requirements",
    "skills", ".devops", ".github", "tools/ui/src", "tools/ui/tests", "tools/ui/static",
) + tuple(f"ggml/src/ggml-{name}" for name in (
    "vulkan", "sycl", "metal", "opencl", "cann", "musa", "hexagon", "et", "webgpu", "zdnn", "zendnn", "openvino",
    "virtgpu", "hip"))
TRIM_SUFFIXES = (".gguf", ".png", ".jpg", ".gif", ".mp4", ".wasm")


class ProofError(RuntimeError):
    """A step of the proof failed; the message says which and why."""


def trimmed(member: tarfile.TarInfo) -> bool:
    """Whether the archive's member is left out of the proof's source."""
    if not member.name.startswith(SUBDIR + "/"):
        return True
    rel = member.name[len(SUBDIR) + 1:]
    return (any(rel == d or rel.startswith(d + "/") for d in TRIM_DIRS)
            or (member.isfile() and rel.endswith(TRIM_SUFFIXES)))


def trim_source(archive: Path, out: Path) -> dict:
    """The llama.cpp tree of the bundled sdist, trimmed, as tar.xz, under
    the same path (the build script's source directory)."""
    kept = dropped = 0
    with tarfile.open(archive) as src, tarfile.open(out, "w:xz", preset=9) as dst:
        for member in src:
            if trimmed(member):
                dropped += member.size
                continue
            kept += member.size
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    return {"kept_bytes": kept, "dropped_bytes": dropped}


def derive_model(source: Path, out: Path, layers: int) -> dict:
    """The model's first ``layers`` blocks with its embeddings, norm and
    tokenizer, block_count set to match (gguf-py's reader and writer)."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter  # pylint: disable=import-outside-toplevel

    reader = GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(out, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field.contents()
        if name == f"{arch}.block_count":
            value = layers
        kind = field.types[0]
        sub = field.types[-1] if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(name, value, kind, sub_type=sub)
    kept = 0
    for tensor in reader.tensors:
        match = re.match(r"blk\.(\d+)\.", tensor.name)
        if match and int(match.group(1)) >= layers:
            continue
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape,
                          raw_dtype=tensor.tensor_type)
        kept += 1
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    figures = gguf_figures.model_figures(str(out))
    if figures["layers"] != layers:
        raise ProofError(f"prepare: the derived model reads {figures['layers']} layers, expected {layers}")
    return {"source": source.name, "source_sha256": sha256(source), "layers": layers, "tensors": kept,
            "architecture": arch, "figures": figures}


def render_build_scripts(builds: dict, root: Path, ccache: bool = False, jobs: str = "@JOBS@",
                         version: str = "llama-cpp-python 0.3.36 (trimmed for make gpu-proof)") -> None:
    """The runtime stage's build script, rendered by Ansible from the role's
    template, for each build: {build id: (where the script goes, its CMake
    definitions)}, building under root/<build id>/ from the archive's subdir."""
    play = [{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}",
                 "runtime_build_version": version,
                 "runtime_build_root": str(root), "runtime_build_source": "archive",
                 "runtime_build_archive_subdir": SUBDIR, "runtime_build_ccache": ccache,
                 "runtime_build_ccache_max_size": "20G", "runtime_build_jobs": jobs,
                 "runtime_build_targets": ["llama-server", "ggml-rpc-server", "llama-bench"]},
        "tasks": [{"name": f"Render the {build_id} build script", "ansible.builtin.template": {
            "src": str(REPO / "roles" / "runtime_build" / "templates" / "build.sh.j2"),
            "dest": str(dest), "mode": "0755"},
            "vars": {"__runtime_build_id": build_id, "__runtime_build_cmake": cmake}}
            for build_id, (dest, cmake) in builds.items()],
    }]
    with tempfile.TemporaryDirectory() as tmp:
        book = Path(tmp) / "render.yml"
        book.write_text(json.dumps(play))
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
        playbook = Path(sys.executable).parent / "ansible-playbook"  # the venv's, beside its Python
        proc = subprocess.run([str(playbook), "-i", "localhost,", str(book)], cwd=REPO, env=env,
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ProofError(f"rendering the build script failed: {(proc.stdout + proc.stderr)[-1500:]}")


def render_scripts(out: Path) -> dict:
    """The runtime stage's build script for a CPU and a CUDA build
    (architecture and toolkit filled in where the GPU is found)."""
    variants = {name: {"cuda": cuda, "cmake": runtime_build.cmake_definitions([PLACEHOLDERS[2]], cuda, PLACEHOLDERS[0], False,
                                                                    PLACEHOLDERS[1])}
                for name, cuda in (("cpu", False), ("cuda", True))}
    try:
        render_build_scripts({f"build-{name}": (out / f"build-{name}.sh", spec["cmake"])
                              for name, spec in variants.items()}, WORK)
    except ProofError as exc:
        raise ProofError(f"prepare: {exc}") from None
    return {name: {"cuda": spec["cuda"], "cmake": spec["cmake"]} for name, spec in variants.items()}


def prepare(out: Path, layers: int) -> dict:
    for needed in (ARCHIVE, SMOLLM2):
        if not needed.is_file():
            raise ProofError(f"prepare: {needed} is absent: run `make bundle` first")
    out.mkdir(parents=True, exist_ok=True)
    source = out / "llama.cpp.tar.xz"
    trim = trim_source(ARCHIVE, source)
    model = derive_model(SMOLLM2, out / "model.gguf", layers)
    builds = render_scripts(out)
    files = {p.name: {"bytes": p.stat().st_size, "sha256": sha256(p)}
             for p in sorted(out.iterdir()) if p.name != "manifest.json"}
    total = sum(f["bytes"] for f in files.values())
    manifest = {"made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "archive": ARCHIVE.name,
                "archive_sha256": sha256(ARCHIVE), "subdir": SUBDIR, "trim": trim, "model": model,
                "builds": builds, "files": files, "total_bytes": total, "limit_bytes": CARRY_LIMIT}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if total > CARRY_LIMIT:
        raise ProofError(f"prepare: {out} holds {total >> 20} MiB, more than the {CARRY_LIMIT >> 20} MiB one call carries")
    return manifest
