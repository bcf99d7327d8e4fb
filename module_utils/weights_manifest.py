# -*- coding: utf-8 -*-
"""Weight manifests (SHA256SUMS style) and their verification.

Files are hashed in parallel (hashlib releases the GIL while it digests,
so threads use every core up to the disk's bandwidth), in large blocks. A
verification cache beside the weights (path, size, mtime, inode, sha256)
lets unchanged files be trusted without being read again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

BLOCK = 8 << 20
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")


class ManifestError(ValueError):
    """A manifest line that is not `<sha256>  <relative path>`."""


def parse_sha256sums(text: str) -> dict[str, str]:
    """{relative path: sha256} from `sha256sum` output (text or binary mode)."""
    entries = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if not match:
            raise ManifestError(f"line {number}: expected '<sha256>  <relative path>', "
                                f"got {line[:80]!r}")
        digest, path = match.group(1).lower(), match.group(2)
        if path.startswith("/") or ".." in path.split("/"):
            raise ManifestError(f"line {number}: expected a path inside the model "
                                f"directory, got {path!r}")
        entries[path] = digest
    if not entries:
        raise ManifestError("no entry: an empty manifest verifies nothing")
    return entries


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _identity(st: os.stat_result) -> dict:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def verify(root: str, manifest: dict[str, str], cache: dict | None = None,
           force: bool = False, workers: int | None = None,
           sizes: dict[str, int] | None = None) -> dict:
    """Check every manifest entry under root.

    Returns {'files': {path: status}, 'hashed': [paths read], 'cache': new cache,
    'ok': bool}; status is ok, missing, size_mismatch, hash_mismatch or extra.
    """
    cache = {} if cache is None or force else cache
    files, todo, new_cache = {}, [], {}
    for rel in sorted(manifest):
        path = os.path.join(root, rel)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            files[rel] = "missing"
            continue
        if sizes and rel in sizes and st.st_size != sizes[rel]:
            files[rel] = "size_mismatch"
            continue
        known = cache.get(rel)
        if known and {k: known.get(k) for k in ("size", "mtime_ns", "inode")} == _identity(st):
            files[rel] = "ok" if known["sha256"] == manifest[rel] else "hash_mismatch"
            new_cache[rel] = known
        else:
            todo.append((rel, path, st))
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        digests = list(pool.map(lambda item: sha256_file(item[1]), todo))
    for (rel, _path, st), digest in zip(todo, digests):
        files[rel] = "ok" if digest == manifest[rel] else "hash_mismatch"
        new_cache[rel] = dict(_identity(st), sha256=digest)
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            if rel not in manifest and not name.startswith(".twinrail"):
                files[rel] = "extra"
    bad = {k: v for k, v in files.items() if v not in ("ok", "extra")}
    return {"files": files, "hashed": [t[0] for t in todo], "cache": new_cache,
            "ok": not bad}


def load_cache(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
