#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Take, verify, prune and restore tar system backups of a node."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: system_backup
short_description: Tar system backups of a node, checked, pruned, restored
description:
  - With O(state=present) takes a backup of the root file system (one file
    system, extended attributes, ACLs, numeric owners, sparse files) when
    the node has none, when the newest is older than O(max_age_hours), or
    when O(fingerprint) differs from the one the newest was taken under.
    Excluded always are /proc, /sys, /dev, /run, /tmp, /var/tmp, /mnt,
    /media and the target, plus O(exclude) (the weights).
  - Before anything is written the target must be a writable directory
    with room for the files to archive (uncompressed, the worst case);
    otherwise the module fails naming the target, the bytes needed and the
    bytes free, and nothing is deleted.
  - The archive is written as a partial file, its sha256 computed on the
    way, then read back whole (decompressed and listed) before it is
    renamed and its metadata (.json) and checksum (.sha256) written.
    Only then does retention delete the oldest backups beyond O(retention)
    and incomplete leftovers.
  - With O(state=restored) checks the archive's sha256 first, then extracts
    O(paths) (all of it when empty) in place, leaving alone what is mounted
    below O(root) (another file system, a file bound over one).
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  target:
    description: Directory of this node's backups (a mount of NFS or a USB disk on real hardware).
    type: path
    required: true
  state:
    description: present takes a backup when one is due; restored extracts one.
    type: str
    choices: [present, restored]
    default: present
  compression:
    description: Compressor of the archive.
    type: str
    choices: [zstd, gzip, xz, none]
    default: zstd
  retention:
    description: Complete backups kept; at least 1.
    type: int
    default: 3
  max_age_hours:
    description: A backup younger than this, taken under the same fingerprint, is enough.
    type: float
    default: 24
  fingerprint:
    description: Digest of the kernel, network and runtime settings of this run.
    type: str
    default: ""
  exclude:
    description: More absolute paths to leave out (the weights, which have their own manifest).
    type: list
    elements: path
    default: []
  force:
    description: Take a backup even when a fresh one exists.
    type: bool
    default: false
  root:
    description: The file system to back up or restore into.
    type: path
    default: /
  backup:
    description: With state=restored, the archive's name, or latest.
    type: str
    default: latest
  paths:
    description: With state=restored, absolute paths to restore (all when empty).
    type: list
    elements: path
    default: []
"""

EXAMPLES = r"""
- name: Back the node up before the run changes it
  system_backup:
    host: "{{ inventory_hostname }}"
    target: /mnt/backup/{{ inventory_hostname }}
    retention: 3
    exclude: [/srv/twinrail/models]
    fingerprint: "{{ settings | to_json | hash('sha256') }}"

- name: Put one file back from the newest backup
  system_backup:
    host: "{{ inventory_hostname }}"
    target: /mnt/backup/{{ inventory_hostname }}
    state: restored
    paths: [/etc/twinrail/service/current/service.env]
"""

RETURN = r"""
taken:
  description: Whether a backup was taken (or would be, in check mode).
  returned: state=present
  type: bool
reason:
  description: Why a backup was or was not taken.
  returned: state=present
  type: str
backup:
  description: The newest complete backup, name, path, size, sha256, created, members.
  returned: success
  type: dict
deleted:
  description: Archives retention removed.
  returned: state=present
  type: list
estimate_bytes:
  description: What the files to archive hold, uncompressed.
  returned: when a backup was due
  type: int
restored:
  description: The paths restored (C(/) for everything the backup holds).
  returned: state=restored
  type: list
skipped:
  description:
    - Mount points the restore left alone (another file system, or a file bound over one), among the paths restored
      or holding one of them (such a path is not restored).
  returned: state=restored
  type: list
