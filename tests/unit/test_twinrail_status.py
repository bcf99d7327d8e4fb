"""`twinrail status` judged from what its probe read on the converged lab
(tests/fixtures/lab/twinrail_probes_converged_lab.json: both nodes' probe
output, the program of src/twinrail/ctl/probe.py run over SSH) and the lab
inventory as `ansible-inventory --list` gives it; each fault is that
capture with one thing changed, as the node would report it."""

from __future__ import annotations

import copy
import json
import os
import subprocess

import jsonschema
import pytest
from conftest import REPO

from twinrail.ctl import drill, inventory, logs, probe, status

PROBES = json.loads((REPO / "tests" / "fixtures" / "lab" / "twinrail_probes_converged_lab.json").read_text())
SCHEMA = json.loads((REPO / "src" / "twinrail" / "ctl" / "status.schema.json").read_text())
REPORTS = {"bandwidth": {"run": "20261201T155608Z", "passed": True, "failures": []},
           "acceptance": {"run": "20261201T184318Z", "passed": True, "failures": []}}


@pytest.fixture(scope="module")
def cluster():
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    out = subprocess.run(["ansible-inventory", "-i", str(REPO / "inventory" / "lab"), "--list"], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True).stdout
    return inventory.parse(json.loads(out))


def judged(cluster, probes=None, reports=None):
    result = status.judge(cluster, probes or PROBES, copy.deepcopy(reports or REPORTS), now=1796150000)
    jsonschema.validate(result, SCHEMA)  # every document, whatever its verdict
    return result


def test_the_inventory_gives_the_nodes_and_how_to_reach_them(cluster):
    assert [(n.name, n.role, n.host, n.user) for n in cluster.nodes] == [
        ("lab-master", "master", "198.18.0.10", "twinrail"), ("lab-worker1", "worker", "198.18.0.11", "twinrail")]
    worker = cluster.node("lab-worker1")
    assert worker.become and worker.known_hosts.endswith("/.local/state/twinrail-lab/known_hosts")
    assert [r.address for r in worker.rails] == ["198.19.0.2", "198.19.1.2"]
    assert cluster.engine["name"] == "llamacpp"  # the lab's profile's
    assert worker.units(cluster.engine) == ["twinrail-firewall.service", "twinrail-rpc@198.19.0.2.service",
                                            "twinrail-rpc@198.19.1.2.service", "twinrail-agent.service"]
    assert cluster.master.units(cluster.engine) == ["twinrail-firewall.service", "twinrail-llama.service",
                                                    "twinrail-guard.service", "nginx.service"]
    with pytest.raises(inventory.InventoryError, match="no node 'lab-worker9' in the inventory; its nodes: "
                                                       "lab-master, lab-worker1"):
        cluster.node("lab-worker9")


