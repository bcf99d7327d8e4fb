"""Verify the bandwidth stage: its report on the controller, and its faults.

Runs once, from the master's point of view; the faults are real: a rail
cut with tools/lab.py, a threshold no veth can reach, and an RDMA test on a
node that has no RDMA device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
LAB = [sys.executable, str(PROJECT / "tools" / "lab.py")]
LATEST = PROJECT / "reports" / "lab" / "latest"


def run_stage(host, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(
        ["ansible-playbook", "-i", host.backend.ansible_inventory,
         str(PROJECT / "site.yml"), "--tags", "bandwidth", *extra],
        capture_output=True, text=True, env=env, timeout=900, check=False)


def test_report_of_the_converge_run():
    report = json.loads((LATEST / "bandwidth.json").read_text())
    assert report["passed"]
    assert [(r["rail"], r["transport"], r["required_gbps"]) for r in report["rails"]] == [
        ("rail0", "tcp", 5.0), ("rail1", "tcp", 5.0)]
    for rail in report["rails"]:
        assert len(rail["runs_gbps"]) == 3 and rail["bw_average_gbps"] >= 5.0
    # both rails at once, one way and both ways (iperf3 --bidir: the sum)
    one_way, both_ways = report["aggregates"]
    assert (one_way["bidirectional"], both_ways["bidirectional"]) == (False, True)
    for agg in (one_way, both_ways):
        # the lab's twinrail_bandwidth_aggregate_min_gbps and _bidir_min_gbps
        assert agg["rails"] == ["rail0", "rail1"] and agg["bw_average_gbps"] >= 5.0
        assert len(agg["runs_gbps"]) == 3 and agg["required_gbps"] == 5.0
    print(f"all rails: {one_way['bw_average_gbps']:.2f} Gb/s one way, "
          f"{both_ways['bw_average_gbps']:.2f} Gb/s both ways")
    assert report["counters_moved"] == {}
    readable = (LATEST / "bandwidth.md").read_text()
    assert "Verdict: **PASS**" in readable and "| rail1 | lab-master -> lab-worker1 | tcp |" \
        in readable
    assert "| lab-master -> lab-worker1 | both ways (sum) | rail0, rail1 |" in readable


def test_an_impossible_threshold_fails_with_measured_and_required(host):
    kept = os.readlink(LATEST)
    try:
        proc = run_stage(host, "-e", "bandwidth_gate_min_ratio=1.0",
                         "-e", "bandwidth_gate_aggregate_min_gbps=20000",
                         "-e", "bandwidth_gate_bidir_min_gbps=40000", "-e",
                         "bandwidth_gate_repeats=1")
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-3000:]
        assert "all rails (rail0, rail1) lab-master -> lab-worker1: " in out
        assert "Gb/s together, required 20000.00 Gb/s" in out
        assert "all rails (rail0, rail1) lab-master <-> lab-worker1, both directions: " in out
        assert "Gb/s together, required 40000.00 Gb/s" in out
        assert os.readlink(LATEST) != kept  # the failed run is the newest report
        report = json.loads((LATEST / "bandwidth.json").read_text())
        assert report["passed"] is False
    finally:
        # the threshold was this test's, not the lab's: the lab's baseline is
        # the one before (what `twinrail status` and later runs read)
        tmp = LATEST.with_name("latest.restoring")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(kept)
        tmp.replace(LATEST)


def test_a_cut_rail_fails_the_gate_naming_it(host):
    subprocess.run(LAB + ["cut", "rail0"], check=True, capture_output=True)
    try:
        proc = run_stage(host)
    finally:
        subprocess.run(LAB + ["mend", "rail0"], check=True, capture_output=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "bandwidth: rail0 lab-master -> lab-worker1: ens1f0np0 link down" in out
    assert "nothing was measured" in out


def test_rdma_test_on_a_node_without_rdma_fails_with_perftest_reason(host):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        ["ansible", "-i", host.backend.ansible_inventory, "master", "-b", "-m", "ib_perftest",
         "-a", "test=ib_write_bw server=198.19.0.2 timeout=20 label='rail0 lab-master'"],
        capture_output=True, text=True, env=env, timeout=120, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "bandwidth: rail0 lab-master: ib_write_bw failed: Did not detect devices" in out
    assert "Traceback" not in out


def test_no_measurement_process_is_left_behind(host):
    for name in ("iperf3", "ib_write_bw", "ib_write_lat"):
        assert host.run(f"pgrep -x {name}").rc == 1, f"{name} still running"
