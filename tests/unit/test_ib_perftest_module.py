"""The ib_perftest module: command lines, check mode, saved captures."""

from __future__ import annotations

import json

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