def test_the_units_follow_the_inventorys_engine():
    """The vLLM lab's inventory: status looks for vLLM's units, not
    llama.cpp's; an engine that is no engine folder is refused naming them."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    listing = json.loads(subprocess.run(["ansible-inventory", "-i", str(REPO / "inventory" / "lab-vllm"), "--list"],
                                        cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout)
    vllm = inventory.parse(listing)
    assert vllm.engine["name"] == "vllm"
    assert vllm.master.units(vllm.engine) == ["twinrail-firewall.service", "twinrail-vllm.service",
                                              "twinrail-guard.service", "nginx.service"]
    assert vllm.node("lab-worker1").units(vllm.engine) == ["twinrail-firewall.service", "twinrail-vllm.service",
                                                           "twinrail-agent.service"]
    for hv in listing["_meta"]["hostvars"].values():
        hv["inference_service_engine"] = "sglang"
    with pytest.raises(inventory.InventoryError, match="inference_service_engine: lab-master: expected one of "
                                                       "llamacpp, vllm"):
        inventory.parse(listing)


def test_the_converged_lab_is_health_ok(cluster):
    result = judged(cluster)
    assert result["health"] == "HEALTH_OK", result["checks"]
    master, worker = result["nodes"]
    assert all(u["active"] == "active" for u in master["units"] + worker["units"])
    assert [(r["rail"], r["link"], r["mtu"], r["addressed"], r["transport"]) for r in worker["rails"]] == [
        ("rail0", "UP", 9000, True, "tcp"), ("rail1", "UP", 9000, True, "tcp")]
    assert 0 < worker["memory"]["percent"] < 85 and worker["memory"]["hard_pct"] == 92
    assert result["service"]["available"] is True and result["service"]["slots"] == 4
    assert result["service"]["proxy_http"] == 401  # nginx answers, and wants credentials
    dep = result["deployment"]
    assert dep["runtime_agree"] and dep["config_version_agree"] and dep["weights_agree"]
    assert [u["unit"] for u in master["units"] if u.get("monitoring")] == [
        "prometheus-node-exporter.service", "prometheus.service", "prometheus-alertmanager.service"]
    assert result["service"]["tokens_per_s_1m"] == 0.0 and result["service"]["alerts"] == []
    screen = status.render(result)
    assert screen.splitlines()[0] == "HEALTH_OK"
    assert "rail1  ens1f1np1    UP     MTU 9000" in screen and "every node agrees" in screen
    assert "0.0 tokens/s over the last minute (Prometheus)" in screen and "alerts firing: none" in screen


def test_an_alert_firing_in_prometheus_is_in_the_verdict(cluster):
    """The capture of a real firing alert (critical: an error)."""
    probes = json.loads((REPO / "tests" / "fixtures" / "lab" / "twinrail_probes_alert_firing_lab.json").read_text())
    result = judged(cluster, probes)
    assert result["health"] == "HEALTH_ERR"
    assert result["checks"] == [{"severity": "ERR", "node": None, "what": "alert",
                                 "message": "alert TwinrailTargetDown: node on  is not scraped"}]
    assert result["service"]["alerts"][0]["since"] == "2026-12-01T22:30:05.436669118Z"
    assert "alerts firing: TwinrailTargetDown (critical): node on  is not scraped" in status.render(result)


def test_without_prometheus_the_rate_is_llama_servers_average_and_a_stopped_exporter_warns(cluster):
    probes = copy.deepcopy(PROBES)
    del probes["lab-master"]["prometheus"]
    probes["lab-worker1"]["units"]["prometheus-node-exporter.service"]["ActiveState"] = "inactive"
    result = judged(cluster, probes)
    assert result["health"] == "HEALTH_WARN"
    assert result["checks"] == [{"severity": "WARN", "node": "lab-worker1", "what": "prometheus-node-exporter.service",
                                 "message": "lab-worker1: prometheus-node-exporter.service (monitoring) is inactive"}]
    assert result["service"]["tokens_per_s_1m"] is None and result["service"]["alerts"] is None
    screen = status.render(result)
    assert "tokens/s (llama-server's average; no Prometheus answered)" in screen and "alerts firing" not in screen


def test_a_cut_rail_is_health_err_naming_the_rail(cluster):
    probes = copy.deepcopy(PROBES)
    for link in probes["lab-master"]["links"]:
        if link["ifname"] == "ens1f1np1":
            link["operstate"] = "LOWERLAYERDOWN"
    result = judged(cluster, probes)
    assert result["health"] == "HEALTH_ERR"
    assert "lab-master: rail1 (ens1f1np1) link LOWERLAYERDOWN" in [c["message"] for c in result["checks"]]
    assert status.render(result).startswith("HEALTH_ERR: lab-master: rail1 (ens1f1np1) link LOWERLAYERDOWN")
    assert status.CODES[result["health"]] == 2


def test_serving_on_fewer_rails_warns_and_says_which(cluster):
    """The guard's status while rail1 is left out, as it reports it (its
    'degraded' and each rail's 'serving'), in the converged lab's probe."""
    probes = copy.deepcopy(PROBES)
    guard = json.loads(probes["lab-master"]["guard"]["body"])
    assert guard.get("degraded") is None  # the capture: every rail serves
    assert "DEGRADED" not in status.render(judged(cluster, probes))
    guard["degraded"] = "serving on rail0 only (lab-worker1 rail1 (198.19.1.2) left out)"
    probes["lab-master"]["guard"]["body"] = json.dumps(guard)
    result = judged(cluster, probes)
    assert {"severity": "WARN", "node": "lab-master", "what": "service",
            "message": f"service degraded: {guard['degraded']}"} in result["checks"]
    assert result["service"]["degraded"] == guard["degraded"] and result["health"] != "HEALTH_OK"
    assert f"available, DEGRADED: {guard['degraded']}" in status.render(result)


def test_a_stopped_rpc_server_and_an_unreachable_node(cluster):
    probes = copy.deepcopy(PROBES)
    probes["lab-worker1"]["units"]["twinrail-rpc@198.19.0.2.service"]["ActiveState"] = "failed"
    assert "lab-worker1: twinrail-rpc@198.19.0.2.service is failed" in [c["message"] for c in
                                                                       judged(cluster, probes)["checks"]]
    probes["lab-worker1"] = {"unreachable": "NoValidConnectionsError: Unable to connect to port 22 on 198.18.0.11"}
    result = judged(cluster, probes)
    assert result["health"] == "HEALTH_ERR" and result["nodes"][1]["reachable"] is False
    assert "lab-worker1 (198.18.0.11) unreachable: NoValidConnectionsError" in result["checks"][0]["message"]
    assert "lab-worker1    worker  UNREACHABLE" in status.render(result)


def test_memory_past_the_soft_watermark_warns_and_past_the_hard_errs(cluster):
    probes = copy.deepcopy(PROBES)
    guard = json.loads(probes["lab-master"]["guard"]["body"])
    guard["memory"]["lab-worker1"]["percent"] = 87.5
    probes["lab-master"]["guard"]["body"] = json.dumps(guard)
    result = judged(cluster, probes)
    assert result["health"] == "HEALTH_WARN"
    assert result["checks"] == [{"severity": "WARN", "node": "lab-worker1", "what": "memory",
                                 "message": "lab-worker1: memory 87.5 %, past the soft watermark 85.0 %"}]
    guard["memory"]["lab-worker1"]["percent"] = 93.0
    probes["lab-master"]["guard"]["body"] = json.dumps(guard)
    assert judged(cluster, probes)["health"] == "HEALTH_ERR"


def test_nodes_on_different_deployments_and_a_failed_verdict_warn(cluster):
    probes = copy.deepcopy(PROBES)
    probes["lab-worker1"]["record"]["runtime"]["release"] = "f966183dbaa4fc0a"
    reports = copy.deepcopy(REPORTS)
    reports["acceptance"].update(passed=False, failures=["single-stream decode: 36.2 tokens/s measured, 75 required"])
    result = judged(cluster, probes, reports)
    messages = [c["message"] for c in result["checks"]]
    assert result["health"] == "HEALTH_WARN" and not result["deployment"]["runtime_agree"]
    assert any(m.startswith("the nodes disagree on the runtime: lab-master ") and "lab-worker1 f966183dbaa4fc0a" in m
               for m in messages), messages
    assert "the last acceptance verdict (20261201T184318Z) failed: single-stream decode: 36.2 tokens/s measured, " \
           "75 required" in messages


def test_an_rdma_rail_serving_over_tcp_warns(cluster):
    rails = cluster.node("lab-worker1").rails
    saved = [r.rdma_device for r in rails]
    try:
        rails[0].rdma_device = "rocep1s0f0"
        checks = judged(cluster)["checks"]
    finally:
        for rail, device in zip(rails, saved):
            rail.rdma_device = device
    assert checks == [{"severity": "WARN", "node": "lab-worker1", "what": "rail0",
                       "message": "lab-worker1: rail0's RPC server serves over TCP although the rail has RDMA device "
                                  "rocep1s0f0"}]


def test_a_sick_gpu_is_health_err_naming_node_gpu_and_counter(cluster):
    """The worker's probe with nvidia-smi -q of an A10 whose row remap is
    pending and a kernel log with Xid 13s (real captures,
    tests/fixtures/gpu-health/): ERR for the GPU, WARN for the Xids; a
    node whose nvidia-smi fails says what it means."""
    health = REPO / "tests" / "fixtures" / "gpu-health"
    probes = copy.deepcopy(PROBES)
    probes["lab-worker1"]["gpu"] = {
        "rc": 0, "stderr": "", "loaded": True,
        "detail": (health / "nvidia_smi_q_a10_remapped_rows_uncorrectable4_pending_gpud.txt").read_text(),
        "xid": (health / "dmesg_decode_iso_xid13_43_gpud.txt").read_text()}
    probes["lab-master"]["gpu"] = {"rc": 6, "stderr": "", "loaded": True, "xid": "", "detail": (
        REPO / "tests" / "fixtures" / "gpu" / "nvidia_smi_fail_device_handle_unknown_error.txt").read_text()}
    result = judged(cluster, probes)
    assert result["health"] == "HEALTH_ERR"
    gpu = [(c["severity"], c["node"], c["message"]) for c in result["checks"] if c["what"] == "gpu"]
    assert gpu[0][:2] == ("ERR", "lab-master") and "the GPU at 0000:0B:00.0 (Unknown Error) did not" in gpu[0][2]
    assert gpu[1] == ("ERR", "lab-worker1", "lab-worker1: GPU 0 (NVIDIA A10, 00000000:07:00.0): a row remap is "
                      "pending (Remapped Rows / Pending: Yes, 4 row(s) for uncorrectable errors): reset the GPU or "
                      "reboot to apply it")
    assert [c[0] for c in gpu[2:]] == ["WARN", "WARN"]  # the Xid 13s and 43 of another bus: an application's
    # no CSV query in that probe: no figures
    assert result["nodes"][1]["gpus"] == [{"index": 0, "name": "NVIDIA A10", "bus_id": "00000000:07:00.0",
                                           "well": False, "telemetry": None}]
    assert "    GPU 0   NVIDIA A10" in status.render(result) and "SICK (see above)" in status.render(result)


def test_the_transport_comes_from_the_newest_connection_of_a_real_gb10_journal():
    text = (REPO / "tests" / "fixtures" / "hardware" /
            "rpc-server_gb10_rdma_autoneg_journal_probed_activated_thinkoffapp.txt").read_text()
    assert status.transport(text, "rocep1s0f1") == "rdma"
    assert status.transport(PROBES["lab-worker1"]["journals"]["twinrail-rpc@198.19.0.2.service"], "") == "tcp"
    assert status.transport("", "") == "no connection yet"


def test_logs_interleave_the_nodes_by_time_and_refuse_an_unknown_unit():
    master = logs.entries("lab-master", "\n".join(json.dumps(e) for e in [
        {"__REALTIME_TIMESTAMP": "1796146000000002", "_SYSTEMD_UNIT": "twinrail-llama.service", "MESSAGE": "b"},
        {"__REALTIME_TIMESTAMP": "1796146000000004", "_SYSTEMD_UNIT": "twinrail-guard.service", "MESSAGE": [104, 105]}]))
    worker = logs.entries("lab-worker1", json.dumps(
        {"__REALTIME_TIMESTAMP": "1796146000000003", "_SYSTEMD_UNIT": "twinrail-rpc@198.19.0.2.service",
         "MESSAGE": "c"}) + "\nnot json")
    merged = logs.interleave({"lab-master": master, "lab-worker1": worker})
    assert [(e["node"], e["message"]) for e in merged] == [("lab-master", "b"), ("lab-worker1", "c"),
                                                           ("lab-master", "hi")]
    assert logs.line(merged[1]) == "2026-12-01 17:26:40.000 lab-worker1 twinrail-rpc@198.19.0.2.service: c"
    assert logs.unit_pattern("rpc") == ["twinrail-rpc@*"]
    with pytest.raises(inventory.InventoryError, match="unknown unit 'rcp'; the service's units: agent, firewall, "):
        logs.unit_pattern("rcp")


def test_host_keys_are_checked_as_ansible_checks_them(cluster, tmp_path):
    """Fabric's default is paramiko's AutoAddPolicy (any key accepted): every
    connection twinrail makes refuses an unknown key instead, and knows the
    keys of the inventory's known hosts file."""
    import paramiko  # pylint: disable=import-outside-toplevel

    nodes = copy.deepcopy(cluster.nodes)
    for node in nodes:
        node.known_hosts = str(REPO / "tests" / "fixtures" / "lab" / "known_hosts_lab")
    conns = probe.connections(cluster, nodes)
    for conn, node in zip(conns, nodes):
        assert isinstance(conn.client._policy, paramiko.RejectPolicy)  # pylint: disable=protected-access
        assert node.host in conn.client.get_host_keys() and conn.user == "twinrail"
        assert [k.endswith("/.local/state/twinrail-lab/ssh/id_ed25519") for k in conn.connect_kwargs["key_filename"]] == [True]
    nodes[0].known_hosts = str(tmp_path / "none")
    conn = probe.connections(cluster, nodes[:1])[0]
    assert len(conn.client.get_host_keys()) == 0 and isinstance(conn.client._policy, paramiko.RejectPolicy)  # noqa


