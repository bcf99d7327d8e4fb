"""Preflight only checks: on the converged lab it reports changed=0 on every
node and writes nothing into twinrail's trees (on the fresh nodes,
molecule/lab/prepare.yml checks that it created none of the directories the
later stages own). Runs once, from the controller."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import testinfra

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
NODES = ("lab-master", "lab-worker1")
TREES = "/srv/twinrail /opt/twinrail /etc/twinrail /var/lib/twinrail"


def test_preflight_changes_nothing_on_the_converged_lab(host):
    nodes = {n: testinfra.get_host(f"ansible://{n}", ansible_inventory=host.backend.ansible_inventory) for n in NODES}
    stamp = "/tmp/twinrail-preflight-stamp"
    for node in nodes.values():
        node.run(f"sudo touch {stamp}")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(["ansible-playbook", "-i", host.backend.ansible_inventory, str(PROJECT / "site.yml"),
                           "--tags", "preflight"], capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    recap = dict(re.findall(r"^(lab-\S+)\s+: ok=\d+\s+changed=(\d+)", proc.stdout, re.M))
    assert recap == {n: "0" for n in NODES}, proc.stdout[-2000:]
    for name, node in nodes.items():
        newer = node.run(f"sudo find {TREES} -newer {stamp}").stdout
        assert newer.strip() == "", f"{name}: preflight wrote {newer}"


def test_a_misspelt_monitoring_setting_is_refused_before_any_host_changes(host, tmp_path):
    """The site's own group_vars with monitoring_retention_tme (the stage
    would keep its 30 days and say nothing): site.yml stops in preflight
    naming the closest setting, and no node's trees change."""
    site = Path(host.backend.ansible_inventory)
    copy = tmp_path / "site"
    # molecule's inventory links to inventory/labsite: the copy holds the files themselves
    subprocess.run(["cp", "-rL", str(site), str(copy)], check=True)
    typo = copy / "group_vars" / "cluster" / "zz-typo.yml"
    typo.parent.mkdir(parents=True, exist_ok=True)
    typo.write_text("---\nmonitoring_retention_tme: 90d\n")
    nodes = {n: testinfra.get_host(f"ansible://{n}", ansible_inventory=host.backend.ansible_inventory) for n in NODES}
    stamp = "/tmp/twinrail-typo-stamp"
    for node in nodes.values():
        node.run(f"sudo touch {stamp}")
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(["ansible-playbook", "-i", str(copy), str(PROJECT / "site.yml")], capture_output=True,
                          text=True, env=env, timeout=600, check=False)
    said = proc.stdout + proc.stderr  # the failure goes to stderr under molecule's callback
    assert proc.returncode != 0, said[-2000:]
    assert ("lab-master, lab-worker1: monitoring_retention_tme: expected a name twinrail reads" in said
            and "did you mean monitoring_retention_time?" in said), said[-3000:]
    assert "TASK [kernel_tuning" not in proc.stdout  # stopped in preflight
    for name, node in nodes.items():
        newer = node.run(f"sudo find {TREES} -newer {stamp}").stdout
        assert newer.strip() == "", f"{name}: {newer}"
