"""The ib_perftest module: command lines, check mode, saved captures."""

from __future__ import annotations

import json
import sys
import time

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import FIXTURES

import ib_perftest

P = FIXTURES / "perftest"
BASE = {"test": "ib_write_bw", "mode": "client", "server": "10.100.0.2", "device": "mlx5_0",
        "ib_port": 1, "gid_index": 3, "size": None, "all_sizes": False, "qps": 1,
        "duration": None, "iterations": None, "port": 18515, "rdma_cm": False,
        "bind_address": None, "report_gbits": True, "bidirectional": False}


def run(args, capsys, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        ib_perftest.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def test_perftest_client_command_line():
    argv = ib_perftest.build_argv(dict(BASE, size=1048576, duration=5, qps=2, rdma_cm=True,
                                       bind_address="10.100.0.1"))
    assert argv == ["ib_write_bw", "-F", "-p", "18515", "-i", "1", "-d", "mlx5_0", "-x", "3",
                    "-s", "1048576", "-q", "2", "-D", "5", "-R", "--source_ip", "10.100.0.1",
                    "--report_gbits", "10.100.0.2"]


def test_perftest_server_and_latency_command_lines():
    server = ib_perftest.build_argv(dict(BASE, mode="server", all_sizes=True))
    assert server[-2:] == ["-a", "--report_gbits"] and "10.100.0.2" not in server
    lat = ib_perftest.build_argv(dict(BASE, test="ib_write_lat", iterations=10000))
    assert "--report_gbits" not in lat and lat[-3:] == ["-n", "10000", "10.100.0.2"]


def test_iperf3_command_lines():
    client = ib_perftest.build_argv(dict(BASE, test="iperf3", port=5201, duration=5,
                                         bind_address="198.19.0.1", server="198.19.0.2"))
    assert client == ["iperf3", "--json", "-p", "5201", "-B", "198.19.0.1", "-c", "198.19.0.2",
                      "-P", "1", "-t", "5", "-O", "1"]
    server = ib_perftest.build_argv(dict(BASE, test="iperf3", mode="server", port=5201,
                                         bind_address="198.19.0.2"))
    assert server == ["iperf3", "--json", "-p", "5201", "-B", "198.19.0.2", "-s", "-1"]


def test_bidirectional_runs_both_ways_on_either_tool():
    # perftest: -b on the server and the client (both must agree)
    for mode in ("server", "client"):
        argv = ib_perftest.build_argv(dict(BASE, mode=mode, size=1048576, duration=5, bidirectional=True))
        assert argv.count("-b") == 1
    # iperf3: only the client asks (--bidir); the server serves both ways
    client = ib_perftest.build_argv(dict(BASE, test="iperf3", port=5201, duration=5, bidirectional=True,
                                         bind_address="198.19.0.1", server="198.19.0.2"))
    assert client[-1] == "--bidir"
    server = ib_perftest.build_argv(dict(BASE, test="iperf3", mode="server", port=5201, bidirectional=True,
                                         bind_address="198.19.0.2"))
    assert "--bidir" not in server
    assert "-b" not in ib_perftest.build_argv(dict(BASE, test="ib_write_lat", iterations=10, bidirectional=True))


def test_check_mode_runs_nothing(capsys, monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("a command was run in check mode")
    monkeypatch.setattr(ib_perftest.AnsibleModule, "run_command", refuse)
    monkeypatch.setattr(ib_perftest, "run_all", refuse)
    code, result = run({"test": "ib_write_bw", "server": "10.100.0.2"}, capsys, check_mode=True)
    assert code == 0 and result["skipped"] and not result["changed"]


def test_saved_capture_is_judged_again(capsys):
    path = P / "ib_read_bw_roce_100g_mbs_crossnode_degraded_avg_kubeansible.txt"
    code, result = run({"test": "ib_read_bw", "from_file": str(path), "min_bw_gbps": 90,
                        "label": "rail0 gpu2 -> gpu1"}, capsys)
    assert code == 1
    assert result["msg"] == ("bandwidth: rail0 gpu2 -> gpu1: ib_read_bw average 0.21 Gb/s, "
                             "required 90.00 Gb/s")
    code, result = run({"test": "ib_read_bw", "from_file": str(path), "min_bw_gbps": 90,
                        "fail_on_gate": False}, capsys)
    assert code == 0 and result["passed"] is False and not result["changed"]


def test_saved_capture_of_the_wrong_test(capsys):
    path = P / "ib_send_lat_roce_100g_crossnode_kubeansible.txt"
    code, result = run({"test": "ib_send_bw", "from_file": str(path)}, capsys)
    assert code == 1
    assert result["msg"] == ("bandwidth: ib_send_bw: ib_send_bw failed: the output is from "
                             "ib_send_lat, expected ib_send_bw")


def test_clients_start_together_and_answer_in_order(monkeypatch):
    """run_all: real processes, one thread each: two 1-second programs end
    within about a second of their start, not two, and each answer is its own."""
    code = "import sys, time; print(sys.argv[1], time.time()); time.sleep(1)"
    started = time.monotonic()
    answers = ib_perftest.run_all([[sys.executable, "-c", code, name] for name in ("rail0", "rail1")], timeout=30)
    took = time.monotonic() - started
    assert [a[0] for a in answers] == [0, 0]
    names = [a[1].split()[0] for a in answers]
    stamps = [float(a[1].split()[1]) for a in answers]
    assert names == ["rail0", "rail1"]
    assert abs(stamps[0] - stamps[1]) < 0.9 and took < 1.9, (stamps, took)


def test_clients_are_judged_each_on_its_own_output(capsys, monkeypatch):
    """Each client's real capture parsed on its own, labels kept; one that
    times out fails the task naming its rail; an unknown key is refused."""
    capture = (P / "iperf3_tcp_client_json_1stream_wan_71mbps_cloudpilot.json").read_text()
    seen = []

    def fake_run_all(argvs, timeout):
        seen.extend(argvs)
        return [(0, capture, ""), (0, capture, "")]
    monkeypatch.setattr(ib_perftest, "run_all", fake_run_all)
    clients = [{"test": "iperf3", "server": f"198.19.{i}.2", "bind_address": f"198.19.{i}.1", "port": 5201 + i,
                "qps": 4, "label": f"rail{i} lab-master -> lab-worker1 (all rails)"} for i in (0, 1)]
    code, result = run({"test": "ib_write_bw", "duration": 3, "bidirectional": True, "fail_on_gate": False,
                        "clients": clients}, capsys)
    assert code == 0 and result["passed"]
    assert [r["label"] for r in result["results"]] == [c["label"] for c in clients]
    assert all(r["transport"] == "tcp" and r["bw_average_gbps"] > 0 for r in result["results"])
    assert seen[1] == ["iperf3", "--json", "-p", "5202", "-B", "198.19.1.1", "-c", "198.19.1.2", "-P", "4",
                       "-t", "3", "-O", "1", "--bidir"]

    monkeypatch.setattr(ib_perftest, "run_all", lambda argvs, timeout: [(0, capture, ""), (124, "", "")])
    code, result = run({"test": "ib_write_bw", "duration": 3, "fail_on_gate": False, "clients": clients}, capsys)
    assert code == 1 and result["msg"].startswith("bandwidth: rail1 lab-master -> lab-worker1 (all rails): "
                                                  "iperf3 timed out after 120 s")
    code, result = run({"test": "ib_write_bw", "clients": [dict(clients[0], rate=5)]}, capsys)
    assert code == 1 and "clients[0]: needs server and takes only" in result["msg"]
    code, result = run({"test": "ib_write_bw", "clients": [clients[0], dict(clients[1], test="ib_write_bww")]}, capsys)
    assert code == 1 and "clients[1]: needs server" in result["msg"] and "ib_write_bww" in result["msg"]


def test_a_failed_iperf3_is_said_once_through_the_module(capsys):
    """iperf3's own error (a real capture) reads 'iperf3 failed: ...' once, not twice."""
    path = FIXTURES / "net" / "iperf3_json_error_no_route.json"
    code, result = run({"test": "iperf3", "from_file": str(path), "label": "rail1"}, capsys)
    assert code == 1
    assert result["msg"] == ("bandwidth: rail1: iperf3 failed: error - unable to connect to server: "
                             "No route to host")
