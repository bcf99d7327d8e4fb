"""system_backup: real GNU tar and zstd on a directory tree standing in for
a root file system; retention, freshness, bad targets, restore."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time
from types import SimpleNamespace

import pytest

import system_backup as sb
from ansible.module_utils.node import backups as sbs


def params(tmp_path, **extra):
    p = {"host": "node1", "target": str(tmp_path / "target"), "state": "present", "compression": "zstd",
         "retention": 2, "max_age_hours": 24.0, "fingerprint": "f1", "exclude": ["/srv/models"], "force": False,
         "root": str(tmp_path / "root"), "backup": "latest", "paths": []}
    p.update(extra)
    return p


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    (root / "etc" / "twinrail").mkdir(parents=True)
    (root / "etc" / "twinrail" / "service.env").write_text("TWINRAIL_CTX=8192\n")
    (root / "srv" / "models").mkdir(parents=True)
    (root / "srv" / "models" / "big.gguf").write_bytes(os.urandom(4096))
    (root / "tmp").mkdir()
    (root / "tmp" / "scratch").write_text("x")
    (root / "usr" / "bin").mkdir(parents=True)
    tool = root / "usr" / "bin" / "tool"
    tool.write_bytes(os.urandom(100_000))
    tool.chmod(0o4750)
    try:
        os.setxattr(tool, "user.twinrail", b"kept")
    except OSError:
        pass  # a file system without user xattrs
    return root


MODULE = SimpleNamespace(check_mode=False)


def test_a_backup_is_taken_checked_and_described(tmp_path, tree):
    changed, result = sb.present(MODULE, params(tmp_path))
    assert changed and result["taken"] and result["reason"] == "no backup yet (first deploy)"
    backup = result["backup"]
    assert backup["name"].startswith("system-") and backup["name"].endswith(".tar.zst")
    assert sb.sha256_file(backup["path"]) == backup["sha256"]
    assert open(backup["path"] + ".sha256").read() == f"{backup['sha256']}  {backup['name']}\n"
    assert json.load(open(backup["path"] + ".json"))["fingerprint"] == "f1"
    listing = os.popen(f"zstd -dc {backup['path']} | tar -tv").read()
    assert "./etc/twinrail/service.env" in listing and "./usr/bin/tool" in listing
    assert "rwsr-x---" in listing  # the setuid bit kept
    # the weights, /tmp and the target itself are left out
    assert "big.gguf" not in listing and "scratch" not in listing and "target" not in listing
    assert backup["members"] == sb.read_back(backup["path"], "zstd")


def test_a_fresh_backup_is_enough_unless_the_settings_changed(tmp_path, tree):
    sb.present(MODULE, params(tmp_path))
    changed, result = sb.present(MODULE, params(tmp_path))
    assert not changed and "unchanged" in result["reason"]
    changed, result = sb.present(MODULE, params(tmp_path, fingerprint="f2"))
    assert changed and "settings changed" in result["reason"]
    backups = sbs.existing(str(tmp_path / "target"))
    backups[-1]["meta"]["created"] = time.time() - 30 * 3600
    due, reason = sbs.needs_backup(backups, time.time(), 24, "f2")
    assert due and "30.0 h old" in reason


def test_retention_keeps_the_newest_and_never_deletes_at_zero(tmp_path, tree):
    names = []
    for i in range(3):
        _, result = sb.present(MODULE, params(tmp_path, force=True))
        names.append(result["backup"]["name"])
        time.sleep(1.1)  # archive names are per second
    left = [b["name"] for b in sbs.existing(str(tmp_path / "target"))]
    assert left == names[1:] and result["deleted"] == [names[0]]
    before = sorted(os.listdir(tmp_path / "target"))
    with pytest.raises(sbs.BackupError, match="system_backup_retention: expected at least 1, got 0: nothing is deleted"):
        sb.present(MODULE, params(tmp_path, retention=0, force=True))
    assert sorted(os.listdir(tmp_path / "target")) == before


def test_an_unwritable_target_is_refused(tmp_path, tree):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(sbs.BackupError, match=r"node1: target .*/file/backups is not writable"):
        sb.present(MODULE, params(tmp_path, target=str(blocker / "backups")))
    with pytest.raises(sbs.BackupError, match=r"node1: target .*/file exists and is not a directory"):
        sb.present(MODULE, params(tmp_path, target=str(blocker)))


def test_not_enough_space_is_refused_before_anything_is_written(tmp_path, tree, monkeypatch):
    sb.present(MODULE, params(tmp_path))
    before = sorted(os.listdir(tmp_path / "target"))
    monkeypatch.setattr(shutil, "disk_usage", lambda path: SimpleNamespace(total=1 << 20, used=0, free=1000))
    with pytest.raises(sbs.BackupError, match=r"node1: not enough space in .*target: the backup needs up to \d+ "
                                              r"bytes \(\+5 %\), 1000 bytes free; nothing was written or deleted"):
        sb.present(MODULE, params(tmp_path, force=True))
    assert sorted(os.listdir(tmp_path / "target")) == before


def test_a_damaged_file_is_restored_byte_for_byte(tmp_path, tree):
    _, result = sb.present(MODULE, params(tmp_path))
    tool = tree / "usr" / "bin" / "tool"
    original = tool.read_bytes()
    with open(tool, "r+b") as handle:
        handle.seek(5000)
        handle.write(b"\x00" * 16)
    (tree / "etc" / "twinrail" / "service.env").write_text("damaged\n")
    changed, restored = sb.restored(MODULE, params(tmp_path, state="restored", paths=["/usr/bin/tool"]))
    assert changed and restored["restored"] == ["/usr/bin/tool"]
    assert tool.read_bytes() == original and oct(tool.stat().st_mode)[-4:] == "4750"
    # only what was asked for
    assert (tree / "etc" / "twinrail" / "service.env").read_text() == "damaged\n"


def test_a_damaged_archive_is_not_restored(tmp_path, tree):
    _, result = sb.present(MODULE, params(tmp_path))
    with open(result["backup"]["path"], "r+b") as handle:
        handle.seek(100)
        handle.write(b"\xff\xff")
    with pytest.raises(sbs.BackupError, match="the archive is damaged, nothing restored"):
        sb.restored(MODULE, params(tmp_path, state="restored"))


def test_bad_excludes_and_restore_paths():
    with pytest.raises(sbs.BackupError, match="'srv' is not absolute"):
        sbs.excluded("/backups", ["srv"])
    with pytest.raises(sbs.BackupError, match="root file system itself"):
        sbs.excluded("/backups", ["/"])
    with pytest.raises(sbs.BackupError, match="expected an absolute path below /"):
        sbs.tar_extract_argv("/", ["etc/passwd"])


def test_mount_points_are_read_from_this_kernels_mountinfo():
    """The machine's own /proc/self/mountinfo: the mount points below / are
    those util-linux's findmnt lists from the same table, / itself not."""
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        text = handle.read()
    points = sbs.mount_points("/", text)
    listed = subprocess.run(["findmnt", "--list", "--noheadings", "--output", "TARGET"], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    assert "/" not in points and "/proc" in points
    assert points == sorted(set(listed) - {"/"})
    # inside another root only what lies below it, relative to it
    assert sbs.mount_points("/proc", text) == sorted(p[len("/proc"):] for p in points if p.startswith("/proc/"))
    argv = sbs.tar_extract_argv("/", [], ["/proc", "/etc/hosts"])
    assert "--exclude=./proc" in argv and "--exclude=./etc/hosts" in argv


def test_a_restore_leaves_mount_points_alone(tmp_path, tree, monkeypatch):
    """A file in the backup that is now a mount point (a container's bound
    /etc/hosts, the weights' partition) is skipped, the rest restored."""
    sb.present(SimpleNamespace(check_mode=False), params(tmp_path))
    root = tmp_path / "root"
    (root / "etc" / "twinrail" / "service.env").write_text("damaged\n")
    (root / "usr" / "bin" / "tool").write_bytes(b"bound over")
    mountinfo = (f"22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"
                 f"30 22 0:21 /hosts {root}/usr/bin/tool rw - ext4 /dev/sda1 rw\n")
    real_open = open

    def fake_open(path, *args, **kwargs):
        if path == "/proc/self/mountinfo":
            return io.StringIO(mountinfo)
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    changed, result = sb.restored(SimpleNamespace(check_mode=False), params(tmp_path, state="restored"))
    assert changed and result["skipped"] == ["/usr/bin/tool"]
    assert (root / "etc" / "twinrail" / "service.env").read_text() == "TWINRAIL_CTX=8192\n"
    assert (root / "usr" / "bin" / "tool").read_bytes() == b"bound over"


def test_a_path_restore_names_only_the_mount_points_it_touches(tmp_path, tree, monkeypatch):
    """Restoring some paths says which mount points among them (or above
    them) were left alone, not every mount point of the node."""
    points = ["/etc/hosts", "/proc", "/srv/twinrail", "/srv/twinrail/models"]
    assert sbs.mount_points_within(points, []) == points
    assert sbs.mount_points_within(points, ["/etc/twinrail", "/usr/bin/tool"]) == []
    assert sbs.mount_points_within(points, ["/etc/"]) == ["/etc/hosts"]
    assert sbs.mount_points_within(points, ["/srv"]) == ["/srv/twinrail", "/srv/twinrail/models"]
    # a path under a mount point is not restored: said, with its mount point
    assert sbs.mount_points_within(points, ["/srv/twinrail/models/x.gguf"]) == ["/srv/twinrail", "/srv/twinrail/models"]
    assert sbs.mount_points_within(points, ["/srv/twinrailx"]) == []
    sb.present(SimpleNamespace(check_mode=False), params(tmp_path))
    root = tmp_path / "root"
    (root / "etc" / "twinrail" / "service.env").write_text("damaged\n")
    mountinfo = (f"22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"
                 f"30 22 0:21 /hosts {root}/usr/bin/tool rw - ext4 /dev/sda1 rw\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: io.StringIO(mountinfo) if path == "/proc/self/mountinfo"
                        else real_open(path, *a, **k))
    changed, result = sb.restored(SimpleNamespace(check_mode=False),
                                  params(tmp_path, state="restored", paths=["/etc/twinrail"]))
    assert changed and result["skipped"] == [] and result["restored"] == ["/etc/twinrail"]
    assert (root / "etc" / "twinrail" / "service.env").read_text() == "TWINRAIL_CTX=8192\n"