def test_the_probe_runs_as_root_only_where_the_inventory_becomes(cluster):
    worker = copy.deepcopy(cluster.node("lab-worker1"))
    assert "| sudo -n python3 - 8081 8080 443 /var/lib/twinrail/deployments" in probe.command(cluster, worker)
    worker.become = False
    assert "| python3 - 8081" in probe.command(cluster, worker)


def test_each_drill_applies_and_undoes_with_what_a_site_has(cluster):
    guard = json.loads(PROBES["lab-master"]["guard"]["body"])
    plans = {kind: drill.plan(cluster, kind, "rail1", None, guard) for kind in drill.KINDS}
    assert plans["kill-worker"]["apply"] == ("systemctl kill -s KILL twinrail-rpc@198.19.0.2.service "
                                             "twinrail-rpc@198.19.1.2.service") and plans["kill-worker"]["undo"] is None
    assert plans["stop-worker"]["undo"] == ("systemctl start twinrail-rpc@198.19.0.2.service "
                                            "twinrail-rpc@198.19.1.2.service twinrail-agent.service")
    assert (plans["cut-rail"]["node"].name, plans["cut-rail"]["apply"], plans["cut-rail"]["undo"]) == (
        "lab-master", "ip link set dev ens1f1np1 down", "ip link set dev ens1f1np1 up")
    # the hog brings the master from what the guard reports to 2 points past the hard watermark
    mem = guard["memory"]["lab-master"]
    size = int(mem["total"] * 0.94) - int(mem["used"])
    assert f"-p MemoryMax={size + (64 << 20)} python3 -c " in plans["memory-hog"]["apply"]
    assert plans["memory-hog"]["apply"].endswith(f" {size} 60") and "RuntimeMaxSec=90" in plans["memory-hog"]["apply"]


