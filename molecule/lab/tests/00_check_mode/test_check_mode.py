"""Check mode on the converged lab: `--check --diff` with the scenario's own
tags must report changed=0 on every host (molecule's `check` action only
runs it; this asserts it). Runs once, from the controller."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
SCENARIO = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"])
RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def scenario_tags() -> list[str]:
    config = yaml.safe_load((SCENARIO / "molecule.yml").read_text())
    # as molecule does, ${VARS} in molecule.yml come from the environment
    args = config.get("ansible", {}).get("executor", {}).get("args", {}).get("ansible_playbook", [])  # none: all of site.yml
    return [os.path.expandvars(arg) for arg in args]


def test_check_diff_on_the_converged_lab_changes_nothing(host):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(
        ["ansible-playbook", "-i", host.backend.ansible_inventory, str(PROJECT / "site.yml"),
         "--check", "--diff", *scenario_tags()],
        capture_output=True, text=True, env=env, timeout=900, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    recap = {m.group(1): (int(m.group(2)), int(m.group(3)), int(m.group(4)))
             for m in RECAP.finditer(proc.stdout)}
    assert {"lab-master", "lab-worker1"} <= set(recap)
    changed = {h: c for h, (c, _u, _f) in recap.items() if c}
    assert changed == {}, f"check mode would change: {changed}\n{proc.stdout[-3000:]}"
