"""The operator's command line on the serving lab, as an operator runs it
(the `twinrail` console script over the lab inventory, SSH with the lab's
known hosts): HEALTH_OK on the converged lab, HEALTH_ERR naming the rail
while rail1 is cut (then mended, the service back), the RPC servers'
journal lines through `twinrail logs`, figures from `twinrail bench`, the
stop-worker drill measured by `twinrail drill`, an unknown node refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
from lab_client import PROJECT, PROXY_PORT, lab, sample, wait_available

testinfra_hosts = ["ansible://master"]

SCHEMA = json.loads((PROJECT / "src" / "twinrail" / "ctl" / "status.schema.json").read_text())
KEY = Path.home() / ".local" / "state" / "twinrail-lab" / "api-keys" / "lab-client"


def twinrail(*argv: str, inventory_last: bool = False) -> subprocess.CompletedProcess:
    """The console script as installed (the virtualenv's bin/twinrail),
    run with the virtualenv off PATH, as an operator who never activated it
    would; the inventory before the subcommand, or after it."""
    binary = str(Path(sys.executable).parent / "twinrail")
    venv_bin = os.path.dirname(binary)
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                           if os.path.realpath(d) != os.path.realpath(venv_bin))
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"), PATH=path)
    inventory = ["-i", str(PROJECT / "inventory" / "lab")]
    argv = [binary, *argv, *inventory] if inventory_last else [binary, *inventory, *argv]
    return subprocess.run(argv, cwd=PROJECT, env=env, capture_output=True, text=True, timeout=180, check=False)


def test_status_is_health_ok_on_the_converged_lab(host):
    # the service drills before this one raised alerts: an operator waits
    # for them to clear (resolved within a rule evaluation of the mend, 5 s here)
    started = time.monotonic()
    while (proc := twinrail("status")).returncode != 0 and time.monotonic() - started < 60:
        time.sleep(5)
    print(f"twinrail status: {proc.stdout.splitlines()[0]!r} after {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[0] == "HEALTH_OK", proc.stdout
    assert "tokens/s over the last minute (Prometheus)" in proc.stdout and "alerts firing: none" in proc.stdout
    assert "every node agrees on the deployed configuration, runtime, guard and weights" in proc.stdout
    sample("status", proc.stdout)
    proc = twinrail("status", "--json", inventory_last=True)
    sample("status-json", proc.stdout)
    data = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["health"] == "HEALTH_OK" and [n["name"] for n in data["nodes"]] == ["lab-master", "lab-worker1"]
    worker = data["nodes"][1]
    assert [r["transport"] for r in worker["rails"]] == ["tcp", "tcp"] and all(r["link"] == "UP" for r in worker["rails"])
    assert data["service"]["available"] and data["service"]["slots"] == 4
    assert data["service"]["tokens_per_s_1m"] is not None and data["service"]["alerts"] == []
    units = {u["unit"]: u["active"] for n in data["nodes"] for u in n["units"] if u.get("monitoring")}
    assert set(units) == {"prometheus-node-exporter.service", "prometheus.service", "prometheus-alertmanager.service",
                          "twinrail-transport.timer"} and set(units.values()) == {"active"}, units
    print(f"twinrail status --json: {data['health']}, nodes {[n['name'] for n in data['nodes']]}")


def test_a_cut_rail_is_health_err_naming_the_rail(host):
    lab("cut", "rail1")
    try:
        # the guard calls the worker lost once its agent has been silent for
        # the grace (3 s), polled each second with a 1.5 s timeout: on a busy
        # machine that is later than grace + interval, so ask as an operator
        # would until the service says so (or 30 s pass)
        started = time.monotonic()
        while True:
            proc = twinrail("status")
            if "service unavailable" in proc.stdout or time.monotonic() - started > 30:
                break
            time.sleep(2)
        print(f"twinrail status named the lost worker after {time.monotonic() - started:.1f} s")
    finally:
        lab("mend", "rail1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("HEALTH_ERR: ") and "lab-master: rail1 (ens1f1np1) link " in first, first
    assert "service unavailable: worker unavailable: lab-worker1 rail 198.19.1.2" in first, first
    wait_available(limit=120)
    # the service answers at once; TwinrailRailDown resolves after the next
    # scrape and rule evaluation (5 s each in the lab): wait for it as an operator would
    started = time.monotonic()
    while (proc := twinrail("status")).returncode != 0 and time.monotonic() - started < 60:
        time.sleep(5)
    print(f"twinrail status after the mend: {proc.stdout.splitlines()[0]!r} after {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, proc.stdout


def test_logs_show_the_rpc_servers_lines_by_node(host):
    proc = twinrail("logs", "lab-worker1", "rpc", "-n", "20")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and all(" lab-worker1 twinrail-rpc@198.19." in line for line in lines), lines[:5]
    sample("logs", proc.stdout)
    proc = twinrail("logs", "--since=-30min")
    nodes = {line.split()[2] for line in proc.stdout.splitlines()}
    assert nodes == {"lab-master", "lab-worker1"}, proc.stdout[-2000:]


def test_bench_reports_figures_through_the_proxy(host):
    """One stream, then two, for a few seconds each, with the lab's API key
    through the proxy at the master's address (the openai SDK)."""
    proc = twinrail("bench", "--key-file", str(KEY), "--streams", "2", "--duration", "4", "--tokens", "8",
                    "--insecure", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["url"] == f"https://198.18.0.10:{PROXY_PORT}" and data["model"] == "smollm2-135m-instruct"
    assert [row["concurrency"] for row in data["levels"]] == [1, 2] and data["failures"] == []
    for row in data["levels"]:
        assert row["requests"] >= 2 and row["errors"] == 0 and 0 < row["ttft_p50_s"] <= row["e2e_p50_s"], row
        assert row["aggregate_tps"] > 0 and all(s["tokens"] == 8 for s in row["samples"]), row
    # as an operator reads it: the same run in words (docs/day2.md's sample)
    proc = twinrail("bench", "--key-file", str(KEY), "--streams", "2", "--duration", "4", "--tokens", "8",
                    "--insecure")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    sample("bench", proc.stdout)
    proc = twinrail("bench", "--streams", "0")
    assert proc.returncode == 2 and "bench: expected --streams >= 1, --duration > 0 s and --tokens >= 1, got 0" \
        in proc.stderr


def test_drill_stop_worker_reports_the_503_and_the_way_back(host):
    """The acceptance table's drill on the lab as on a site: the worker's RPC
    servers and agent stopped with systemctl, a new request's 503 and the
    stream in flight ended within 10 s, the units started again, the first
    answer after; the result saved beside the acceptance reports."""
    proc = twinrail("drill", "stop-worker")
    assert proc.returncode == 2 and "run it in a maintenance window with --yes" in proc.stderr
    proc = twinrail("drill", "stop-worker", "--yes", "--key-file", str(KEY), "--insecure", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    sample("drill", proc.stdout)
    assert result["node"] == "lab-worker1" and result["failures"] == [], result
    # the guard's reason is whichever it saw first: the worker's agent gone, or
    # llama-server itself dropping its connections as its RPC servers left
    assert result["new_request_503_s"] < 10 and result["reason"], result
    assert result["in_flight_end_s"] < 10 and result["recovery_s"] is not None, result
    assert json.loads(Path(result["saved"]).read_text())["drill"] == "stop-worker"
    print(f"twinrail drill stop-worker: 503 after {result['new_request_503_s']} s ({result['reason']}), stream "
          f"ended after {result['in_flight_end_s']} s, back {result['recovery_s']} s after the start")
    wait_available(limit=120)


def test_an_unknown_node_or_unit_is_refused_naming_the_valid_ones(host):
    proc = twinrail("logs", "lab-worker9", "rpc")
    assert proc.returncode == 2
    assert "no node 'lab-worker9' in the inventory; its nodes: lab-master, lab-worker1" in proc.stderr
    proc = twinrail("logs", "lab-worker1", "rcp")
    assert proc.returncode == 2 and "unknown unit 'rcp'; the service's units: agent, firewall" in proc.stderr