def test_a_drill_on_an_unknown_rail_or_on_the_master_is_refused(cluster):
    with pytest.raises(inventory.InventoryError, match=r"drill cut-rail: unknown rail 'rail7'; the master's rails: "
                                                       r"rail0, rail1"):
        drill.plan(cluster, "cut-rail", "rail7", None, {})
    with pytest.raises(inventory.InventoryError, match="drill: lab-master is the master; the workers: lab-worker1"):
        drill.plan(cluster, "stop-worker", None, "lab-master", {})


def test_the_command_line_refuses_a_drill_without_yes_and_bad_bench_figures(capsys):
    from twinrail.ctl import main  # pylint: disable=import-outside-toplevel

    assert main.main(["drill", "stop-worker"]) == 2
    assert "drill stop-worker: it interrupts the service for every client; run it in a maintenance window with " \
           "--yes" in capsys.readouterr().err
    assert main.main(["drill", "cut-rail", "--yes"]) == 2
    assert "drill cut-rail: name the rail (twinrail drill cut-rail rail1)" in capsys.readouterr().err
    assert main.main(["bench", "--streams", "0"]) == 2
    assert "bench: expected --streams >= 1, --duration > 0 s and --tokens >= 1, got 0, 20 and 32" in \
        capsys.readouterr().err


