"""The node's memory, cgroup-aware: what the guard's watermarks are shares of."""

from __future__ import annotations

import os

def _read(path: str) -> str:
    with open(path, encoding="ascii") as handle:
        return handle.read().strip()


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo's fields, in bytes."""
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if rest.split():
            values[key] = int(rest.split()[0]) * 1024
    return values


def read_meminfo(proc: str = "/proc") -> dict[str, int]:
    """The node's /proc/meminfo, in bytes."""
    return parse_meminfo(_read(os.path.join(proc, "meminfo")))


def node_memory(cgroup_root: str = "/sys/fs/cgroup", proc: str = "/proc") -> dict:
    """The node's memory: the smallest cgroup limit above this process's own
    cgroup (a container's), else the machine's. ``used`` leaves out the page
    cache the kernel can drop (inactive files), like the OOM killer does."""
    info = read_meminfo(proc)
    total = info["MemTotal"]
    result = {"total": total, "used": total - info.get("MemAvailable", info.get("MemFree", 0)),
              "source": "meminfo"}
    v2 = os.path.exists(os.path.join(cgroup_root, "cgroup.controllers"))
    rel = None
    for line in _read(os.path.join(proc, "self", "cgroup")).splitlines():
        _, controllers, path = line.split(":", 2)
        if (v2 and controllers == "") or (not v2 and "memory" in controllers.split(",")):
            rel = path
    if rel is not None:
        base = cgroup_root if v2 else os.path.join(cgroup_root, "memory")
        limit_file, usage_file, inactive_key = (
            ("memory.max", "memory.current", "inactive_file") if v2 else
            ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"))
        parts = [p for p in rel.split("/") if p]
        best = None
        # the process's own unit's limit is the unit's, not the node's
        own = 1 if parts and parts[-1].endswith((".service", ".scope")) else 0
        for depth in range(len(parts) - own, -1, -1):
            directory = os.path.join(base, *parts[:depth])
            try:
                limit = int(_read(os.path.join(directory, limit_file)))
            except (OSError, ValueError):  # absent, or "max"
                continue
            if limit < total and (best is None or limit < best[0]):
                best = (limit, directory)
        if best is not None:
            limit, directory = best
            usage = int(_read(os.path.join(directory, usage_file)))
            inactive = 0
            for line in _read(os.path.join(directory, "memory.stat")).splitlines():
                key, _, value = line.partition(" ")
                if key == inactive_key:
                    inactive = int(value)
            result = {"total": limit, "used": max(0, usage - inactive), "source": directory}
    result["percent"] = round(100.0 * result["used"] / result["total"], 1)
    return result
