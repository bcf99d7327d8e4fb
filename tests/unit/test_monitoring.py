"""The monitoring stage's own parts, checked by the tools Prometheus ships
(promtool from Debian's package, `make venv` puts it in .venv/bin) and
prometheus_client's parser: the alert rules (`promtool check rules` and
`promtool test rules` with the lab's and a site's settings), the textfile
metrics written from real captures (the bandwidth stage's report, the lab's
and a GB10 box's RPC server journals), llama-server's real /slots answers
as KV-cache figures, and the stage's gate on Prometheus's real API answers."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from conftest import FIXTURES, REPO

import monitoring_gate
from ansible.module_utils.inventory import profiles
from twinrail.guard import metrics, textfile

_spec = importlib.util.spec_from_file_location("monitoring_filters", REPO / "filter_plugins" / "monitoring.py")
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)

ROLE = REPO / "roles" / "monitoring"
MON = FIXTURES / "monitoring"
HARDWARE = FIXTURES / "hardware"
PROMTOOL = shutil.which("promtool")


def promtool(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    assert PROMTOOL, "promtool is not on PATH: make venv puts it in .venv/bin (tools/prometheus_tools.sh)"
    return subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, text=True, check=False)


def samples(text: str) -> dict:
    """{(name, sorted labels): value} as prometheus_client reads the exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


# ---------------------------------------------------------------- rules

PROFILE_LOOKUP = re.compile(r"^\{\{ lookup\('twinrail_profile', '(\w+)'\) \}\}$")


def render_rules(tmp_path: Path, profile: str = "x86-connectx", **settings) -> Path:
    """The rules as the role renders them: its defaults (a default the
    hardware profile gives, from `profile`), then `settings`."""
    values = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    for name, value in values.items():
        looked_up = PROFILE_LOOKUP.match(value) if isinstance(value, str) else None
        if looked_up:
            values[name] = profiles.setting(profile, looked_up.group(1))
    values.update(settings, ansible_managed="rendered by the unit tests")
    env = jinja2.Environment(variable_start_string="[[", variable_end_string="]]", undefined=jinja2.StrictUndefined)
    text = env.from_string((ROLE / "templates" / "twinrail-rules.yml.j2").read_text()).render(values)
    path = tmp_path / "twinrail.yml"
    path.write_text(text)
    return path


LAB = {"monitoring_alert_for": "10s", "monitoring_alert_queue_for": "30s", "monitoring_alert_queue_depth": 2}


def test_the_rules_pass_promtool_with_the_defaults_and_the_labs_settings(tmp_path):
    for settings in ({}, LAB):
        result = promtool("check", "rules", str(render_rules(tmp_path, **settings)))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "SUCCESS: 35 rules found" in result.stdout, result.stdout


def test_a_broken_rule_is_refused_by_the_same_check(tmp_path):
    path = render_rules(tmp_path)
    path.write_text(path.read_text().replace("twinrail_guard_worker_up == 0", "twinrail_guard_worker_up =="))
    result = promtool("check", "rules", str(path))
    assert result.returncode != 0 and "parse error" in (result.stdout + result.stderr)


WORKER = 'instance="127.0.0.1:8081", job="guard", node="lab-master"'
NODE1 = 'instance="198.18.0.11:9100", job="node", node="lab-worker1"'


def rule_test(tmp_path: Path, rules: Path, series: list[dict], alerts: list[dict], exprs: list[dict] | None = None,
              interval: str = "5s") -> subprocess.CompletedProcess:
    test = {"rule_files": [str(rules)], "evaluation_interval": interval,
            "tests": [{"interval": interval, "input_series": series, "alert_rule_test": alerts,
                       "promql_expr_test": exprs or []}]}
    path = tmp_path / "test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return promtool("test", "rules", str(path))


def test_a_lost_worker_fires_after_alert_for_and_not_before(tmp_path):
    rules = render_rules(tmp_path, **LAB)
    up = f'twinrail_guard_worker_up{{{WORKER}, host="lab-worker1", address="198.19.0.2"}}'
    firing = [{"exp_labels": {"severity": "critical", "host": "lab-worker1", "address": "198.19.0.2",
                              "instance": "127.0.0.1:8081", "job": "guard", "node": "lab-master"},
               "exp_annotations": {
                   "summary": "lab-worker1 rail 198.19.0.2 is lost: the service refuses requests",
                   "description": "The guard sees lab-worker1's RPC server on 198.19.0.2 not up (stopped, gone, or its "
                                  "agent silent); llama-server cannot run without it. twinrail status names the unit."}}]
    result = rule_test(tmp_path, rules, [{"series": up, "values": "1 1 0 0 0 0 0"}],
                       [{"eval_time": "15s", "alertname": "TwinrailWorkerLost", "exp_alerts": []},
                        {"eval_time": "20s", "alertname": "TwinrailWorkerLost", "exp_alerts": firing}])
    assert result.returncode == 0, result.stdout + result.stderr
    # the test itself can fail: the same alert expected 5 s too early is refused
    early = rule_test(tmp_path, rules, [{"series": up, "values": "1 1 0 0 0 0 0"}],
                      [{"eval_time": "15s", "alertname": "TwinrailWorkerLost", "exp_alerts": firing}])
    assert early.returncode != 0


def test_an_engine_stall_fires_at_once_and_clears_after_its_window(tmp_path):
    """The guard's stall counter moves once (the watchdog restarted the
    engine): the alert fires while the engine is taken as stalled and for
    monitoring_service_window (5m) after, and a counter that never moved
    fires nothing."""
    rules = render_rules(tmp_path, **LAB)
    series = [{"series": f"twinrail_guard_engine_stalls_total{{{WORKER}}}", "values": "0 0 1x200"},
              {"series": f"twinrail_guard_engine_stalled{{{WORKER}}}", "values": "0 0 1 1 0x200"}]
    firing = [{"exp_labels": {"severity": "critical", "instance": "127.0.0.1:8081", "job": "guard", "node": "lab-master"},
               "exp_annotations": {
                   "summary": "the engine stalled on the master and was restarted by the guard",
                   "description": "No token was relayed while requests were in flight and the engine's loop did not "
                                  "answer, or its probe failed while idle (a wedged llama-server or vLLM: /health "
                                  "may still say 200). The guard answered 503 with the reason and restarted it; "
                                  "twinrail status and the guard's journal say why. Repeated stalls: read the GPU's "
                                  "Xid lines and the engine's journal (docs/troubleshooting.md)."}}]
    result = rule_test(tmp_path, rules, series,
                       [{"eval_time": "5s", "alertname": "TwinrailEngineStalled", "exp_alerts": []},
                        {"eval_time": "10s", "alertname": "TwinrailEngineStalled", "exp_alerts": firing},
                        {"eval_time": "4m", "alertname": "TwinrailEngineStalled", "exp_alerts": firing},
                        {"eval_time": "6m", "alertname": "TwinrailEngineStalled", "exp_alerts": []}])
    assert result.returncode == 0, result.stdout + result.stderr
    quiet = rule_test(tmp_path, rules, [{"series": series[0]["series"], "values": "0x200"},
                                        {"series": series[1]["series"], "values": "0x200"}],
                      [{"eval_time": "10s", "alertname": "TwinrailEngineStalled", "exp_alerts": firing}])
    assert quiet.returncode != 0


