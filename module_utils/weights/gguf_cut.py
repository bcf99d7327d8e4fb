# -*- coding: utf-8 -*-
"""A GGUF file's header, cut from the file where it lies (python3's standard
library only: it runs on the master, where the weights are and the ``gguf``
package is not).

The header is everything before the tensors' data: the magic and version,
the metadata (key, type, value) and the tensor table (name, dimensions,
type, offset). Its length is found by walking those, as the format defines
them (ggml's docs/gguf.md); nothing of it is interpreted here. The
controller puts the header back at the start of a sparse file of the
file's size, and reads it with the ``gguf`` package's own reader
(gguf_figures.figures_from_headers): the figures come from the reader
llama.cpp publishes, and only the header crosses the network.
"""

from __future__ import annotations

import base64
import os
import re
import struct
import zlib

MAGIC = b"GGUF"
# fixed-size value types (docs/gguf.md: gguf_metadata_value_type)
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
# a header larger than this is not a model's (a 235B model's: a few MiB)
MAX_HEADER = 256 << 20
SHARD = re.compile(r"^(?P<prefix>.+)-(?P<number>\d{5})-of-(?P<count>\d{5})\.gguf$")


class HeaderError(Exception):
    """The file is not a GGUF file whose header can be cut."""


class _Reader:
    def __init__(self, handle, path: str):
        self.handle, self.path, self.pos = handle, path, 0

    def take(self, size: int) -> bytes:
        data = self.handle.read(size)
        if len(data) != size:
            raise HeaderError(f"{self.path}: the file ends inside its header (at byte {self.pos + len(data)})")
        self.pos += size
        if self.pos > MAX_HEADER:
            raise HeaderError(f"{self.path}: no GGUF header ends within {MAX_HEADER >> 20} MiB")
        return data

    def u32(self) -> int:
        return struct.unpack("<I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]

    def skip(self, size: int) -> None:
        self.take(size)

    def string(self) -> bytes:
        return self.take(self.u64())

    def value(self, kind: int) -> None:
        if kind in _FIXED:
            self.skip(_FIXED[kind])
        elif kind == _STRING:
            self.skip(self.u64())
        elif kind == _ARRAY:
            item, count = self.u32(), self.u64()
            if item in _FIXED:
                self.skip(_FIXED[item] * count)
            else:
                for _ in range(count):
                    self.value(item)
        else:
            raise HeaderError(f"{self.path}: unknown metadata value type {kind} at byte {self.pos}")


def header_length(path: str) -> int:
    """Bytes from the file's start to the end of its tensor table."""
    with open(path, "rb", buffering=1 << 20) as handle:
        reader = _Reader(handle, path)
        if reader.take(4) != MAGIC:
            raise HeaderError(f"{path}: not a GGUF file (no GGUF magic)")
        version = reader.u32()
        if version not in (2, 3):
            raise HeaderError(f"{path}: GGUF version {version}: expected 2 or 3")
        tensors, entries = reader.u64(), reader.u64()
        for _ in range(entries):
            reader.string()
            reader.value(reader.u32())
        for _ in range(tensors):
            reader.string()
            reader.skip(8 * reader.u32())  # dimensions
            reader.skip(4 + 8)  # type, offset
        return reader.pos


def shards(path: str) -> list[str]:
    """The files of the model whose first file is path: itself, or every
    `<prefix>-NNNNN-of-MMMMM.gguf` of a split model (llama.cpp's naming)."""
    name = os.path.basename(path)
    found = SHARD.match(name)
    if not found:
        return [path]
    count = int(found.group("count"))
    folder = os.path.dirname(path)
    files = [os.path.join(folder, f"{found.group('prefix')}-{n:05d}-of-{count:05d}.gguf") for n in range(1, count + 1)]
    missing = [os.path.basename(f) for f in files if not os.path.isfile(f)]
    if missing:
        raise HeaderError(f"{path}: a split model of {count} files, without {', '.join(missing[:3])}"
                          + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""))
    return files


def cut(path: str) -> list[dict]:
    """Each file of the model: its name, size and header (zlib, base64)."""
    out = []
    for name in shards(path):
        length = header_length(name)
        with open(name, "rb") as handle:
            header = handle.read(length)
        out.append({"file": os.path.basename(name), "size": os.path.getsize(name), "header_bytes": length,
                    "header": base64.b64encode(zlib.compress(header, 6)).decode("ascii")})
    return out
