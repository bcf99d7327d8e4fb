# -*- coding: utf-8 -*-
"""Free-space checks for paths that may not exist yet.

A path is resolved to its nearest existing ancestor, whose file system
(st_dev) and free space (statvfs, space available to unprivileged users)
are read. Needs on one file system add up: weights and runtime on the same
disk share its free space.
"""

from __future__ import annotations

import os

GIB = 1 << 30


def nearest_existing(path: str) -> str:
    path = os.path.normpath(path)
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def mount_point(path: str) -> str:
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def held_bytes(du_output: str) -> int:
    """The `total` line of `du -s -B1 --apparent-size --total` (0 when du found none of the paths)."""
    for line in du_output.splitlines():
        size, _, name = line.partition("\t")
        if name == "total":
            return int(size)
    return 0


def check(needs: list[dict], host: str, stat=os.stat, statvfs=os.statvfs) -> dict:
    """needs: [{path, bytes, what}] -> {'filesystems': [...], 'failures': [...]}"""
    groups: dict[int, dict] = {}
    for need in needs:
        existing = nearest_existing(need["path"])
        dev = stat(existing).st_dev
        vfs = statvfs(existing)
        entry = groups.setdefault(dev, {
            "mount": mount_point(existing),
            "available_bytes": vfs.f_bavail * vfs.f_frsize,
            "total_bytes": vfs.f_blocks * vfs.f_frsize,
            "required_bytes": 0, "needs": []})
        entry["required_bytes"] += int(need["bytes"])
        entry["needs"].append(f"{need['what']} at {need['path']} "
                              f"({int(need['bytes']) / GIB:.2f} GiB)")
    failures = []
    for entry in groups.values():
        entry["fits"] = entry["available_bytes"] >= entry["required_bytes"]
        if not entry["fits"]:
            failures.append(
                f"{host}: disk: {entry['mount']} has "
                f"{entry['available_bytes'] / GIB:.2f} GiB free, required "
                f"{entry['required_bytes'] / GIB:.2f} GiB for "
                f"{' + '.join(entry['needs'])}")
    return {"filesystems": list(groups.values()), "failures": failures}