def test_a_gpu_in_error_fires_naming_the_field_and_a_healthy_one_does_not(tmp_path):
    rules = render_rules(tmp_path, **LAB)
    labels = 'instance="198.18.0.10:9100", job="node", node="lab-master", gpu="0", bus_id="00000000:23:00.0"'
    series = [{"series": f'twinrail_gpu_broken{{{labels}, name="NVIDIA H100", field="temperature.gpu", '
                         f'said="GPU requires reset"}}', "values": "1x10"}]
    firing = [{"exp_labels": {"severity": "critical", "instance": "198.18.0.10:9100", "job": "node", "node": "lab-master",
                              "gpu": "0", "bus_id": "00000000:23:00.0", "name": "NVIDIA H100", "field": "temperature.gpu",
                              "said": "GPU requires reset"},
               "exp_annotations": {
                   "summary": "lab-master GPU 0 (00000000:23:00.0) is in error: temperature.gpu reads GPU requires reset",
                   "description": "nvidia-smi reads the GPU as in error, not as a figure it does not report: a GPU "
                                  "that needs a reset (an Xid before it: journalctl -k -b | grep Xid). Drain the node, "
                                  "reset the GPU (nvidia-smi -r) or reboot; the next run's GPU gate refuses it until "
                                  "then."}}]
    result = rule_test(tmp_path, rules, series, [{"eval_time": "10s", "alertname": "TwinrailGpuBroken",
                                                   "exp_alerts": firing}])
    assert result.returncode == 0, result.stdout + result.stderr
    healthy = rule_test(tmp_path, rules, [{"series": f'twinrail_gpu_power_watts{{{labels}, name="NVIDIA H100"}}',
                                           "values": "300x10"}],
                        [{"eval_time": "10s", "alertname": "TwinrailGpuBroken", "exp_alerts": firing}])
    assert healthy.returncode != 0


def test_a_rail_left_out_is_serving_on_fewer_rails_not_a_lost_worker(tmp_path):
    """The guard serves on rail0 while rail1 stays cut: its worker_up is 0
    but it no longer serves; WorkerLost stays quiet, the warning fires."""
    rules = render_rules(tmp_path, **LAB)
    rail1 = f'{WORKER}, host="lab-worker1", address="198.19.1.2"'
    series = [{"series": f"twinrail_guard_worker_up{{{rail1}}}", "values": "1 0x10"},
              {"series": f'twinrail_guard_worker_serving{{{rail1}, rail="rail1"}}', "values": "1 1 1 0x8"}]
    fewer = [{"exp_labels": {"severity": "warning", "host": "lab-worker1", "address": "198.19.1.2", "rail": "rail1",
                             "instance": "127.0.0.1:8081", "job": "guard", "node": "lab-master"},
              "exp_annotations": {
                  "summary": "lab-worker1 rail1 (198.19.1.2) is left out: serving on fewer rails",
                  "description": "The guard restarted llama-server without lab-worker1's rail1, down longer than "
                                 "inference_service_degrade_after; the worker's other rails carry its share. The "
                                 "guard takes it back once it is healthy for inference_service_restore_after. "
                                 "twinrail status says degraded."}}]
    result = rule_test(tmp_path, rules, series,
                       [{"eval_time": "40s", "alertname": "TwinrailWorkerLost", "exp_alerts": []},
                        {"eval_time": "40s", "alertname": "TwinrailServingOnFewerRails", "exp_alerts": fewer}])
    assert result.returncode == 0, result.stdout + result.stderr
    # while it still serves (the first 10 s of the cut), it is a lost worker: the same test expecting none fails
    early = rule_test(tmp_path, rules, series[:1] + [{"series": series[1]["series"], "values": "1x10"}],
                      [{"eval_time": "40s", "alertname": "TwinrailWorkerLost", "exp_alerts": []}])
    assert early.returncode != 0


def test_a_rail_down_names_the_rail_and_a_healthy_rail_does_not_fire(tmp_path):
    rules = render_rules(tmp_path, **LAB)
    info = 'twinrail_rail_info{%s, rail="%s", device="%s", address="%s", rdma_device=""}'
    series = [{"series": info % (NODE1, "rail0", "ens1f0np0", "198.19.0.2"), "values": "1x10"},
              {"series": info % (NODE1, "rail1", "ens1f1np1", "198.19.1.2"), "values": "1x10"},
              {"series": f'node_network_up{{{NODE1}, device="ens1f0np0"}}', "values": "1 1 0x8"},
              {"series": f'node_network_up{{{NODE1}, device="ens1f1np1"}}', "values": "1x10"},
              {"series": f'node_network_up{{{NODE1}, device="eth0"}}', "values": "0x10"}]
    result = rule_test(tmp_path, rules, series, [{"eval_time": "30s", "alertname": "TwinrailRailDown", "exp_alerts": [
        {"exp_labels": {"severity": "critical", "node": "lab-worker1", "device": "ens1f0np0", "rail": "rail0"},
         "exp_annotations": {"summary": "lab-worker1 rail0 (ens1f0np0) is down",
                             "description": "The rail's link is not up on lab-worker1: a cable, a port or the peer."}}]}])
    assert result.returncode == 0, result.stdout + result.stderr


