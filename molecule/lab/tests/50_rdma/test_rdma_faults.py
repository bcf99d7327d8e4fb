"""Fault drills of the rdma stage, run once from the controller.

A rail is cut for real (tools/lab.py sets the master's end down; the
worker's end loses its carrier), the stage is run again as an operator
would, and it must fail naming the rail and both hosts; with
rdma_network_allow_single_rail it must pass and say which rail it goes on
with. The rail is mended afterwards, whatever happened.
"""

from __future__ import annotations

import os
import subprocess
import sys

testinfra_hosts = ["ansible://master"]

PROJECT = os.environ["MOLECULE_PROJECT_DIRECTORY"]
LAB = [sys.executable, os.path.join(PROJECT, "tools", "lab.py")]


def run_stage(host, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(
        ["ansible-playbook", "-i", host.backend.ansible_inventory,
         os.path.join(PROJECT, "site.yml"), "--tags", "rdma", *extra],
        capture_output=True, text=True, env=env, timeout=600, check=False)


def test_a_cut_rail_fails_the_stage_naming_rail_and_hosts(host):
    subprocess.run(LAB + ["cut", "rail1"], check=True, capture_output=True)
    try:
        strict = run_stage(host)
        lenient = run_stage(host, "-e", "rdma_network_allow_single_rail=true")
    finally:
        subprocess.run(LAB + ["mend", "rail1"], check=True, capture_output=True)
    out = strict.stdout + strict.stderr
    assert strict.returncode != 0, out[-3000:]
    assert "rdma: rail1: lab-master ens1f1np1: ens1f1np1 link down" in out
    assert "lab-worker1 ens1f1np1: ens1f1np1 link lowerlayerdown, no carrier" in out \
        or "lab-worker1 ens1f1np1: ens1f1np1 link down, no carrier" in out
    assert "rail0:" not in out.split("rdma: rail1")[1].split("\n")[0]
    lenient_out = lenient.stdout + lenient.stderr
    assert lenient.returncode == 0, lenient_out[-3000:]
    assert "rdma: going on with rail0 only: rail1:" in lenient_out


def test_after_mending_the_stage_passes_with_both_rails(host):
    proc = run_stage(host)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "going on with" not in proc.stdout
