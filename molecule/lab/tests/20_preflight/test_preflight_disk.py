"""The disk gate counts the weight sets: a set larger than the free space
of the nodes' weights file system is refused before any host changes, and
what the nodes already hold of it is not asked for twice."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])


def run_preflight(host, sets) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json")
    return subprocess.run(
        ["ansible-playbook", "-i", host.backend.ansible_inventory, str(PROJECT / "site.yml"),
         "--tags", "preflight", "-e", json.dumps({"twinrail_weights": sets})],
        capture_output=True, text=True, env=env, timeout=600, check=False)


def test_a_weight_set_larger_than_the_disk_is_refused(host, tmp_path):
    source = tmp_path / "huge"
    source.mkdir()
    with (source / "model-00001-of-00001.gguf").open("wb") as handle:
        handle.truncate(1 << 43)  # 8 TiB, sparse: no lab disk has this free
    (source / "SHA256SUMS").write_text(f"{'0' * 64}  model-00001-of-00001.gguf\n")
    sets = [{"model": "huge", "revision": "r1", "source": "controller", "path": str(source)}]
    proc = run_preflight(host, sets)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    size = (1 << 43) + (source / "SHA256SUMS").stat().st_size
    assert f"or the weight sets from the controller ({size} bytes), whichever is more" in out, \
        out[-3000:]
    assert "less the 0 bytes of them already there" in out
    assert not host.file("/srv/twinrail/models/huge").exists


def test_what_the_nodes_hold_is_not_asked_for_twice(host, tmp_path):
    source = tmp_path / "held"
    source.mkdir()
    (source / "w.bin").write_bytes(b"x" * 123456)
    (source / "SHA256SUMS").write_text(f"{'0' * 64}  w.bin\n")
    fresh = not host.file("/srv/twinrail").exists
    host.run("sudo mkdir -p /srv/twinrail/models/held/r1 && "
             "sudo truncate -s 100000 /srv/twinrail/models/held/r1/w.bin")
    try:
        sets = [{"model": "held", "revision": "r1", "source": "controller", "path": str(source)}]
        proc = run_preflight(host, sets)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        data = json.loads(proc.stdout)
        required = {}
        for play in data["plays"]:
            for task in play["tasks"]:
                if task["task"]["name"].endswith("Check free disk for weights and runtime"):
                    for name, result in task["hosts"].items():
                        required[name] = sum(fs["required_bytes"] for fs in result["filesystems"])
        # the same need on both nodes, less what the master holds: the file's
        # 100000 bytes and its directory (du counts a directory's 4 KiB too)
        assert 100000 <= required["lab-worker1"] - required["lab-master"] <= 100000 + 8192, required
    finally:
        # leave no trace: preflight itself never creates anything
        host.run("sudo rm -rf " + ("/srv/twinrail" if fresh else "/srv/twinrail/models/held"))