class Clock:
    """The drill's client and node as a site's would behave, on a clock the
    test moves: requests answered until the fault, refused with the guard's
    503 `refuse_after` s after it, answered again `back_after` s after the
    undo; the stream in flight ends `stream_ends_after` s after the fault."""

    def __init__(self, refuse_after, stream_ends_after, back_after):
        self.faulted = self.undone = None
        self.refuse_after, self.stream_ends_after, self.back_after = refuse_after, stream_ends_after, back_after
        self.commands = []

    # the node (a Fabric connection's run)
    def run(self, command, **_kwargs):
        self.commands.append(command)
        now = __import__("time").monotonic()
        if self.faulted is None:
            self.faulted = now
        else:
            self.undone = now
        return type("Result", (), {"exited": 0, "stderr": ""})()

    # the client
    def ask(self):
        now = __import__("time").monotonic()
        if self.undone is not None:
            return (200, "") if now - self.undone >= self.back_after else (503, "worker unavailable: lab-worker1")
        if self.faulted is not None and now - self.faulted >= self.refuse_after:
            return 503, "worker unavailable: lab-worker1 rail 198.19.0.2: its agent has not answered for 3.0 s"
        return 200, ""

    def stream(self, outcome, started):
        clock = __import__("time")
        started.set()
        while self.faulted is None or clock.monotonic() - self.faulted < self.stream_ends_after:
            clock.sleep(0.01)
        outcome.update(error="APIError: worker unavailable", ended=clock.monotonic())


