"""Re-runs on the converged, serving lab. site.yml again (with the
converge's arguments) is the idempotence test: every stage's tasks run on
every node and report changed=0, no unit of the service restarts, the run
says which bandwidth baseline and acceptance verdict still hold and that
the verification cache vouched for every weight file, and it sends no
measurement over the rails (their byte counters, read on both nodes before
and after, barely move). A changed gate setting measures again and says
why. The drift drill: a package, a unit file and a rail's route removed by
hand on the worker are put back by the next plain run, which says so. The
no-op runs side by side with the check-mode run (conftest.py's
check_mode_run)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from lab_client import LAB2, changed_by_host, inventory_playbook, node, scenario_tags, unit_pids

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
NODES = {"lab-master": "twinrail-lab-master", "lab-worker1": "twinrail-lab-worker1"}
RAILS = ("ens1f0np0", "ens1f1np1")
# a guard probing its agents and the rdma stage's pings move kilobytes; one
# perftest or iperf3 run (5 s at the lab's >= 5 Gb/s) moves gigabytes
QUIET_BYTES = 32 * 1024 * 1024
# one task of each stage's work that only a run of the whole stage reaches:
# each must report ok (it ran and changed nothing) on the nodes named
WORK = {
    "system_backup : Install the cold-archive script and units": NODES,
    "kernel_tuning : Write the sysctl drop-ins, the memlock limits and default, the sysfs settings and the command line drop-in": NODES,
    "rdma_network : Write the RDMA modules' list and the rails' networkd files": NODES,
    "runtime_build : Point current at the build": NODES,
    "runtime_build : Load the canary on each GPU and answer one completion": NODES,
    "weights_sync : Verify every copy against the manifest": NODES,
    "inference_service : Install the configuration, the units and the scripts the units wait with": NODES,
    "inference_service : Configure the proxy": ["lab-master"],
    "monitoring : Install the dashboard": ["lab-master"],
    "monitoring : Write node_exporter's settings and drop-in, the stage's metrics and its timers' units": NODES,
}
# the units a no-op must leave running as they were (their main PIDs)
UNITS = {"lab-master": ("twinrail-llama.service", "twinrail-guard.service", "nginx.service", "prometheus.service",
                        "prometheus-node-exporter.service"),
         "lab-worker1": ("twinrail-rpc@*.service", "twinrail-agent.service", "prometheus-node-exporter.service")}


def playbook(*argv: str) -> subprocess.CompletedProcess:
    """site.yml as the converge ran it (the scenario's arguments: its three
    weight sets), so a re-run is one with nothing changed."""
    return inventory_playbook(LAB2, "site.yml", *scenario_tags(), *argv, label=None, timeout=900)[0]


def rail_bytes() -> dict:
    """rx + tx bytes of every rail interface of every node."""
    out = {}
    for name, container in NODES.items():
        for rail in RAILS:
            read = subprocess.run(["docker", "exec", container, "cat", f"/sys/class/net/{rail}/statistics/rx_bytes",
                                   f"/sys/class/net/{rail}/statistics/tx_bytes"],
                                  capture_output=True, text=True, check=True).stdout.split()
            out[(name, rail)] = sum(int(v) for v in read)
    return out


def main_pids() -> dict:
    """MainPID of every unit in UNITS, by node."""
    return {name: unit_pids(NODES[name], units) for name, units in UNITS.items()}


def task_results(out: str, task: str) -> dict:
    """{host: ok|changed|skipping|failed} of the first run of TASK in a
    playbook's output; a loop's host is changed if any item changed."""
    block = out.split(f"TASK [{task}]", 1)
    assert len(block) == 2, f"no task {task!r} in the run"
    block = block[1].split("\nTASK [", 1)[0]
    rank = ["skipping", "ok", "changed", "failed", "fatal"]
    results: dict = {}
    for status, host in re.findall(r"^(ok|changed|skipping|failed|fatal): \[([^\]]+)\]", block, re.M):
        results[host] = max(results.get(host, status), status, key=rank.index)
    return results


def test_a_noop_rerun_runs_every_task_changes_nothing_and_measures_nothing(check_mode_run):
    # check_mode_run: the lab pass's `--check --diff` run, started now beside
    # this one (tests/01_check_mode asserts it); neither may measure
    before, pids = rail_bytes(), main_pids()
    assert all(len(p) >= 3 and all(p.values()) for p in pids.values()), pids
    proc = playbook()
    after = rail_bytes()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    recap = changed_by_host(proc.stdout)
    assert set(NODES) <= set(recap) and not any(recap.values()), recap
    said = re.findall(r'"msg": "(bandwidth: [^"]*)"', out)
    assert len(said) == 1 and re.match(r"bandwidth: baseline of \d{4}-\d\d-\d\d \d\d:\d\d UTC still valid", said[0]), said
    assert re.search(r"acceptance: verdict of \d{4}-\d\d-\d\d \d\d:\d\d UTC still valid \(PASS;", out), out[-3000:]
    canary = re.findall(r'"msg": "runtime canary: ([^:"]*): ([^"]*)"', out)
    assert sorted(h for h, _ in canary) == sorted(NODES) and all(
        said.endswith("with this runtime, model and GPUs: nothing loaded") for _, said in canary), canary
    # every stage's work ran on its nodes, and changed nothing
    for task, hosts in WORK.items():
        ran = task_results(out, task)
        assert all(ran.get(h) == "ok" for h in hosts), f"{task}: {ran}"
    # no unit restarted
    assert main_pids() == pids, (pids, main_pids())
    # every copy of every set verified, every file vouched for by the cache
    weights = re.findall(r'"msg": "weights: ([^:"]*): ([^:"]*): (\d+) files verified, (\d+) read again', out)
    assert sorted({h for h, *_ in weights}) == sorted(NODES) and all(
        int(n) > 0 and read == "0" for _, _, n, read in weights), weights
    moved = {key: after[key] - before[key] for key in before}
    assert all(m < QUIET_BYTES for m in moved.values()), f"measurement traffic on the rails: {moved}"
    print(f"no-op site.yml: rail bytes moved {moved}")


def test_a_changed_gate_setting_measures_again_and_says_why(tmp_path, check_mode_run):
    # this run measures: the check-mode run beside the no-op one ends first
    check_mode_run.result()
    # the converge's baseline copied aside: this run's report goes there and
    # the one the other verifiers read stays the converge's
    kept = json.loads((PROJECT / "reports" / "lab" / "latest" / "bandwidth.json").read_text())
    (tmp_path / kept["run"]).mkdir()
    (tmp_path / kept["run"] / "bandwidth.json").write_text(json.dumps(kept))
    (tmp_path / "latest").symlink_to(kept["run"])
    before = rail_bytes()
    proc = playbook("--tags", "bandwidth,acceptance", "-e", "bandwidth_gate_repeats=1",
                    "-e", "bandwidth_gate_duration=2", "-e", f"bandwidth_gate_reports_dir={tmp_path}")
    after = rail_bytes()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    said = re.findall(r'"msg": "(bandwidth: [^"]*)"', out)
    was = kept["settings"]
    assert was["duration"] != 2 and was["repeats"] != 1, was
    assert said == [f"bandwidth: measuring: setting duration {was['duration']} -> 2; "
                    f"setting repeats {was['repeats']} -> 1"], said
    # nothing the service runs changed: its verdict still holds
    assert re.search(r"acceptance: verdict of .* still valid \(PASS;", out), out[-3000:]
    assert all(after[(n, r)] - before[(n, r)] > QUIET_BYTES for n in NODES for r in RAILS), (before, after)
    measured = json.loads((tmp_path / "latest" / "bandwidth.json").read_text())
    assert measured["passed"] and measured["settings"]["repeats"] == 1
    assert set(measured["fingerprint"]) == set(NODES)


def test_drift_on_a_worker_is_repaired_by_the_next_plain_run(check_mode_run):
    """A package, a unit file and a rail's route removed by hand on the
    worker, as an administrator might: the next plain site.yml puts all
    three back and says what it changed, on the worker alone."""
    check_mode_run.result()
    worker = NODES["lab-worker1"]
    timer = "/etc/systemd/system/twinrail-cold-archive.timer"
    route = ["198.19.0.0/24", "dev", RAILS[0], "table", "101"]
    node(worker, "apt-get", "remove", "-y", "-q", "perftest")
    node(worker, "rm", timer)
    node(worker, "systemctl", "daemon-reload")
    node(worker, "ip", "route", "del", *route)
    # and what a CUDA build's monitoring left when the runtime was switched to the CPU
    gpu_left = ["/etc/systemd/system/twinrail-gpu.timer", "/etc/systemd/system/twinrail-gpu.service",
                "/var/lib/prometheus/node-exporter/twinrail_gpu.prom"]
    plant = ("printf '[Timer]\\nOnActiveSec=1h\\n[Install]\\nWantedBy=timers.target\\n' > {0}; "
             "printf '[Service]\\nExecStart=/bin/true\\n' > {1}; echo 'twinrail_gpu_up{{gpu=\"0\"}} 1' > {2}; "
             "systemctl daemon-reload; systemctl enable --now twinrail-gpu.timer")
    node(worker, "sh", "-c", plant.format(*gpu_left))
    assert node(worker, "sh", "-c", "command -v ib_write_bw", check=False).returncode != 0
    assert node(worker, "systemctl", "is-active", "twinrail-cold-archive.timer", check=False).stdout.strip() != "active"
    assert node(worker, "ip", "route", "show", "table", "101").stdout.strip() == ""
    proc = playbook()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    # it said what it changed, there and only there (apt runs where a
    # package is missing: preflight read every node's packages)
    assert task_results(out, "rdma_network : Install the RDMA stack and the gate tools") == {
        "lab-master": "skipping", "lab-worker1": "changed"}
    assert task_results(out, "system_backup : Install the cold-archive script and units") == {
        "lab-master": "ok", "lab-worker1": "changed"}
    assert task_results(out, "rdma_network : Reconfigure the rails that drifted from their files") == {
        "lab-master": "skipping", "lab-worker1": "changed"}
    recap = changed_by_host(proc.stdout)
    assert recap["lab-master"] == 0 and recap["lab-worker1"] > 0, recap
    # and all three are back
    assert node(worker, "sh", "-c", "command -v ib_write_bw", check=False).returncode == 0
    assert node(worker, "systemctl", "is-active", "twinrail-cold-archive.timer", check=False).stdout.strip() == "active"
    assert "198.19.0.0/24 dev ens1f0np0" in node(worker, "ip", "route", "show", "table", "101").stdout
    # the master had none left: nothing to remove there
    assert task_results(out, "monitoring : Remove the GPU telemetry where the runtime uses no GPU") == {
        "lab-master": "skipping", "lab-worker1": "changed"}
    assert node(worker, "ls", *gpu_left, check=False).stdout.strip() == ""
    assert node(worker, "systemctl", "is-active", "twinrail-gpu.timer", check=False).stdout.strip() != "active"
    print(f"drift drill: repaired by one plain site.yml; changed {recap}")
