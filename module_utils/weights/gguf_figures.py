# -*- coding: utf-8 -*-
"""Model figures from a GGUF file's metadata, for the memory plan.

Reads the header and tensor table with the ``gguf`` package (the reader
llama.cpp publishes); the weights themselves are memory-mapped, not read.
A model on a node is read from its headers, cut there (gguf_cut.py).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import zlib

from ansible.module_utils.weights.gguf_cut import HeaderError, shards


class GGUFError(Exception):
    """The file is not a GGUF model the plan can use."""


def _field(reader, key: str, required: bool = True):
    field = reader.fields.get(key)
    if field is None:
        if required:
            raise GGUFError(f"metadata key '{key}' is missing")
        return None
    return field.contents()


def _reader(path: str):
    try:
        from gguf import GGUFReader  # pylint: disable=import-outside-toplevel
    except ImportError as exc:  # pragma: no cover - depends on the controller
        raise GGUFError("the 'gguf' Python package is missing on the controller "
                        "(it is in requirements.txt)") from exc
    try:
        return GGUFReader(path, "r")
    except (OSError, ValueError) as exc:
        raise GGUFError(f"cannot read {path} as GGUF: {exc}") from exc


def model_figures(path: str) -> dict:
    """params_b, bits_per_param, layers, kv_heads, head_dim, context_length
    of the model whose (first) file is path. A split model's metadata is in
    its first file, and each file holds its own part of the tensor table:
    the parameters and bytes are summed over every file."""
    try:
        files = shards(path)
    except HeaderError as exc:
        raise GGUFError(str(exc)) from exc
    reader = _reader(files[0])
    count = _field(reader, "split.count", required=False)
    if count is not None and int(count) != len(files):
        raise GGUFError(f"{path}: its metadata says split.count {count}, and its name says {len(files)} file(s)")
    arch = _field(reader, "general.architecture")
    heads = int(_field(reader, f"{arch}.attention.head_count"))
    key_length = _field(reader, f"{arch}.attention.key_length", required=False)
    embedding = int(_field(reader, f"{arch}.embedding_length"))
    params = size = 0
    for number, name in enumerate(files):
        part = reader if number == 0 else _reader(name)
        params += sum(int(t.n_elements) for t in part.tensors)
        size += sum(int(t.n_bytes) for t in part.tensors)
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
        "files": len(files),
    }


def figures_from_headers(headers: list[dict], where: str) -> dict:
    """model_figures of a model read elsewhere (gguf_cut.cut on the node
    that holds it): each file's header at the start of a sparse file of
    that file's size, read by the gguf package's own reader."""
    if not headers:
        raise GGUFError(f"{where}: no GGUF header was read")
    with tempfile.TemporaryDirectory(prefix="twinrail-gguf-") as folder:
        for entry in headers:
            name = os.path.basename(entry["file"])
            try:
                header = zlib.decompress(base64.b64decode(entry["header"]))
            except (ValueError, zlib.error) as exc:
                raise GGUFError(f"{where}: {name}: the header came back damaged ({exc})") from exc
            with open(os.path.join(folder, name), "wb") as handle:
                handle.write(header)
                handle.truncate(int(entry["size"]))
        try:
            return model_figures(os.path.join(folder, os.path.basename(headers[0]["file"])))
        except GGUFError as exc:
            raise GGUFError(str(exc).replace(folder, where)) from exc


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