@pytest.mark.parametrize(("refuse", "ends", "sla", "failed"), [(0.3, 0.2, 10.0, []), (0.8, 0.2, 0.5, ["no 503"])])
def test_the_drill_times_the_503_the_stream_and_the_way_back(cluster, refuse, ends, sla, failed):
    plan = drill.plan(cluster, "stop-worker", None, None, {})
    plan["kind"] = "stop-worker"
    fake = Clock(refuse_after=refuse, stream_ends_after=ends, back_after=0.4)
    result = drill.run(cluster, fake, fake, plan, sla=sla, limit=5)
    assert fake.commands == ["sudo -n sh -c 'systemctl stop twinrail-rpc@198.19.0.2.service "
                             "twinrail-rpc@198.19.1.2.service twinrail-agent.service'",
                             "sudo -n sh -c 'systemctl start twinrail-rpc@198.19.0.2.service "
                             "twinrail-rpc@198.19.1.2.service twinrail-agent.service'"]
    assert result["new_request_503_s"] == pytest.approx(refuse, abs=0.3)
    assert result["reason"].startswith("worker unavailable: lab-worker1")
    assert result["in_flight_end_s"] == pytest.approx(ends, abs=0.15)
    assert result["recovery_s"] == pytest.approx(0.4, abs=0.6)
    assert [f.split(": ", 1)[1].split(" for")[0] for f in result["failures"]] == failed
    if failed:
        assert result["failures"][0].startswith(f"drill stop-worker: no 503 for a new request within {sla:g} s (")


