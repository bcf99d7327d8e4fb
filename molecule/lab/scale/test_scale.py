"""scale.yml on the lab (make test-scale, after make lab): the 2-node lab
grown to 3 (a second worker, a switch on each rail), the worker added to
the serving cluster with the first worker's units left running, a re-run
with changed=0, a fault drill on one worker while the other keeps its RPC
servers, the refusal of a second worker on direct cables, then the worker
taken out the same way and the lab shrunk back.

Not in make test: the whole run costs about 20 minutes here (docs/
benchmarks.md), past what CI's 90 minutes leave beside the lab pass. The
cases run in file order, each on what the one before left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
sys.path.insert(0, str(PROJECT / "molecule" / "lab" / "tests"))

from lab_client import MASTER, WORKER, chat, changed_by_host, guard_status, node, unit_argv, wait_available  # noqa: E402

testinfra_hosts = ["ansible://master"]

WORKER2 = "twinrail-lab-worker2"
LAB2, LAB3 = PROJECT / "inventory" / "lab", PROJECT / "inventory" / "lab3"
FIGURES: dict = {}


def playbook(inventory: Path, name: str, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), str(PROJECT / name), *argv], cwd=PROJECT,
                          env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    FIGURES[f"{inventory.name} {name} {' '.join(argv)}".strip()] = round(took)
    print(f"scale: {inventory.name} {name} {' '.join(argv)}: rc {proc.returncode}, {took:.0f} s")
    return proc


def lab(inventory: Path, *argv: str) -> None:
    subprocess.run([sys.executable, str(PROJECT / "tools" / "lab.py"), "-i", str(inventory), *argv], check=True,
                   capture_output=True)


def pids(container: str) -> dict:
    out = node(container, "systemctl", "show", "--property=Id,MainPID", "twinrail-agent.service",
               "twinrail-rpc@*.service").stdout
    blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line) for block in out.split("\n\n")]
    return {b["Id"]: int(b["MainPID"]) for b in blocks if b.get("Id")}


def rpc_list() -> str:
    argv = unit_argv(MASTER, "twinrail-llama.service")
    return argv[argv.index("--rpc") + 1]


def recabled(inventory: Path) -> None:
    """A change of cabling is a maintenance: the service stopped, the cables
    laid (tools/lab.py up: a switch on each rail for two workers, direct for
    one), the service started again."""
    assert playbook(LAB2, "stop.yml").returncode == 0
    lab(inventory, "up")
    proc = playbook(LAB2, "start.yml")
    assert proc.returncode == 0, proc.stdout[-3000:]
    wait_available()


def test_a_second_worker_on_direct_cables_is_refused_before_anything_changes(host):
    before = node(MASTER, "readlink", "/etc/twinrail/service/current").stdout
    proc = playbook(LAB3, "scale.yml", "-e", "twinrail_rail_fabric=direct")
    assert proc.returncode != 0
    assert "more workers need a switch on each rail" in proc.stdout, proc.stdout[-3000:]
    assert not any(changed_by_host(proc.stdout).values()), proc.stdout[-1500:]
    assert node(MASTER, "readlink", "/etc/twinrail/service/current").stdout == before


def test_a_worker_added_to_the_serving_cluster_leaves_the_other_running(host):
    recabled(LAB3)  # lab-worker2 up, rails switched; the cluster serves on lab-worker1 alone
    assert rpc_list() == "198.19.0.2:50052,198.19.1.2:50052"
    kept = pids(WORKER)
    llama = node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-llama.service").stdout.strip()
    proc = playbook(LAB3, "scale.yml")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "scale: adding lab-worker2; lab-worker1 keep serving" in proc.stdout
    assert pids(WORKER) == kept  # lab-worker1's RPC servers and agent never restarted
    assert all(pids(WORKER2).values()) and len(pids(WORKER2)) == 3
    assert rpc_list() == "198.19.0.2:50052,198.19.1.2:50052,198.19.0.3:50052,198.19.1.3:50052"
    assert node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-llama.service").stdout.strip() \
        != llama  # the master restarted with the new --rpc list
    # a completion across all three: every worker holds its share (the split gate passed in the run)
    status, data = chat(8)
    assert status == 200 and data["choices"][0]["message"]["content"], data
    assert "TASK [inference_service : Gate the split of the layers" in proc.stdout
    assert [w["host"] for w in guard_status()["workers"]] == ["lab-worker1"] * 2 + ["lab-worker2"] * 2


def test_the_three_node_cluster_re_runs_with_nothing_changed(host):
    proc = playbook(LAB3, "scale.yml")
    assert proc.returncode == 0, proc.stdout[-3000:]
    changed = changed_by_host(proc.stdout)
    assert set(changed) >= {"lab-master", "lab-worker1", "lab-worker2"} and not any(changed.values()), changed
    assert "nothing to add or take out" in proc.stdout


def test_a_drill_on_one_worker_leaves_the_others_rpc_servers_alone(host):
    kept = pids(WORKER)
    failed_at = time.monotonic()
    node(WORKER2, "pkill", "-9", "-f", "ggml-rpc-server -H 198.19.0.3")
    status, data = chat(timeout=30)
    refused = time.monotonic() - failed_at
    assert status == 503 and "lab-worker2" in data["error"]["message"], data
    assert refused < 10, refused
    back = wait_available(120)
    assert pids(WORKER) == kept
    FIGURES["drill on lab-worker2"] = {"503_s": round(refused, 2), "back_s": round(back, 2)}


def test_a_worker_taken_out_stops_and_the_other_keeps_serving(host):
    kept = pids(WORKER)
    refused = playbook(LAB2, "scale.yml")
    assert refused.returncode != 0 and "lab-worker2 serves today but is not in the inventory" in refused.stdout
    assert not any(changed_by_host(refused.stdout).values())
    proc = playbook(LAB2, "scale.yml", "-e", json.dumps({"scale_retired_hosts": {"lab-worker2": "198.18.0.12"}}))
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "scale: taking out lab-worker2; lab-worker1 keep serving" in proc.stdout
    assert pids(WORKER) == kept
    assert rpc_list() == "198.19.0.2:50052,198.19.1.2:50052"
    states = node(WORKER2, "systemctl", "is-enabled", "twinrail-agent.service", "twinrail-rpc@198.19.0.3.service",
                  check=False).stdout.split()
    assert states == ["disabled", "disabled"], states
    assert node(WORKER2, "pgrep", "-f", "ggml-rpc-server", check=False).returncode == 1
    assert chat(8)[0] == 200
    recabled(LAB2)  # the lab back to two nodes on direct cables
    print(f"scale figures: {json.dumps(FIGURES)}")