def test_memory_above_the_soft_watermark_fires_soft_only(tmp_path):
    rules = render_rules(tmp_path, **LAB)
    series = [{"series": f'twinrail_node_memory_used_ratio{{{WORKER}, host="lab-worker1"}}', "values": "0.5 0.9x8"},
              {"series": f'twinrail_guard_memory_watermark_ratio{{{WORKER}, level="soft"}}', "values": "0.85x9"},
              {"series": f'twinrail_guard_memory_watermark_ratio{{{WORKER}, level="hard"}}', "values": "0.92x9"}]
    labels = {"severity": "warning", "host": "lab-worker1", "instance": "127.0.0.1:8081", "job": "guard",
              "node": "lab-master"}
    result = rule_test(tmp_path, rules, series, [
        {"eval_time": "30s", "alertname": "TwinrailMemoryAboveSoftWatermark", "exp_alerts": [{"exp_labels": labels,
         "exp_annotations": {
             "summary": "lab-worker1 uses 90% of its memory, above the soft watermark",
             "description": "The guard refuses new requests and runs one generation at a time until memory falls."}}]},
        {"eval_time": "30s", "alertname": "TwinrailMemoryAboveHardWatermark", "exp_alerts": []}])
    assert result.returncode == 0, result.stdout + result.stderr


TCP_DESCRIPTION = ("The newest connection to the RPC server did not activate RDMA (the build falls back to TCP "
                   "silently): decode is several times slower. Check the rail's RDMA device and GID.")


def test_tcp_is_an_alert_only_on_a_rail_that_has_an_rdma_device(tmp_path):
    rules = render_rules(tmp_path, **LAB)
    worker = 'instance="10.20.0.12:9100", job="node", node="spark-b"'
    series = [
        {"series": f'twinrail_rail_info{{{worker}, rail="rail0", device="enp1s0f0np0", address="192.168.100.2", '
                   f'rdma_device="rocep1s0f0"}}', "values": "1x10"},
        {"series": f'twinrail_rail_info{{{worker}, rail="rail1", device="enp1s0f1np1", address="192.168.101.2", '
                   f'rdma_device=""}}', "values": "1x10"},
        {"series": f'twinrail_rpc_transport{{{worker}, address="192.168.100.2", transport="tcp"}}', "values": "1x10"},
        {"series": f'twinrail_rpc_transport{{{worker}, address="192.168.101.2", transport="tcp"}}', "values": "1x10"}]
    result = rule_test(tmp_path, rules, series, [{"eval_time": "30s", "alertname": "TwinrailTransportFellBackToTCP",
                                                  "exp_alerts": [{"exp_labels": {
                                                      "severity": "critical", "address": "192.168.100.2",
                                                      "transport": "tcp", "instance": "10.20.0.12:9100",
                                                      "job": "node", "node": "spark-b"},
                                                      "exp_annotations": {
                                                          "summary": "spark-b RPC server on 192.168.100.2 runs over "
                                                                     "TCP where RDMA is expected",
                                                          "description": TCP_DESCRIPTION}}]}])
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_deep_queue_fires_after_its_own_duration_and_a_scrape_failure_too(tmp_path):
    rules = render_rules(tmp_path, **LAB)
    series = [{"series": f"twinrail_guard_requests_waiting{{{WORKER}}}", "values": "0 3x12"},
              {"series": f"up{{{NODE1}}}", "values": "1 0x12"},
              # a target of Debian's default configuration, seen before the stage's own: no node label
              {"series": 'up{instance="localhost:9100", job="node"}', "values": "0x12"}]
    result = rule_test(tmp_path, rules, series, [
        {"eval_time": "25s", "alertname": "TwinrailQueueDeep", "exp_alerts": []},
        {"eval_time": "40s", "alertname": "TwinrailQueueDeep",
         "exp_alerts": [{"exp_labels": {"severity": "warning", "instance": "127.0.0.1:8081", "job": "guard",
                                        "node": "lab-master"},
                         "exp_annotations": {"summary": "3 requests wait for a slot",
                                             "description": "More requests queue than the cluster serves; clients see "
                                                            "long first-token times or 429s."}}]},
        {"eval_time": "20s", "alertname": "TwinrailTargetDown",
         "exp_alerts": [{"exp_labels": {"severity": "critical", "instance": "198.18.0.11:9100", "job": "node",
                                        "node": "lab-worker1"},
                         "exp_annotations": {"summary": "node on lab-worker1 is not scraped",
                                             "description": "Prometheus cannot scrape 198.18.0.11:9100 (node); its "
                                                            "metrics and alerts are blind."}}]}])
    assert result.returncode == 0, result.stdout + result.stderr


def test_rail_traffic_comes_from_the_rdma_port_counters_where_the_rail_has_an_rdma_device(tmp_path):
    """RDMA traffic bypasses the netdev's counters: a RoCE rail's netdev
    bytes stay flat while its port counters move."""
    rules = render_rules(tmp_path)
    master = 'instance="10.20.0.11:9100", job="node", node="spark-a"'
    series = [
        {"series": f'twinrail_rail_info{{{master}, rail="rail0", device="enp1s0f0np0", address="192.168.100.1", '
                   f'rdma_device="rocep1s0f0"}}', "values": "1x20"},
        {"series": f'twinrail_rail_rdma_info{{{master}, rail="rail0", device="rocep1s0f0"}}', "values": "1x20"},
        {"series": f'twinrail_rail_info{{{master}, rail="rail1", device="enp1s0f1np1", address="192.168.101.1", '
                   f'rdma_device=""}}', "values": "1x20"},
        # 15 s apart: 12.5 GB/s = 100 Gb/s on the RDMA port, netdev flat
        {"series": f'node_infiniband_port_data_received_bytes_total{{{master}, device="rocep1s0f0", port="1"}}',
         "values": "0+187500000000x20"},
        {"series": f'node_network_receive_bytes_total{{{master}, device="enp1s0f0np0"}}', "values": "0x20"},
        # a TCP rail: 1.25 GB/s = 10 Gb/s on the netdev
        {"series": f'node_network_receive_bytes_total{{{master}, device="enp1s0f1np1"}}',
         "values": "0+18750000000x20"}]
    exprs = [{"expr": "twinrail:rail_receive_bits:rate1m", "eval_time": "3m", "exp_samples": [
        {"labels": 'twinrail:rail_receive_bits:rate1m{node="spark-a", rail="rail0"}', "value": 1e11},
        {"labels": 'twinrail:rail_receive_bits:rate1m{node="spark-a", rail="rail1"}', "value": 1e10}]}]
    result = rule_test(tmp_path, rules, series, [], exprs, interval="15s")
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------- textfiles

