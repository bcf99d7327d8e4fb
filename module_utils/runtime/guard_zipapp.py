# -*- coding: utf-8 -*-
"""The guard's artifact: the ``twinrail`` package's guard as a zipapp that
the nodes' python3 runs (standard library only), built byte for byte the
same from the same sources (members sorted, fixed timestamps and modes), so
its sha256 names it: the release is ``<package version>-<sha256[:12]>``.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import zipfile

SHEBANG = b"#!/usr/bin/python3\n"
# what the zipapp holds: the package's marker and the guard, nothing else
MEMBERS = ("twinrail/__init__.py", "twinrail/guard/")
MAIN = b'"""twinrail-guard (zipapp)."""\nfrom twinrail.guard.cli import main\n\nmain()\n'
_EPOCH = (1980, 1, 1, 0, 0, 0)


def package_version(source: str) -> str:
    """``__version__`` of the package under ``source`` (the folder holding twinrail/)."""
    path = os.path.join(source, "twinrail", "__init__.py")
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the package ({exc.strerror})") from exc
    match = re.search(r'^__version__\s*=\s*["\']([0-9A-Za-z.+-]+)["\']', text, re.M)
    if not match:
        raise ValueError(f"{path}: no __version__ = \"X.Y.Z\" line")
    return match.group(1)


def sources(source: str) -> list[str]:
    """The package files the zipapp holds, relative to ``source``, sorted."""
    found = []
    for member in MEMBERS:
        path = os.path.join(source, member)
        if member.endswith("/"):
            if not os.path.isdir(path):
                raise ValueError(f"{path}: missing (expected the guard's package)")
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith(".py"):
                        found.append(os.path.relpath(os.path.join(root, name), source).replace(os.sep, "/"))
        elif os.path.isfile(path):
            found.append(member)
        else:
            raise ValueError(f"{path}: missing (expected the guard's package)")
    return sorted(found)


def build(source: str) -> tuple[bytes, dict]:
    """(the zipapp's bytes, {release, version, sha256, members})."""
    buffer = io.BytesIO()
    members = sources(source)
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        entries = [("__main__.py", MAIN)]
        for name in members:
            with open(os.path.join(source, name), "rb") as handle:
                entries.append((name, handle.read()))
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    data = SHEBANG + buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    version = package_version(source)
    return data, {"release": f"{version}-{digest[:12]}", "version": version, "sha256": digest,
                  "members": members}
