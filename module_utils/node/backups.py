# -*- coding: utf-8 -*-
"""System backups with GNU tar: the set of backups in a target directory,
what a new one will need, the tar command lines, retention.

Shared by the system_backup module and its tests; no Ansible imports.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time

# the archive's name: system-<UTC time>.tar[.<compression>]
NAME = re.compile(r"^system-(\d{8}T\d{6}Z)\.tar(\.(gz|zst|xz))?$")
COMPRESSORS = {
    "zstd": (".zst", ["zstd", "-q", "-T0", "-3"], ["zstd", "-q", "-d", "-c"]),
    "gzip": (".gz", ["gzip", "-6"], ["gzip", "-d", "-c"]),
    "xz": (".xz", ["xz", "-T0", "-3"], ["xz", "-d", "-c"]),
    "none": ("", None, None),
}
# never in a system backup: kernel and runtime file systems, scratch space
ALWAYS_EXCLUDED = ["/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp", "/mnt", "/media", "/lost+found"]


class BackupError(Exception):
    """A backup that cannot be taken or used, with the reason."""


def archive_name(now: float, compression: str) -> str:
    return "system-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)) + ".tar" + COMPRESSORS[compression][0]


def existing(directory: str) -> list[dict]:
    """Backups in a host's directory, oldest first: each archive with its
    metadata (.json beside it) when that is readable."""
    found = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        match = NAME.match(name)
        if not match:
            continue
        meta_path = os.path.join(directory, name + ".json")
        try:
            with open(meta_path, encoding="utf-8") as handle:
                meta = json.load(handle)
        except (OSError, ValueError):
            meta = {}
        found.append({"name": name, "path": os.path.join(directory, name), "stamp": match.group(1),
                      "complete": bool(meta.get("sha256")), "meta": meta})
    return sorted(found, key=lambda b: b["stamp"])


def newest_complete(backups: list[dict]) -> dict | None:
    complete = [b for b in backups if b["complete"]]
    return complete[-1] if complete else None


def needs_backup(backups: list[dict], now: float, max_age_hours: float, fingerprint: str) -> tuple[bool, str]:
    """Whether to take a backup now, and why (or why not)."""
    newest = newest_complete(backups)
    if newest is None:
        return True, "no backup yet (first deploy)"
    age_hours = (now - newest["meta"].get("created", 0)) / 3600
    if age_hours > max_age_hours:
        return True, f"the newest backup, {newest['name']}, is {age_hours:.1f} h old (more than {max_age_hours} h)"
    if fingerprint and newest["meta"].get("fingerprint") != fingerprint:
        return True, (f"the kernel, network or runtime settings changed since {newest['name']} "
                      f"(fingerprint {newest['meta'].get('fingerprint', 'none')[:12]} -> {fingerprint[:12]})")
    return False, f"{newest['name']} is {age_hours:.1f} h old and the settings it was taken under are unchanged"


def to_delete(backups: list[dict], retention: int) -> list[dict]:
    """What retention removes once a new backup is complete: the oldest
    complete ones beyond `retention`, and incomplete leftovers."""
    if retention < 1:
        raise BackupError(f"retention must be at least 1, got {retention}: nothing is deleted")
    complete = [b for b in backups if b["complete"]]
    incomplete = [b for b in backups if not b["complete"]]
    return complete[:max(0, len(complete) - retention)] + incomplete


def excluded(target: str, extra: list[str]) -> list[str]:
    paths = []
    for path in ALWAYS_EXCLUDED + [target] + list(extra):
        norm = os.path.normpath(path)
        if not os.path.isabs(norm):
            raise BackupError(f"excluded path {path!r} is not absolute")
        if norm == "/":
            raise BackupError("the root file system itself cannot be excluded")
        if norm not in paths:
            paths.append(norm)
    return paths


def estimate(root: str, excludes: list[str]) -> int:
    """Bytes the files of root's file system hold, outside the excludes
    (what an uncompressed archive needs at most)."""
    device = os.lstat(root).st_dev
    total = 0
    skip = {os.path.normpath(e) for e in excludes}
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            path = entry.path if root == "/" else "/" + os.path.relpath(entry.path, root)
            if path in skip:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_dev != device:
                continue
            if stat.S_ISDIR(info.st_mode):
                stack.append(entry.path)
            else:
                total += min(info.st_size, info.st_blocks * 512) if info.st_blocks else info.st_size
    return total


def tar_create_argv(root: str, excludes: list[str]) -> list[str]:
    argv = ["tar", "--create", "--file=-", "--one-file-system", "--xattrs", "--xattrs-include=*", "--acls",
            "--numeric-owner", "--sparse", "--warning=no-file-ignored", "--directory", root]
    for path in excludes:
        argv.append("--exclude=." + path)
    argv.append(".")
    return argv


def mount_points(root: str, mountinfo: str) -> list[str]:
    """What is mounted below root (not root itself), from the text of
    /proc/self/mountinfo, as absolute paths inside root: another file system
    (the weights' partition) or a file bound over one (a container's
    /etc/hosts). An in-place restore leaves them alone: tar cannot replace a
    mount point, and what is under one is not the backup's."""
    points = set()
    root = os.path.normpath(root)
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if root == "/":
            inside = point
        elif point.startswith(root + "/"):
            inside = point[len(root):]
        else:
            continue
        if inside not in ("", "/"):
            points.add(inside)
    return sorted(points)


def mount_points_within(points: list[str], paths: list[str]) -> list[str]:
    """The mount points a restore of paths (everything when empty) touches:
    one at or below a restored path, or one a restored path lies under
    (that path is then not restored at all, and must be said)."""
    if not paths:
        return list(points)
    norms = [os.path.normpath(p) for p in paths]
    return [m for m in points
            if any(m == q or m.startswith(q.rstrip("/") + "/") or q.startswith(m + "/") for q in norms)]


def tar_extract_argv(root: str, paths: list[str], skip: list[str] = ()) -> list[str]:
    argv = ["tar", "--extract", "--file=-", "--xattrs", "--xattrs-include=*", "--acls", "--numeric-owner",
            "--preserve-permissions", "--same-owner", "--directory", root]
    for path in skip:
        argv.append("--exclude=." + path)
    for path in paths:
        norm = os.path.normpath(path)
        if not os.path.isabs(norm) or norm == "/":
            raise BackupError(f"path to restore {path!r}: expected an absolute path below /")
        argv.append("." + norm)
    return argv