def test_the_rails_textfile_joins_netdevs_and_rdma_devices_to_rails(tmp_path):
    rails_textfile = filters.rails_textfile
    rails = yaml.safe_load((REPO / "inventory" / "example" / "host_vars" / "spark-a.yml").read_text())["twinrail_rails"]
    text = rails_textfile(list(reversed(rails)), 200, 9000)
    assert promtool("check", "metrics", stdin=text).returncode == 0
    got = samples(text)
    first, second = sorted(rails, key=lambda r: r["name"])
    key = ("twinrail_rail_info", tuple(sorted({"rail": first["name"], "device": first["interface"],
                                               "address": first["address"].split("/")[0],
                                               "rdma_device": first["rdma_device"]}.items())))
    assert got[key] == 1.0
    assert got[("twinrail_rail_rdma_info", (("device", second["rdma_device"]), ("rail", second["name"])))] == 1.0
    assert got[("twinrail_rail_expected_rate_gbps", (("device", first["interface"]), ("rail", first["name"])))] == 200
    # the order of the inventory's list does not change the file (a re-run writes nothing)
    assert rails_textfile(rails, 200, 9000) == text


def test_the_bandwidth_textfile_from_the_stages_real_report():
    bandwidth_textfile = filters.bandwidth_textfile
    report = json.loads((MON / "bandwidth_lab.json").read_text())
    text = bandwidth_textfile(report)
    assert promtool("check", "metrics", stdin=text).returncode == 0
    got = samples(text)
    rail0 = (("client", "lab-master"), ("rail", "rail0"), ("server", "lab-worker1"))
    assert got[("twinrail_bandwidth_gate_gbps", rail0)] == pytest.approx(13.64739587809745)
    assert got[("twinrail_bandwidth_gate_required_gbps", rail0)] == 5.0
    assert got[("twinrail_bandwidth_gate_passed", rail0)] == 1.0
    both = (("client", "lab-master"), ("rail", "rail0+rail1"), ("server", "lab-worker1"))
    assert got[("twinrail_bandwidth_gate_gbps", both)] == pytest.approx(23.276931969880863)
    assert got[("twinrail_bandwidth_gate_timestamp_seconds", ())] == 1796140568.0  # 2026-12-01T15:56:08Z
    assert "twinrail_bandwidth_gate_gbps{" not in bandwidth_textfile(None)


def test_the_transport_textfile_from_real_rpc_server_journals():
    rdma = (HARDWARE / "rpc-server_gb10_rdma_autoneg_journal_probed_activated_thinkoffapp.txt").read_text()
    tcp = (MON / "journal_rpc_lab_worker1_rail0.txt").read_text()
    start = (HARDWARE / "rpc-server_rtx5090_tcp_v3_startup_llama_cpp_readme.txt").read_text()
    text = textfile.render({"192.168.100.2": rdma, "198.19.0.2": tcp, "127.0.0.1": start}, 1796160000.0)
    assert promtool("check", "metrics", stdin=text).returncode == 0
    got = samples(text)
    transport = {labels[0][1]: dict(labels)["transport"] for (name, labels), value in got.items()
                 if name == "twinrail_rpc_transport" and value == 1}
    assert transport == {"192.168.100.2": "rdma", "198.19.0.2": "tcp", "127.0.0.1": "none"}
    assert got[("twinrail_rpc_connections", (("address", "198.19.0.2"),))] == 18
    assert got[("twinrail_rpc_rdma_connections", (("address", "198.19.0.2"),))] == 0
    assert got[("twinrail_rpc_rdma_connections", (("address", "192.168.100.2"),))] >= 1


def test_kv_cache_from_llama_servers_real_slots():
    generating = metrics.kv_cache(json.loads((MON / "slots_generating.json").read_text()))
    # slot 1: 80 prompt tokens + 64 decoded; slots 2 and 3 keep 1 and 45; slot 0 never used
    assert [s["tokens"] for s in generating["slots"]] == [0, 144, 1, 45]
    assert generating["tokens"] == 190 and generating["capacity"] == 4 * 8192
    after = metrics.kv_cache(json.loads((MON / "slots_after.json").read_text()))
    assert [s["tokens"] for s in after["slots"]] == [0, 315, 1, 45] and not any(s["processing"] for s in after["slots"])
    assert metrics.kv_cache(None) is None


# ---------------------------------------------------------------- the gate

def test_the_gate_on_prometheus_real_answers():
    targets = json.loads((MON / "api_v1_targets_lab.json").read_text())
    rules = json.loads((MON / "api_v1_rules_lab.json").read_text())
    jobs = {"prometheus": 1, "alertmanager": 1, "guard": 1, "llama": 1, "node": 2}
    found, problems = monitoring_gate.judge(targets, rules, jobs, ["twinrail-rails", "twinrail-alerts"])
    assert problems == [] and [t["job"] for t in found].count("node") == 2
    assert [t["node"] for t in found if t["job"] == "node"] == ["lab-master", "lab-worker1"]
    # a node_exporter down, a third node expected, a group missing: each named
    down = json.loads(json.dumps(targets))
    node = next(t for t in down["data"]["activeTargets"] if t["labels"]["job"] == "node"
                and t["labels"]["node"] == "lab-worker1")
    node.update(health="down", lastError="context deadline exceeded")
    _, problems = monitoring_gate.judge(down, rules, dict(jobs, node=3), ["twinrail-rails", "twinrail-nothing"])
    assert problems == [
        "job node: 2 targets, expected 3",
        f"job node: lab-worker1 {node['labels']['instance']} is down: context deadline exceeded",
        "rule group twinrail-nothing is not loaded (loaded: twinrail-alerts, twinrail-rails)"]


# ---------------------------------------------------------------- configurations

