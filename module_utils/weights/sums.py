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
import posixpath
import re
import time
from concurrent.futures import ThreadPoolExecutor

BLOCK = 8 << 20
# Names the suite keeps beside the weights; never part of a set.
PRIVATE_PREFIX = ".twinrail"
_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")
# ctime cannot be set from user space: a file written and given its old
# mtime back (touch -r) still shows as changed.
_IDENTITY = ("size", "mtime_ns", "ctime_ns", "inode")


class ManifestError(ValueError):
    """A manifest that cannot be trusted to describe a set of files."""


def parse_sha256sums(text: str) -> dict[str, str]:
    """{relative path: sha256} from `sha256sum` output (text or binary mode)."""
    entries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        if line.startswith("\\"):
            raise ManifestError(f"line {number}: escaped file names (a backslash or newline "
                                f"in the name) are not supported, got {line[:80]!r}")
        match = _LINE.match(line)
        if not match:
            raise ManifestError(f"line {number}: expected '<sha256>  <relative path>', "
                                f"got {line[:80]!r}")
        digest, path = match.group(1).lower(), match.group(2)
        normal = posixpath.normpath(path)
        if path.startswith("/") or normal == ".." or normal.startswith("../") or normal == ".":
            raise ManifestError(f"line {number}: expected a path inside the model "
                                f"directory, got {path!r}")
        if normal.split("/")[-1].startswith(PRIVATE_PREFIX):
            raise ManifestError(f"line {number}: {path!r}: names starting with "
                                f"{PRIVATE_PREFIX!r} are the suite's own")
        if normal in entries:
            raise ManifestError(f"line {number}: {normal!r} is listed twice "
                                f"(first on line {first_line[normal]})")
        entries[normal] = digest
        first_line[normal] = number
    if not entries:
        raise ManifestError("no entry: an empty manifest verifies nothing")
    return entries


def render_sha256sums(manifest: dict[str, str]) -> str:
    """The manifest as `sha256sum` writes it, sorted by path."""
    return "".join(f"{manifest[rel]}  {rel}\n" for rel in sorted(manifest))


def sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as handle:
        while block := handle.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _identity(st: os.stat_result) -> dict:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
            "inode": st.st_ino}


def list_files(root: str) -> list[str]:
    """Every regular file under root (relative, sorted), the suite's own excluded."""
    found = []
    for dirpath, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(PRIVATE_PREFIX))
        for name in names:
            if not name.startswith(PRIVATE_PREFIX):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(found)


def hash_files(root: str, rels: list[str], workers: int | None = None) -> dict[str, str]:
    """{rel: sha256} of the given files, hashed in parallel."""
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        digests = list(pool.map(lambda rel: sha256_file(os.path.join(root, rel)), rels))
    return dict(zip(rels, digests))


def verify(root: str, manifest: dict[str, str], cache: dict | None = None,
           force: bool = False, workers: int | None = None,
           sizes: dict[str, int] | None = None, only: list[str] | None = None) -> dict:
    """Check the manifest's entries (or `only` those) under root.

    Returns {'files': {path: status}, 'bad': [{file, status, expected, actual,
    size}], 'hashed': [paths read], 'hashed_bytes', 'sizes': {path: size of
    each good file}, 'cache': the new cache, 'ok': bool}; a status is ok,
    missing, size_mismatch, hash_mismatch or extra (extra only when every
    entry is checked).
    """
    cache = {} if cache is None or force else cache
    wanted = sorted(manifest) if only is None else sorted(set(only))
    unknown = [rel for rel in wanted if rel not in manifest]
    if unknown:
        raise ManifestError(f"not in the manifest: {', '.join(unknown)}")
    files, todo, new_cache, bad, good_sizes = {}, [], {}, [], {}
    for rel in wanted:
        path = os.path.join(root, rel)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            files[rel] = "missing"
            bad.append({"file": rel, "status": "missing", "expected": manifest[rel],
                        "actual": None, "size": None})
            continue
        if sizes and rel in sizes and st.st_size != sizes[rel]:
            files[rel] = "size_mismatch"
            bad.append({"file": rel, "status": "size_mismatch", "expected": manifest[rel],
                        "actual": None, "size": st.st_size, "expected_size": sizes[rel]})
            continue
        known = cache.get(rel)
        if known and {k: known.get(k) for k in _IDENTITY} == _identity(st):
            new_cache[rel] = known
            _judge(rel, known["sha256"], manifest, st, files, bad, good_sizes)
        else:
            todo.append((rel, st))
    digests = hash_files(root, [rel for rel, _st in todo], workers)
    for rel, st in todo:
        new_cache[rel] = dict(_identity(st), sha256=digests[rel])
        _judge(rel, digests[rel], manifest, st, files, bad, good_sizes)
    if only is None:
        for rel in list_files(root):
            if rel not in manifest:
                files[rel] = "extra"
    else:
        # entries not checked this time keep what the cache knew of them
        for rel, known in cache.items():
            if rel not in new_cache and rel in manifest:
                new_cache[rel] = known
    return {"files": files, "bad": bad, "hashed": [rel for rel, _st in todo],
            "hashed_bytes": sum(st.st_size for _rel, st in todo),
            "sizes": good_sizes, "cache": new_cache, "ok": not bad}


def _judge(rel, digest, manifest, st, files, bad, good_sizes):
    if digest == manifest[rel]:
        files[rel] = "ok"
        good_sizes[rel] = st.st_size
    else:
        files[rel] = "hash_mismatch"
        bad.append({"file": rel, "status": "hash_mismatch", "expected": manifest[rel],
                    "actual": digest, "size": st.st_size})


def promote(staging: str, final: str, result: dict, final_cache: dict) -> dict:
    """Move the staged files that verified into the final directory and
    drop the complete ones that did not: a bad file never counts as good.
    A file shorter than its expected size is a transfer cut midway: it is
    kept in staging, where the next transfer continues it.

    Returns {'moved', 'removed', 'partial', 'cache': final_cache updated};
    the content just verified moves with its cache entry (a rename may
    change the ctime, so the entry takes the new identity).
    """
    moved, removed, partial = [], [], []
    cache = dict(final_cache)
    short = {item["file"] for item in result["bad"] if item["status"] == "size_mismatch"
             and item["size"] < item["expected_size"]}
    for rel, status in sorted(result["files"].items()):
        source = os.path.join(staging, rel)
        if status == "ok":
            target = os.path.join(final, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(source, target)
            cache[rel] = dict(result["cache"][rel], **_identity(os.stat(target)))
            moved.append(rel)
        elif rel in short:
            partial.append(rel)
        elif status in ("hash_mismatch", "size_mismatch") and os.path.lexists(source):
            os.unlink(source)
            removed.append(rel)
    return {"moved": moved, "removed": removed, "partial": partial, "cache": cache}


def load_cache(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return files if isinstance(files, dict) else {}


def save_cache(path: str, cache: dict) -> bool:
    """Write the cache when it differs from what is on disk; True if written."""
    if load_cache(path) == cache and os.path.exists(path):
        return False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    partial = f"{path}.{os.getpid()}.tmp"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump({"version": 1, "written": int(time.time()), "files": cache}, handle,
                  indent=1, sort_keys=True)
    os.replace(partial, path)
    return True
