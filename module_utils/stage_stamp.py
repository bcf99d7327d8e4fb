# -*- coding: utf-8 -*-
"""A stage's stamp: what it converged from, and the state it left.

A stage that finished on every node writes a stamp on each one
(/var/lib/twinrail/stamps/<stage>.json): the digest of its inputs (the
role's files, the modules and plugins, every setting the role's argument
spec names, for every node of the play, and what the role passes in) and
a snapshot of the state it manages (files with their content, owner and
mode; symbolic links; sysctl keys; systemd units' load, active and enable
states). The next run compares both: when neither moved, the stage's tasks
have nothing to do and only its gate runs; anything else (a setting, a
commit, a file edited on the node, a unit stopped) runs the stage whole.

Standard library only: the module (library/twinrail_stage_stamp.py) runs
this on the nodes, the action plugin the digest on the controller.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import stat

# Files larger than this are compared by size, modification and change
# time (runtime binaries, archives), smaller ones by content.
CONTENT_LIMIT = 4 * 1024 * 1024
STAMP_VERSION = 1


def digest(value) -> str:
    """sha256 of a JSON-able value, independent of key order."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tree_digest(roots) -> str:
    """sha256 over every file under the given paths (relative name and bytes), in a stable order."""
    sha = hashlib.sha256()
    for root in roots:
        if os.path.isfile(root):
            entries = [root]
        else:
            entries = []
            for top, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                entries.extend(os.path.join(top, f) for f in sorted(files) if not f.endswith(".pyc"))
        for path in entries:
            sha.update(os.path.relpath(path, os.path.dirname(root)).encode("utf-8") + b"\0")
            with open(path, "rb") as handle:
                sha.update(hashlib.sha256(handle.read()).digest())
    return sha.hexdigest()


def _file_entry(path: str):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(info.st_mode):
        return {"link": os.readlink(path)}
    entry = {"mode": oct(stat.S_IMODE(info.st_mode)), "uid": info.st_uid, "gid": info.st_gid}
    if stat.S_ISDIR(info.st_mode):
        entry["dir"] = True
        return entry
    # /proc and /sys report a size of 0 or 4096 whatever they hold: read them
    if info.st_size <= CONTENT_LIMIT or path.startswith(("/proc/", "/sys/")):
        try:
            with open(path, "rb") as handle:
                entry["sha256"] = hashlib.sha256(handle.read()).hexdigest()
        except OSError as err:
            entry["error"] = err.strerror
    else:
        # the change time too: a byte written in place with the old mtime
        # put back still moves it
        entry["size"] = info.st_size
        entry["mtime_ns"] = info.st_mtime_ns
        entry["ctime_ns"] = info.st_ctime_ns
    return entry


def expand(patterns) -> list[str]:
    """Paths named by the patterns: globs expanded, directories walked; a path that matches nothing stays (as absent)."""
    out: set[str] = set()
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        for path in matches:
            out.add(path)
            if os.path.isdir(path) and not os.path.islink(path):
                for top, dirs, files in os.walk(path):
                    dirs.sort()
                    out.update(os.path.join(top, name) for name in dirs + files)
    return sorted(out)


def read_sysctl(key: str):
    try:
        with open("/proc/sys/" + key.replace(".", "/"), encoding="utf-8") as handle:
            return " ".join(handle.read().split())
    except OSError:
        return None


def parse_systemctl_show(text: str, units: list[str]) -> dict:
    """`systemctl show -p Id,LoadState,ActiveState,UnitFileState U...` output, blocks in the order asked."""
    blocks = [b for b in text.strip().split("\n\n")] if text.strip() else []
    out = {}
    for unit, block in zip(units, blocks):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        out[unit] = {k: props.get(k, "") for k in ("LoadState", "ActiveState", "UnitFileState")}
    for unit in units[len(blocks):]:
        out[unit] = None
    return out


