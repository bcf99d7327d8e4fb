"""The disk gate, on this machine's real file systems."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from ansible.module_utils.testing import patch_module_args

import twinrail_disk_space
from ansible.module_utils.node.disk_space import check, held_bytes, nearest_existing


def free(path) -> int:
    vfs = os.statvfs(path)
    return vfs.f_bavail * vfs.f_frsize


def test_path_not_yet_made_resolves_to_its_ancestor(tmp_path):
    assert nearest_existing(str(tmp_path / "a" / "b" / "c")) == str(tmp_path)


def test_fits_and_does_not_fit(tmp_path):
    avail = free(tmp_path)
    ok = check([{"path": str(tmp_path / "w"), "bytes": 1, "what": "weights"}], "h")
    assert ok["failures"] == [] and ok["filesystems"][0]["fits"]
    too_much = check([{"path": str(tmp_path / "w"), "bytes": avail * 2, "what": "weights"}],
                     "h")
    assert len(too_much["failures"]) == 1
    assert too_much["failures"][0].startswith("h: disk: ")
    assert "for weights at " in too_much["failures"][0]


def test_needs_on_one_file_system_add_up(tmp_path):
    """Each need alone fits; both together do not, since they share the disk."""
    half = free(tmp_path) // 2 + (1 << 20)
    result = check([{"path": str(tmp_path / "models"), "bytes": half, "what": "weights"},
                    {"path": str(tmp_path / "opt"), "bytes": half, "what": "the runtime"}],
                   "node")
    assert len(result["filesystems"]) == 1
    assert result["filesystems"][0]["required_bytes"] == 2 * half
    assert len(result["failures"]) == 1
    assert "weights at" in result["failures"][0] and "the runtime at" in result["failures"][0]


def test_module_fails_with_host_and_figures(tmp_path, capsys):
    args = {"host": "spark-b", "needs": [
        {"path": str(tmp_path / "models"), "bytes": free(tmp_path) * 4, "what": "weights"}]}
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        twinrail_disk_space.main()
    result = json.loads(capsys.readouterr().out)
    assert exited.value.code == 1
    assert result["msg"].startswith("preflight: spark-b: disk: ")
    assert "GiB free, required" in result["msg"]


def du(*paths) -> str:
    """du's own output, as the module runs it (a missing path is an error on stderr)."""
    return subprocess.run(["du", "-s", "-B1", "--apparent-size", "--total", "--", *map(str, paths)],
                          capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"), check=False).stdout


def test_what_a_node_holds_is_read_from_du(tmp_path):
    held = tmp_path / "model" / "r1"
    held.mkdir(parents=True)
    (held / "shard.bin").write_bytes(b"\0" * 5000)
    out = du(held, tmp_path / "model" / "r2")
    assert held_bytes(out) >= 5000 and held_bytes(du(tmp_path / "none")) == 0


def test_what_a_node_already_holds_is_taken_off_the_need(tmp_path, capsys):
    held = tmp_path / "models" / "m" / "r1"
    held.mkdir(parents=True)
    # sparse: 1 GiB to du's apparent size, nothing on the disk; half of it
    # either side of the free space, whatever else writes meanwhile
    with (held / "shard.bin").open("wb") as handle:
        handle.truncate(1 << 30)
    avail = free(tmp_path)
    args = {"host": "spark-b", "needs": [
        {"path": str(tmp_path / "models"), "bytes": avail + (1 << 29), "what": "the weight sets",
         "held": [str(held), str(tmp_path / "models" / "m" / "r2")]}]}
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        twinrail_disk_space.main()
    result = json.loads(capsys.readouterr().out)
    assert exited.value.code == 0, result
    (need,) = result["filesystems"][0]["needs"]
    assert "the weight sets, less the " in need and "bytes of them already there" in need
    args["needs"][0]["held"] = [str(tmp_path / "models" / "m" / "r2")]
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        twinrail_disk_space.main()
    result = json.loads(capsys.readouterr().out)
    assert exited.value.code == 1 and "spark-b: disk: " in result["msg"]
