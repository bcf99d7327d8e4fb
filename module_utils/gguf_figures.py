# -*- coding: utf-8 -*-
"""Model figures from a GGUF file's metadata, for the memory plan.

Reads the header and tensor table with the ``gguf`` package (the reader
llama.cpp publishes); the weights themselves are memory-mapped, not read.
"""

from __future__ import annotations

import hashlib
import json
import os


class GGUFError(Exception):
    """The file is not a GGUF model the plan can use."""


def _field(reader, key: str, required: bool = True):
    field = reader.fields.get(key)
    if field is None:
        if required:
            raise GGUFError(f"metadata key '{key}' is missing")
        return None
    return field.contents()


def model_figures(path: str) -> dict:
    """params_b, bits_per_param, layers, kv_heads, head_dim, context_length."""
    try:
        from gguf import GGUFReader  # pylint: disable=import-outside-toplevel
    except ImportError as exc:  # pragma: no cover - depends on the controller
        raise GGUFError("the 'gguf' Python package is missing on the controller "
                        "(it is in requirements.txt)") from exc
    try:
        reader = GGUFReader(path, "r")
    except (OSError, ValueError) as exc:
        raise GGUFError(f"cannot read {path} as GGUF: {exc}") from exc
    arch = _field(reader, "general.architecture")
    heads = int(_field(reader, f"{arch}.attention.head_count"))
    key_length = _field(reader, f"{arch}.attention.key_length", required=False)
    embedding = int(_field(reader, f"{arch}.embedding_length"))
    params = sum(int(t.n_elements) for t in reader.tensors)
    size = sum(int(t.n_bytes) for t in reader.tensors)
    if params == 0:
        raise GGUFError(f"{path} has no tensors")
    return {
        "architecture": arch,
        "name": _field(reader, "general.name", required=False) or "",
        "params_b": params / 1e9,
        "bits_per_param": size * 8 / params,
        "tensor_bytes": size,
        "layers": int(_field(reader, f"{arch}.block_count")),
        "kv_heads": int(_field(reader, f"{arch}.attention.head_count_kv", required=False)
                        or heads),
        "head_dim": int(key_length) if key_length else embedding // heads,
        "context_length": int(_field(reader, f"{arch}.context_length")),
    }


def cached_model_figures(path: str, cache_dir: str | None = None) -> dict:
    """model_figures, kept per file (its real path, size, modification time
    and inode) in cache_dir (default ~/.cache/twinrail/gguf-figures): the
    gguf reader walks the whole tensor table, seconds for a large model, on
    every run of the preflight stage. A file that changed is read again."""
    real = os.path.realpath(path)
    try:
        info = os.stat(real)
    except OSError as exc:
        raise GGUFError(f"cannot read {path} as GGUF: {exc}") from exc
    key = [real, info.st_size, info.st_mtime_ns, info.st_ino]
    cache_dir = cache_dir or os.path.expanduser("~/.cache/twinrail/gguf-figures")
    entry = os.path.join(cache_dir, hashlib.sha256(real.encode("utf-8")).hexdigest() + ".json")
    try:
        with open(entry, encoding="utf-8") as handle:
            kept = json.load(handle)
        if kept.get("key") == key:
            return kept["figures"]
    except (OSError, ValueError, AttributeError):
        pass
    figures = model_figures(path)
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{entry}.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump({"key": key, "figures": figures}, handle)
        os.replace(tmp, entry)
    except OSError:
        pass  # a read-only home: the figures are still right, only not kept
    return figures