"""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.node.backups import (COMPRESSORS, BackupError, archive_name, estimate,
                                                 excluded, existing, mount_points, mount_points_within,
                                                 needs_backup, newest_complete, tar_create_argv,
                                                 tar_extract_argv, to_delete)
from ansible.module_utils.weights.sums import sha256_file

BLOCK = 1 << 20


def check_target(host, target):
    if os.path.exists(target) and not os.path.isdir(target):
        raise BackupError(f"{host}: target {target} exists and is not a directory")
    try:
        os.makedirs(target, mode=0o700, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target, prefix=".twinrail-write-test-"):
            pass
    except OSError as exc:
        raise BackupError(f"{host}: target {target} is not writable: {exc.strerror or exc}") from exc


def read_back(path, compression):
    """Decompress and list the whole archive: its member count."""
    decompress = COMPRESSORS[compression][2]
    with open(path, "rb") as source:
        first = subprocess.Popen(decompress, stdin=source, stdout=subprocess.PIPE) if decompress else None
        listing = subprocess.Popen(["tar", "--list", "--file=-"], stdin=first.stdout if first else source,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if first:
            first.stdout.close()
        members = sum(1 for _ in listing.stdout)
        _, err = listing.communicate()
        if first and first.wait() != 0:
            raise BackupError(f"{path}: does not decompress ({' '.join(decompress)} exit {first.returncode})")
        if listing.returncode != 0:
            raise BackupError(f"{path}: tar cannot read it: {err.decode(errors='replace').strip()[-300:]}")
    return members


def take(module, p, directory, excludes, compression):
    name = archive_name(time.time(), compression)
    final = os.path.join(directory, name)
    partial = final + ".partial"
    digest, size = hashlib.sha256(), 0
    tar = subprocess.Popen(tar_create_argv(p["root"], excludes), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    compressor = COMPRESSORS[compression][1]
    squeeze = subprocess.Popen(compressor, stdin=tar.stdout, stdout=subprocess.PIPE) if compressor else None
    if squeeze:
        tar.stdout.close()
    stream = squeeze.stdout if squeeze else tar.stdout
    try:
        with open(partial, "wb") as out:
            while block := stream.read(BLOCK):
                digest.update(block)
                out.write(block)
                size += len(block)
            out.flush()
            os.fsync(out.fileno())
        _, tar_err = tar.communicate()
        if squeeze and squeeze.wait() != 0:
            raise BackupError(f"{p['host']}: {' '.join(compressor)} failed (exit {squeeze.returncode})")
        # GNU tar: 1 is "some files changed while being read" (a live system)
        if tar.returncode not in (0, 1):
            raise BackupError(f"{p['host']}: tar failed (exit {tar.returncode}): "
                              f"{tar_err.decode(errors='replace').strip()[-400:]}")
        members = read_back(partial, compression)
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise
    os.rename(partial, final)
    sha = digest.hexdigest()
    with open(final + ".sha256", "w", encoding="ascii") as handle:
        handle.write(f"{sha}  {name}\n")
    meta = {"name": name, "host": p["host"], "created": time.time(), "size": size, "sha256": sha,
            "members": members, "compression": compression, "backend": "tar", "fingerprint": p["fingerprint"],
            "excluded": excludes, "tar_warnings": tar_err.decode(errors="replace").count("\n"),
            "kernel": os.uname().release}
    with open(final + ".json", "w", encoding="utf-8") as handle:
        json.dump(meta, handle, indent=2)
    return {"name": name, "path": final, **meta}


def present(module, p):
    directory = p["target"]
    excludes = excluded(directory, p["exclude"])
    if p["retention"] < 1:
        raise BackupError(f"{p['host']}: system_backup_retention: expected at least 1, got {p['retention']}: "
                          "nothing is deleted")
    check_target(p["host"], directory) if not module.check_mode else None
    backups = existing(directory)
    due, reason = needs_backup(backups, time.time(), p["max_age_hours"], p["fingerprint"])
    if p["force"]:
        due, reason = True, "forced"
    newest = newest_complete(backups)
    result = {"taken": False, "reason": reason, "deleted": [],
              "backup": dict(newest["meta"], path=newest["path"]) if newest else {}}
    if not due:
        return False, result
    need = estimate(p["root"], excludes)
    free = shutil.disk_usage(directory).free if os.path.isdir(directory) else None
    result["estimate_bytes"] = need
    if free is not None and free < need * 1.05:
        raise BackupError(f"{p['host']}: not enough space in {directory}: the backup needs up to {need} bytes "
                          f"(+5 %), {free} bytes free; nothing was written or deleted")
    if module.check_mode:
        result["taken"] = True
        return True, result
    result["backup"] = take(module, p, directory, excludes, p["compression"])
    result["taken"] = True
    for old in to_delete(existing(directory), p["retention"]):
        if old["name"] == result["backup"]["name"]:
            continue
        for suffix in ("", ".sha256", ".json", ".partial"):
            if os.path.exists(old["path"] + suffix):
                os.unlink(old["path"] + suffix)
        result["deleted"].append(old["name"])
    for leftover in os.listdir(directory):
        if leftover.endswith(".partial"):
            os.unlink(os.path.join(directory, leftover))
    return True, result


def restored(module, p):
    complete = [b for b in existing(p["target"]) if b["complete"]]
    if not complete:
        raise BackupError(f"{p['host']}: no complete backup in {p['target']}")
    chosen = complete[-1] if p["backup"] == "latest" else next((b for b in complete if b["name"] == p["backup"]), None)
    if chosen is None:
        raise BackupError(f"{p['host']}: no backup named {p['backup']} in {p['target']}; there are "
                          f"{', '.join(b['name'] for b in complete)}")
    actual = sha256_file(chosen["path"])
    if actual != chosen["meta"]["sha256"]:
        raise BackupError(f"{p['host']}: {chosen['path']}: sha256 {actual}, recorded {chosen['meta']['sha256']}: "
                          "the archive is damaged, nothing restored")
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        skipped = mount_points_within(mount_points(p["root"], handle.read()), p["paths"])
    argv = tar_extract_argv(p["root"], p["paths"], skipped)
    result = {"backup": dict(chosen["meta"], path=chosen["path"]), "restored": p["paths"] or ["/"],
              "skipped": skipped}
    if module.check_mode:
        return True, result
    decompress = COMPRESSORS[chosen["meta"].get("compression", "none")][2]
    with open(chosen["path"], "rb") as source:
        first = subprocess.Popen(decompress, stdin=source, stdout=subprocess.PIPE) if decompress else None
        tar = subprocess.Popen(argv, stdin=first.stdout if first else source, stderr=subprocess.PIPE)
        if first:
            first.stdout.close()
        _, err = tar.communicate()
        if first:
            first.wait()
    if tar.returncode != 0:
        raise BackupError(f"{p['host']}: restoring {', '.join(p['paths']) or '/'} from {chosen['name']} failed: "
                          f"{err.decode(errors='replace').strip()[-400:]}")
    return True, result


def main():
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "required": True},
            "target": {"type": "path", "required": True},
            "state": {"type": "str", "choices": ["present", "restored"], "default": "present"},
            "compression": {"type": "str", "choices": list(COMPRESSORS), "default": "zstd"},
            "retention": {"type": "int", "default": 3},
            "max_age_hours": {"type": "float", "default": 24},
            "fingerprint": {"type": "str", "default": ""},
            "exclude": {"type": "list", "elements": "path", "default": []},
            "force": {"type": "bool", "default": False},
            "root": {"type": "path", "default": "/"},
            "backup": {"type": "str", "default": "latest"},
            "paths": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        changed, result = (present if p["state"] == "present" else restored)(module, p)
    except BackupError as exc:
        message = str(exc)
        module.fail_json(msg=message if message.startswith(p["host"]) else f"{p['host']}: {message}")
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
