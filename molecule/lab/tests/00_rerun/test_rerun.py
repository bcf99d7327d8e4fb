"""Re-runs on the converged, serving lab leave it alone: site.yml again
(with the converge's arguments) reports changed=0, says which bandwidth
baseline and which acceptance verdict still hold and that the weights
stage had nothing to do, and sends no measurement over the rails (their
byte counters, read on both nodes before and after, barely move); a changed
gate setting measures again and says why. Runs once, from the controller,
side by side with the check-mode run (conftest.py's check_mode_run)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from lab_client import LAB2, changed_by_host, inventory_playbook, scenario_tags

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
NODES = {"lab-master": "twinrail-lab-master", "lab-worker1": "twinrail-lab-worker1"}
RAILS = ("ens1f0np0", "ens1f1np1")
# a guard probing its agents and the rdma stage's pings move kilobytes; one
# perftest or iperf3 run (5 s at the lab's >= 5 Gb/s) moves gigabytes
QUIET_BYTES = 32 * 1024 * 1024


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


def test_a_noop_rerun_changes_nothing_and_measures_nothing(check_mode_run):
    # check_mode_run: the lab pass's `--check --diff` run, started now beside
    # this one (tests/01_check_mode asserts it); neither may measure
    before = rail_bytes()
    proc = playbook()
    after = rail_bytes()
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    recap = changed_by_host(proc.stdout)
    assert set(NODES) <= set(recap) and not any(recap.values()), recap
    said = re.findall(r'"msg": "(bandwidth: [^"]*)"', out)
    assert len(said) == 1 and re.match(r"bandwidth: baseline of \d{4}-\d\d-\d\d \d\d:\d\d UTC still valid", said[0]), said
    assert re.search(r"acceptance: verdict of \d{4}-\d\d-\d\d \d\d:\d\d UTC still valid \(PASS;", out), out[-3000:]
    # the weights stage's stamp held on both nodes: no copy read, nothing sent
    weights = re.findall(r'"msg": "weights: ([^:"]*): ([^"]*)"', out)
    assert sorted(h for h, _ in weights) == sorted(NODES) and all(
        m.startswith("nothing changed since ") for _, m in weights), weights
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