def test_each_gpu_shows_its_figures_as_the_telemetry_reads_them(cluster):
    """The worker an H100 under load (its nvidia-smi -q and its CSV query,
    real captures of one machine, tests/fixtures/gpu-telemetry/): healthy,
    with its memory, load, power and temperature; a query that fails is a
    WARN and no figures, the health still read."""
    telemetry = REPO / "tests" / "fixtures" / "gpu-telemetry"
    probes = copy.deepcopy(PROBES)
    probes["lab-worker1"]["gpu"] = {
        "rc": 0, "stderr": "", "loaded": True, "xid": "", "meminfo": "MemTotal: 1024 kB\nMemAvailable: 512 kB\n",
        "detail": (telemetry / "nvidia_smi_q_full_1x_h100_80gb_hbm3_load_drv590.48.01_power_readings.txt").read_text(),
        "query": (telemetry / "nvidia_smi_query_gpu_csv_allfields_1x_h100_80gb_hbm3_load_drv590.48.01.txt").read_text()}
    result = judged(cluster, probes)
    (gpu,) = result["nodes"][1]["gpus"]
    assert gpu["well"] and gpu["telemetry"]["power_watts"] == 631.95 and not gpu["telemetry"]["memory_unified"]
    assert ("    GPU 0   NVIDIA H100 80GB HBM3              00000000:00:09.0 healthy, memory 19.4 of 79.6 GiB, "
            "busy 100 %, 631.95 W of 700 W, 59 C") in status.render(result)
    assert not [c for c in result["checks"] if c["what"] == "gpu"]
    # nvidia-smi's failure where the query should be: said, and the GPU shown without figures
    probes["lab-worker1"]["gpu"]["query"] = (REPO / "tests" / "fixtures" / "gpu" /
                                             "nvidia_smi_fail_no_devices_were_found.txt").read_text()
    result = judged(cluster, probes)
    assert [(c["severity"], c["message"][:58]) for c in result["checks"] if c["what"] == "gpu"] == [
        ("WARN", "lab-worker1: the GPUs' figures: nvidia-smi answered no CSV")]
    assert result["nodes"][1]["gpus"][0]["telemetry"] is None
    assert "00000000:00:09.0 healthy\n" in status.render(result) + "\n"


def test_a_gb10_shows_the_nodes_memory_as_its_own():
    telemetry = REPO / "tests" / "fixtures" / "gpu-telemetry"
    probe = {"query": (telemetry / "nvidia_smi_query_gpu_csv_na_memory_gb10_dgx_spark_unsloth_pr10703.txt").read_text(),
             "meminfo": open("/proc/meminfo", encoding="ascii").read()}
    checks = []
    (figures,) = status.telemetry_by_index("spark-a", probe, lambda *c: checks.append(c)).values()
    assert not checks and figures["memory_unified"]
    line = status.figures(figures)
    assert line.startswith(", memory (unified) "), line


def test_a_gpu_that_needs_a_reset_is_an_error():
    telemetry = REPO / "tests" / "fixtures" / "gpu-telemetry"
    probe = {"query": (telemetry / "nvidia_smi_query_gpu_csv_gpu_requires_reset_h100_slurm_gpu_crash_diagnosis_md.txt"
                       ).read_text()}
    checks = []
    status.telemetry_by_index("gpu3", probe, lambda *c: checks.append(c))
    assert checks == [("ERR", "gpu3", "gpu", "gpu3: GPU 0 is in error: nvidia-smi reads temperature.gpu: "
                       "[GPU requires reset]; utilization.gpu: [GPU requires reset]: reset it (nvidia-smi -r) or "
                       "reboot the node")]