def snapshot(spec: dict, run_command=None) -> dict:
    """The managed state named by spec: {files: [...], sysctls: [...], units: [...], commands: [[argv], ...]}.

    `commands` are read-only commands whose output is live state no file
    holds (a rail's addresses, its routing table): their exit status and
    the sha256 of their output are kept."""
    state = {"files": {path: _file_entry(path) for path in expand(spec.get("files") or [])},
             "sysctls": {key: read_sysctl(key) for key in sorted(spec.get("sysctls") or [])}}
    units = sorted(set(spec.get("units") or []))
    commands = spec.get("commands") or []
    if (units or commands) and run_command is None:
        raise ValueError("units and commands need a way to run them")
    state["commands"] = {}
    for argv in commands:
        rc, out, _err = run_command([str(a) for a in argv])
        state["commands"][" ".join(str(a) for a in argv)] = {
            "rc": rc, "sha256": hashlib.sha256(out.encode("utf-8")).hexdigest()}
    if units:
        rc, out, err = run_command(["systemctl", "show", "--no-pager",
                                    "-p", "Id,LoadState,ActiveState,UnitFileState", *units])
        if rc != 0:
            raise RuntimeError(f"systemctl show failed ({rc}): {err.strip()}")
        state["units"] = parse_systemctl_show(out, units)
    else:
        state["units"] = {}
    return state


def differences(before: dict, now: dict, limit: int = 5) -> list[str]:
    """What moved between two snapshots, one phrase each (at most `limit`, then a count)."""
    out = []
    for kind, noun in (("files", "file"), ("sysctls", "sysctl"), ("units", "unit"),
                       ("commands", "the output of")):
        old, new = before.get(kind) or {}, now.get(kind) or {}
        for name in sorted(set(old) | set(new)):
            if old.get(name) == new.get(name):
                continue
            if new.get(name) is None:
                out.append(f"{noun} {name} is gone")
            elif old.get(name) is None:
                out.append(f"{noun} {name} appeared")
            else:
                fields = sorted(k for k in set(old[name]) | set(new[name])
                                if old[name].get(k) != new[name].get(k)) if isinstance(old[name], dict) else []
                what = ", ".join(fields) if fields else f"{old[name]!r} -> {new[name]!r}"
                out.append(f"{noun} {name} changed ({what})")
    if len(out) > limit:
        out = out[:limit] + [f"and {len(out) - limit} more"]
    return out


def changed_inputs(before: dict, now: dict, limit: int = 5) -> list[str]:
    """The names of the inputs whose digests differ; a setting changed on
    every node of the play is named once, "setting X on every node"."""
    names = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
    hosts = sorted({k.rsplit(" of ", 1)[1] for k in now if k.startswith(("setting ", "a secret setting of "))})
    by_setting: dict[str, list[str]] = {}
    out = []
    for name in names:
        if name.startswith("setting ") and " of " in name:
            setting, host = name[len("setting "):].rsplit(" of ", 1)
            by_setting.setdefault(setting, []).append(host)
        else:
            out.append(name)
    for setting, where in sorted(by_setting.items()):
        out.append(f"setting {setting} on every node" if hosts and sorted(where) == hosts
                   else f"setting {setting} of {', '.join(sorted(where))}")
    if len(out) > limit:
        out = out[:limit] + [f"and {len(out) - limit} more"]
    return out


def verdict(stamp, inputs_digest: str, now: dict, parts: dict | None = None) -> tuple[bool, str]:
    """(current, why) for a stamp read from the node (None: there is none)."""
    if not stamp:
        return False, "no stamp of a finished run"
    if stamp.get("version") != STAMP_VERSION:
        return False, "the stamp is of another version"
    if stamp.get("inputs") != inputs_digest:
        named = changed_inputs(stamp.get("parts") or {}, parts or {}) if stamp.get("parts") and parts else []
        return False, ("its inputs changed: " + "; ".join(named) if named
                       else "its inputs changed (settings, nodes or the stage's code)")
    moved = differences(stamp.get("state") or {}, now)
    if moved:
        return False, "its state moved: " + "; ".join(moved)
    return True, f"nothing changed since {stamp.get('time', 'its last run')}"
