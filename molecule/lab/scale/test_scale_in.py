"""A worker taken out of the serving cluster with scale.yml, then the lab
shrunk back to two nodes on direct cables (make test-scale, after make lab:
it runs test_scale_out.py first, which grows the lab to three nodes)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / "molecule" / "lab" / "tests"))

from lab_client import (LAB2, WORKER, WORKER2, chat, changed_by_host, inventory_playbook, node,  # noqa: E402
                        recabled, rpc_list, unit_pids)

testinfra_hosts = ["ansible://master"]


def test_a_worker_taken_out_stops_and_the_other_keeps_serving(host):
    kept = unit_pids(WORKER)
    refused = inventory_playbook(LAB2, "scale.yml")[0]
    assert refused.returncode != 0 and "lab-worker2 serves today but is not in the inventory" in refused.stdout
    assert not any(changed_by_host(refused.stdout).values())
    proc, took = inventory_playbook(LAB2, "scale.yml", "-e",
                                    json.dumps({"scale_retired_hosts": {"lab-worker2": "198.18.0.12"}}))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "scale: taking out lab-worker2; lab-worker1 keep serving" in proc.stdout
    assert unit_pids(WORKER) == kept
    assert rpc_list() == "198.19.0.2:50052,198.19.1.2:50052"
    states = node(WORKER2, "systemctl", "is-enabled", "twinrail-agent.service", "twinrail-rpc@198.19.0.3.service",
                  check=False).stdout.split()
    assert states == ["disabled", "disabled"], states
    assert node(WORKER2, "pgrep", "-f", "ggml-rpc-server", check=False).returncode == 1
    assert chat(8)[0] == 200
    recabled(LAB2)  # the lab back to two nodes on direct cables
    print(f"scale figures: taking lab-worker2 out {took:.0f} s")