def render_configs(tmp_path: Path, expect_failure: bool = False, **extra):
    """Prometheus's and Alertmanager's configurations as the stage renders
    them for the lab's master (a local play over inventory/lab with the
    role's defaults and vars), into tmp_path."""
    import os
    import sys

    role = "roles/monitoring"

    # the role's own settings check first: it also gives the play the role's
    # defaults at their own precedence (below the inventory's), as in a run
    check = {"name": "Check the settings", "ansible.builtin.import_role": {"name": "monitoring", "tasks_from": "settings"}}
    book = [{"hosts": "lab-master", "connection": "local", "gather_facts": False,
             "tasks": [check] + [{"name": f"Render {name}", "ansible.builtin.template": {
                 "src": str(REPO / role / "templates" / f"{name}.j2"), "dest": str(tmp_path / name)}}
                 for name in ("prometheus.yml", "alertmanager.yml", "prometheus.default",
                              "prometheus-node-exporter.default")]}]
    (tmp_path / "play.yml").write_text(json.dumps(book))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    argv = ["ansible-playbook", "-i", str(REPO / "inventory" / "lab"), "-e",
            f"ansible_python_interpreter={sys.executable}", "-e", json.dumps(extra), str(tmp_path / "play.yml")]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    if expect_failure:
        assert proc.returncode != 0 and not (tmp_path / "prometheus.yml").exists(), proc.stdout[-2000:]
        return proc
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return tmp_path


def test_the_rendered_configurations_pass_promtool_and_amtool(tmp_path):
    out = render_configs(tmp_path)
    amtool = shutil.which("amtool")
    result = promtool("check", "config", "--syntax-only", str(out / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    nodes = next(job for job in config["scrape_configs"] if job["job_name"] == "node")["static_configs"]
    assert nodes == [{"targets": ["198.18.0.10:9100"], "labels": {"node": "lab-master", "role": "master"}},
                     {"targets": ["198.18.0.11:9100"], "labels": {"node": "lab-worker1", "role": "worker"}}]
    assert config["global"]["scrape_interval"] == "5s"
    check = subprocess.run([amtool, "check-config", str(out / "alertmanager.yml")], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    receiver = yaml.safe_load((out / "alertmanager.yml").read_text())["receivers"][0]
    assert receiver["webhook_configs"] == [{"url": "http://127.0.0.1:9099/alerts", "send_resolved": True}]
    args = (out / "prometheus.default").read_text()
    assert "--storage.tsdb.retention.time=30d --storage.tsdb.retention.size=1GB" in args
    assert "--web.listen-address=127.0.0.1:9090" in args
    exporter = (out / "prometheus-node-exporter.default").read_text()
    assert "--web.listen-address=198.18.0.10:9100" in exporter and "--collector.infiniband" not in exporter


def test_mail_receivers_render_valid_and_rdma_rails_turn_the_infiniband_collector_on(tmp_path):
    rails = [{"name": "rail0", "interface": "enp1s0f0np0", "rdma_device": "rocep1s0f0", "address": "198.19.0.1/24"},
             {"name": "rail1", "interface": "enp1s0f1np1", "rdma_device": "rocep1s0f1", "address": "198.19.1.1/24"}]
    out = render_configs(tmp_path, monitoring_alert_email_to="ops@example.org",
                         monitoring_alert_email_from="twinrail@example.org",
                         monitoring_alert_smarthost="mail.example.org:587", twinrail_rails=rails)
    check = subprocess.run([shutil.which("amtool"), "check-config", str(out / "alertmanager.yml")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    config = yaml.safe_load((out / "alertmanager.yml").read_text())
    assert config["global"]["smtp_smarthost"] == "mail.example.org:587"
    assert config["receivers"][0]["email_configs"] == [{"to": "ops@example.org", "send_resolved": True}]
    assert "--collector.infiniband" in (out / "prometheus-node-exporter.default").read_text()


def test_a_retention_in_words_is_refused_naming_the_variable_and_the_host(tmp_path):
    proc = render_configs(tmp_path, expect_failure=True, monitoring_retention_time="30 days")
    assert "monitoring: lab-master: monitoring_retention_time: expected a Prometheus duration (30d), got " \
           "'30 days'; nothing was changed" in proc.stdout, proc.stdout[-2000:]


SERVICE = dict(LAB, monitoring_service_window="30s")
GUARD = 'instance="127.0.0.1:8081", job="guard", model="m", node="lab-master"'


def test_a_high_error_ratio_fires_and_refusals_for_a_full_queue_do_not(tmp_path):
    """Answers every 5 s (the lab's scrape): 10 good ones and 50 429s each
    time, then 10 503s (a worker lost) beside them from 60 s: 1 in 7 fails.
    The 429s alone (the queue's own alert) are no error."""
    rules = render_rules(tmp_path, **SERVICE)
    good = {"series": f'twinrail_guard_responses_total{{{GUARD}, code="2xx", reason=""}}', "values": "0+10x40"}
    full = {"series": f'twinrail_guard_responses_total{{{GUARD}, code="429", reason=""}}', "values": "0+50x40"}
    lost = {"series": f'twinrail_guard_responses_total{{{GUARD}, code="503", reason="worker_lost"}}',
            "values": "0x12 0+10x28"}
    firing = [{"exp_labels": {"severity": "warning", "model": "m"},
               "exp_annotations": {
                   "summary": "14.29% of the requests for m fail",
                   "description": "Over the last 30s, more than 0.05 of the answers were 5xx or 503 (the guard's "
                                  "refusals by reason: twinrail_guard_responses_total). twinrail status says why "
                                  "the guard refuses."}}]
    ratio = [{"expr": "twinrail:responses:error_ratio", "eval_time": "150s",
              "exp_samples": [{"labels": 'twinrail:responses:error_ratio{model="m"}', "value": 1 / 7}]}]
    result = rule_test(tmp_path, rules, [good, full, lost], [
        {"eval_time": "55s", "alertname": "TwinrailErrorRateHigh", "exp_alerts": []},
        {"eval_time": "150s", "alertname": "TwinrailErrorRateHigh", "exp_alerts": firing}], ratio)
    assert result.returncode == 0, result.stdout + result.stderr
    quiet = rule_test(tmp_path, rules, [good, full], [
        {"eval_time": "150s", "alertname": "TwinrailErrorRateHigh", "exp_alerts": []}])
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    # the test can fail: the alert expected before the 503s began is refused
    early = rule_test(tmp_path, rules, [good, full, lost], [
        {"eval_time": "55s", "alertname": "TwinrailErrorRateHigh", "exp_alerts": firing}])
    assert early.returncode != 0


def test_a_slow_first_token_at_p99_fires_and_a_fast_one_does_not(tmp_path):
    """The guard's first-token histogram: every streamed request within
    1 s, then from 60 s one in ten takes 30 to 60 s (p99 past the 30 s
    bound: histogram_quantile interpolates inside the (30, 60] bucket)."""
    rules = render_rules(tmp_path, **SERVICE)
    name = "twinrail_guard_time_to_first_token_seconds_bucket"
    fast = "0+9x40"
    series = []
    for bound in ("0.5", "1.0", "2.5", "5.0", "10.0", "30.0"):
        series.append({"series": f'{name}{{{GUARD}, le="{bound}"}}', "values": fast})
    for bound in ("60.0", "+Inf"):
        series.append({"series": f'{name}{{{GUARD}, le="{bound}"}}', "values": "0+10x40"})
    # before 60 s, the (30, 60] bucket holds nothing: the 60 and +Inf bounds count 9 a step there
    series[-2]["values"] = series[-1]["values"] = "0+9x12 117+10x28"
    firing = [{"exp_labels": {"severity": "warning", "model": "m"},
               "exp_annotations": {
                   "summary": "m: p99 of the first token is 57s",
                   "description": "Over the last 30s, one streamed request in a hundred waited more than 30 s for "
                                  "its first token (its wait for a slot included): long prompts, a deep queue, or a "
                                  "slower cluster than its acceptance baseline."}}]
    result = rule_test(tmp_path, rules, series, [
        {"eval_time": "55s", "alertname": "TwinrailFirstTokenSlow", "exp_alerts": []},
        {"eval_time": "150s", "alertname": "TwinrailFirstTokenSlow", "exp_alerts": firing}],
        [{"expr": "twinrail:time_to_first_token_seconds:p50", "eval_time": "150s",
          "exp_samples": [{"labels": 'twinrail:time_to_first_token_seconds:p50{model="m"}', "value": 0.2777777777777778}]}])
    assert result.returncode == 0, result.stdout + result.stderr
    # the test can fail: with every request fast, the same alert expected is refused
    fast_only = [dict(s, values=fast) for s in series]
    refused = rule_test(tmp_path, rules, fast_only, [
        {"eval_time": "150s", "alertname": "TwinrailFirstTokenSlow", "exp_alerts": firing}])
    assert refused.returncode != 0


# ---------------------------------------------------------------- GPUs

def gpu_series(capture: Path, node: str, values: dict[str, str] | None = None, meminfo=None) -> list[dict]:
    """promtool input series from a real nvidia-smi answer written by
    twinrail-guard gpu, scraped from `node` (each sample held, or the
    values given per metric name)."""
    from twinrail.guard import gpu

    return exposition_series(gpu.render(gpu.telemetry(gpu.parse_query(capture.read_text()), meminfo), 0, None,
                                        1765000000.0), node, values)


def exposition_series(text: str, node: str, values: dict[str, str] | None = None) -> list[dict]:
    scrape = {"instance": f"{node}:9100", "job": "node", "node": node}
    out = []
    for (name, labels), value in samples(text).items():
        if name == "twinrail_gpu_checked_timestamp_seconds":
            continue
        label_text = ", ".join(f'{k}="{v}"' for k, v in sorted({**dict(labels), **scrape}.items()))
        out.append({"series": f"{name}{{{label_text}}}", "values": (values or {}).get(name, f"{value:g}x20")})
    return out


TELEMETRY = FIXTURES / "gpu-telemetry"
H100 = TELEMETRY / "nvidia_smi_query_gpu_csv_allfields_1x_h100_80gb_hbm3_load_drv590.48.01.txt"
L40S = TELEMETRY / "nvidia_smi_query_gpu_csv_allfields_1x_l40s_load_drv595.80.txt"
GB10 = TELEMETRY / "nvidia_smi_query_gpu_csv_1x_gb10_dgx_spark_drv580.173.02_mem_NA_util_power_temp_header_units.txt"


BUSY = FIXTURES / "gpu-busy"
# Each real table of GPUs whose job hung or waited on its peers, and of
# working ones: the GPUs (by index) the alert names, from what the reporters
# said (tests/fixtures/gpu-busy/SOURCES.md).
BUSY_VERDICTS = {
    # training froze after some epochs (a deadlock): 100 % at 65-76 W of 300 W
    "nvidia_smi_table_partial_v100_sxm2_drv410.104_hung_100pct_65-76W_300W_training_freeze_pytorch_issue22671.txt":
        {0, 1, 2},
    # ZeRO-3 stuck in partition_grads on every rank: 100 % at 116-121 W of 700 W
    "nvidia_smi_table_partial_h100_drv535.183.01_hung_100pct_116-121W_700W_zero3_partition_grads_deepspeed_issue6524_"
    "STORE_COLLAPSED.txt": {0, 1},
    # a model-parallel server with no request: GPU 1 spins in its wait at 100 %, GPU 0 idles at 0 %
    "nvidia_smi_table_partial_v100_sxm2_drv470.82.01_idle_spin_gpu1_100pct_66W_300W_glm130b_issue32.txt": {1},
    # 64 V100s waiting on their peers (ZeRO-3 over the network, "poor GPU utilization efficiency")
    "nvidia_smi_table_partial_v100_sxm2_drv470.161.03_stalled_99-100pct_67-71W_300W_bloomz176b_zero3_peft_issue194.txt":
        {0, 1, 2},
    # working A100s: 99-100 % at 308-353 W of 500 W
    "nvidia_smi_table_partial_a100_sxm_drv515.48.07_healthy_99-100pct_308-353W_500W_multigpu_chtc_templates_gpus_"
    "pr24.txt": set(),
}


def table_series(capture: Path, node: str) -> list[dict]:
    """The figures of a real nvidia-smi table (gpu_facts.parse_table: busy
    share, power draw and limit) as twinrail-guard gpu writes them: its
    --query-gpu fields, read by its own telemetry."""
    from ansible.module_utils.gpu.facts import parse_table  # pylint: disable=import-outside-toplevel
    from twinrail.guard import gpu  # pylint: disable=import-outside-toplevel

    def field(value) -> str:
        return "[N/A]" if value is None else f"{value:g}"

    rows = [{"index": str(g["index"]), "pci.bus_id": g["bus_id"], "name": g["name"],
             "utilization.gpu": field(g["utilization_pct"]), "power.draw": field(g["power_watts"]),
             "power.limit": field(g["power_limit_watts"])} for g in parse_table(capture.read_text())["gpus"]]
    return exposition_series(gpu.render(gpu.telemetry(rows), 0, None, 1765000000.0), node, {})


def test_a_busy_gpu_at_idle_power_fires_on_the_hung_tables_not_the_working_ones(tmp_path):
    """Every real table in tests/fixtures/gpu-busy, each from its own node,
    held for 6 minutes: the alert names exactly the GPUs whose job hung or
    waited (over a third of their power limit unused at 90 % busy or more),
    not the working A100s, and not before monitoring_alert_gpu_busy_for."""
    assert {p.name for p in BUSY.glob("*.txt")} == set(BUSY_VERDICTS)
    listed = (BUSY / "SOURCES.md").read_text()
    assert all(name in listed for name in BUSY_VERDICTS)
    rules = render_rules(tmp_path, **LAB)
    series, firing = [], []
    for k, (name, gpus) in enumerate(sorted(BUSY_VERDICTS.items())):
        node = f"n{k}"
        mine = table_series(BUSY / name, node)
        series += mine
        for s in mine:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', s["series"]))
            if s["series"].startswith("twinrail_gpu_utilization_ratio{") and int(labels["gpu"]) in gpus:
                busy = f"{float(s['values'].split('x')[0]) * 100:g}%"
                firing.append({"exp_labels": {"severity": "warning", **labels}, "exp_annotations": {
                    "summary": f"{node} GPU {labels['gpu']} ({labels['bus_id']}) is {busy} busy at idle power",
                    "description": BUSY_DESCRIPTION}})
    assert len(firing) == 9 and {s["series"].split("{")[0] for s in series} == {
        "twinrail_gpu_smi_up", "twinrail_gpu_xid_errors", "twinrail_gpu_info", "twinrail_gpu_utilization_ratio",
        "twinrail_gpu_power_watts", "twinrail_gpu_power_limit_watts"}
    alert = "TwinrailGpuBusyAtIdlePower"
    result = rule_test(tmp_path, rules, series, [{"eval_time": "4m", "alertname": alert, "exp_alerts": []},
                                                 {"eval_time": "6m", "alertname": alert, "exp_alerts": firing}])
    assert result.returncode == 0, result.stdout + result.stderr
    # the test can fail: the working A100s named too is refused
    a100 = [s for s in series if s["series"].startswith("twinrail_gpu_utilization_ratio{") and 'node="n0"' in s["series"]]
    assert "A100" in a100[0]["series"]
    extra = {"exp_labels": {"severity": "warning", **dict(re.findall(r'(\w+)="([^"]*)"', a100[0]["series"]))},
             "exp_annotations": firing[0]["exp_annotations"]}
    refused = rule_test(tmp_path, rules, series, [{"eval_time": "6m", "alertname": alert,
                                                   "exp_alerts": firing + [extra]}])
    assert refused.returncode != 0


BUSY_DESCRIPTION = (
    "For 5m it drew under 0.3 of its power limit (a GPU without one: under 0 W): a kernel holds the GPU without "
    "computing. A collective waits for a peer that does not answer or answers slowly (NCCL over a rail that is down, "
    "stale or slow), or an engine is wedged in a spin. When requests are in flight and no token comes, the guard's "
    "stall watchdog restarts the engine; otherwise read the engine's journal (twinrail logs), the rails (twinrail "
    "status) and the Xid lines (journalctl -k -b | grep Xid).")


def test_a_busy_gb10_is_judged_by_watts_where_its_profile_sets_them(tmp_path):
    """A GB10 reports no power limit. The real GB10 answer's 11.17 W, held
    with the 96 % busy the field's hung GB10s report (prose only: no table
    of one is public): the dgx-spark profile (25 W) fires, a profile that
    sets no watts (0) does not judge it."""
    spark = render_rules(tmp_path, profile="dgx-spark", **LAB)
    series = gpu_series(GB10, "spark", {"twinrail_gpu_utilization_ratio": "0.96x100"},
                        meminfo={"MemTotal": 2**37, "MemAvailable": 2**36})
    assert not any(s["series"].startswith("twinrail_gpu_power_limit_watts") for s in series)
    labels = dict(re.findall(r'(\w+)="([^"]+)"', next(s["series"] for s in series
                                                      if s["series"].startswith("twinrail_gpu_utilization_ratio"))))
    firing = [{"exp_labels": {"severity": "warning", **labels}, "exp_annotations": {
        "summary": "spark GPU 0 () is 96% busy at idle power",  # the capture asked for no bus id
        "description": BUSY_DESCRIPTION.replace("under 0 W", "under 25 W")}}]
    result = rule_test(tmp_path, spark, series, [{"eval_time": "6m", "alertname": "TwinrailGpuBusyAtIdlePower",
                                                  "exp_alerts": firing}])
    assert result.returncode == 0, result.stdout + result.stderr
    unjudged = rule_test(tmp_path, render_rules(tmp_path, **LAB), series,
                         [{"eval_time": "6m", "alertname": "TwinrailGpuBusyAtIdlePower", "exp_alerts": []}])
    assert unjudged.returncode == 0, unjudged.stdout + unjudged.stderr


def test_joules_per_token_and_cost_from_real_power_and_the_guards_tokens(tmp_path):
    """An H100 under load (631.95 W) and a GB10 (11.17 W), the guard counting
    60 tokens every 5 s (12 tokens/s): 643.12 W / 12 tokens/s = 53.59 J a
    token; at 0.30 a kWh, 53.59e6 J / 3.6e6 * 0.30 = 4.466 a million tokens."""
    rules = render_rules(tmp_path, **LAB, monitoring_electricity_price=0.30)
    assert promtool("check", "rules", str(rules)).returncode == 0
    tokens = {"series": f'twinrail_guard_generated_tokens_total{{{WORKER}, model="m"}}', "values": "0+60x80"}
    series = gpu_series(H100, "spark-a") + gpu_series(GB10, "spark-b", meminfo={"MemTotal": 2**37,
                                                                                "MemAvailable": 2**36}) + [tokens]
    exprs = [{"expr": "round(twinrail:energy_joules_per_token, 0.01)", "eval_time": "6m",
              "exp_samples": [{"labels": "{}", "value": 53.59}]},
             {"expr": "round(twinrail:cost_per_million_tokens, 0.001)", "eval_time": "6m",
              "exp_samples": [{"labels": "{}", "value": 4.466}]}]
    result = rule_test(tmp_path, rules, series, [], exprs)
    assert result.returncode == 0, result.stdout + result.stderr
    # no tokens (an idle cluster): no figure rather than an infinite one
    idle = rule_test(tmp_path, rules, series[:-1] + [dict(tokens, values="0x80")], [],
                     [{"expr": "twinrail:energy_joules_per_token", "eval_time": "6m", "exp_samples": []}])
    assert idle.returncode == 0, idle.stdout + idle.stderr
    # without a price the cost is not recorded
    assert "cost_per_million_tokens" not in render_rules(tmp_path, **LAB).read_text()


def test_gpu_alerts_fire_on_the_gpu_that_crosses_and_name_it(tmp_path):
    """Real figures against lowered bounds: the H100 at 59 C fires a bound of
    55, the L40S at 54 C does not; a dedicated GPU 96 % full fires, a GB10's
    unified memory 99 % full does not (the watermarks judge it)."""
    rules = render_rules(tmp_path, **LAB, monitoring_alert_gpu_temperature_celsius=55)
    used = {"twinrail_gpu_memory_used_bytes": f"{int(85520809984 * 0.96)}x20"}
    series = (gpu_series(H100, "n1", used) + gpu_series(L40S, "n2")
              + gpu_series(GB10, "spark", meminfo={"MemTotal": 100, "MemAvailable": 1}))
    hot = [{"exp_labels": {"severity": "warning", "gpu": "0", "bus_id": "00000000:00:09.0",
                           "name": "NVIDIA H100 80GB HBM3", "instance": "n1:9100", "job": "node", "node": "n1"},
            "exp_annotations": {"summary": "n1 GPU 0 (00000000:00:09.0) is at 59 C",
                                "description": "Above this the GPU slows its clocks to cool down (tokens/s fall): "
                                               "check the airflow and the fans."}}]
    full = [{"exp_labels": {"severity": "warning", "gpu": "0", "bus_id": "00000000:00:09.0",
                            "name": "NVIDIA H100 80GB HBM3", "instance": "n1:9100", "job": "node", "node": "n1"},
             "exp_annotations": {
                 "summary": "n1 GPU 0 (00000000:00:09.0) uses 96% of its memory",
                 "description": "Close to full, a longer context or one more slot fails to allocate (cudaMalloc): "
                                "lower the context or slots, or give the GPU a smaller share of the layers. A GB10's "
                                "memory is the node's (unified): the memory watermarks' alerts judge it."}}]
    result = rule_test(tmp_path, rules, series,
                       [{"eval_time": "20s", "alertname": "TwinrailGpuHot", "exp_alerts": hot},
                        {"eval_time": "20s", "alertname": "TwinrailGpuMemoryNearFull", "exp_alerts": full},
                        {"eval_time": "20s", "alertname": "TwinrailGpuUncorrectedErrors", "exp_alerts": []},
                        {"eval_time": "20s", "alertname": "TwinrailGpuNotRead", "exp_alerts": []}])
    assert result.returncode == 0, result.stdout + result.stderr
    # the same, an alert expected on the L40S too, is refused: the test can fail
    wrong = [*hot, {**hot[0], "exp_labels": {**hot[0]["exp_labels"], "instance": "n2:9100", "node": "n2"}}]
    refused = rule_test(tmp_path, rules, series, [{"eval_time": "20s", "alertname": "TwinrailGpuHot",
                                                   "exp_alerts": wrong}])
    assert refused.returncode != 0


def test_uncorrected_errors_xid_lines_and_a_failed_nvidia_smi_fire(tmp_path):
    rules = render_rules(tmp_path, **LAB)
    scrape = 'instance="n1:9100", job="node", node="n1"'
    labels = f'bus_id="00000000:00:09.0", gpu="0", {scrape}, name="NVIDIA H100 80GB HBM3"'
    series = [{"series": f"twinrail_gpu_ecc_uncorrected_errors{{{labels}}}", "values": "0 0 4x10"},
              {"series": f"twinrail_gpu_xid_errors{{{scrape}}}", "values": "0 0 1x10"},
              {"series": f"twinrail_gpu_smi_up{{{scrape}}}", "values": "1 1 0x10"},
              {"series": f"twinrail_gpu_checked_timestamp_seconds{{{scrape}}}", "values": "0+5x12"}]
    result = rule_test(tmp_path, rules, series, [
        {"eval_time": "10s", "alertname": "TwinrailGpuUncorrectedErrors", "exp_alerts": [
            {"exp_labels": {"severity": "critical", "bus_id": "00000000:00:09.0", "gpu": "0", "instance": "n1:9100",
                            "job": "node", "node": "n1", "name": "NVIDIA H100 80GB HBM3"},
             "exp_annotations": {"summary": "n1 GPU 0 (00000000:00:09.0): 4 uncorrected ECC errors",
                                 "description": "Memory the GPU could not correct since the driver loaded: its "
                                                "results may be wrong. Drain the node and reset the GPU (nvidia-smi "
                                                "-r) or reboot; the next run's GPU gate refuses it while the counter "
                                                "stands."}}]},
        {"eval_time": "10s", "alertname": "TwinrailGpuXidErrors", "exp_alerts": [
            {"exp_labels": {"severity": "warning", "instance": "n1:9100", "job": "node", "node": "n1"},
             "exp_annotations": {"summary": "n1: 1 new Xid lines in the kernel log",
                                 "description": "The NVIDIA driver reported GPU errors (journalctl -k -b | grep Xid); "
                                                "twinrail status names each GPU's."}}]},
        {"eval_time": "15s", "alertname": "TwinrailGpuNotRead", "exp_alerts": []},
        {"eval_time": "25s", "alertname": "TwinrailGpuNotRead", "exp_alerts": [
            {"exp_labels": {"severity": "critical", "instance": "n1:9100", "job": "node", "node": "n1"},
             "exp_annotations": {"summary": "n1: the GPUs cannot be read",
                                 "description": "nvidia-smi fails there (a GPU fallen off the bus, the driver gone or "
                                                "upgraded under the running one: twinrail_gpu_smi_error_info says what "
                                                "it printed), or the twinrail-gpu timer does not run."}}]}])
    assert result.returncode == 0, result.stdout + result.stderr
