"""rpc_transport_facts: each rail's RPC server journal, read since the unit
last started, judged on its connections (real journals: a GB10 box's RDMA
build, a TCP-only build), and the service gate's message over it."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import FIXTURES, REPO, filter_plugins

import rpc_transport_facts

filters = filter_plugins()

GB10 = (FIXTURES / "hardware" / "rpc-server_gb10_rdma_autoneg_journal_probed_activated_thinkoffapp.txt").read_text()
TCP = (FIXTURES / "hardware" / "rpc-server_rtx5090_tcp_v3_startup_llama_cpp_readme.txt").read_text()
# the GB10 journal up to its first connection's end: that one stayed on TCP
FIRST = GB10[:GB10.index("Client connection closed") + len("Client connection closed")]
RAILS = [{"name": "rail0", "address": "192.168.100.11/24", "rdma_device": "rocep1s0f0"},
         {"name": "rail1", "address": "192.168.200.11/24", "rdma_device": "rocep1s0f1"}]


def run(rails, journals: dict, capsys, monkeypatch):
    """journals: unit -> its journal since the unit's invocation."""
    calls = []

    def run_command(self, argv, **_kw):
        calls.append(argv)
        if argv[1] == "show":
            return 0, f"InvocationID=inv-{argv[-1]}\nInactiveExitTimestamp=Sat 2026-12-05 10:00:00 UTC\n", ""
        unit = argv[argv.index("-o") + 2].split("=", 1)[1].removeprefix("inv-")
        return 0, journals[unit], ""

    monkeypatch.setattr(rpc_transport_facts.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(rpc_transport_facts.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: name)
    with patch_module_args({"rails": rails}), pytest.raises(SystemExit):
        rpc_transport_facts.main()
    return json.loads(capsys.readouterr().out), calls


def test_the_newest_connection_over_rdma_on_the_rails_device_passes(capsys, monkeypatch):
    result, calls = run(RAILS[:1], {"twinrail-rpc@192.168.100.11.service": GB10}, capsys, monkeypatch)
    assert result["rails"] == [{"name": "rail0", "address": "192.168.100.11",
                                "unit": "twinrail-rpc@192.168.100.11.service", "expected": "rdma",
                                "banner": "TCP (RDMA auto-negotiate enabled)", "connections": 5,
                                "rdma_connections": 4, "failures": [], "problem": None}]
    # only what this start of the unit logged
    assert calls[1][4:7] == ["_SYSTEMD_INVOCATION_ID=inv-twinrail-rpc@192.168.100.11.service", "+",
                             "INVOCATION_ID=inv-twinrail-rpc@192.168.100.11.service"]


def test_a_silent_fallback_to_tcp_or_the_wrong_device_fails_the_gate(capsys, monkeypatch):
    result, _ = run(RAILS, {"twinrail-rpc@192.168.100.11.service": FIRST,
                            "twinrail-rpc@192.168.200.11.service": GB10}, capsys, monkeypatch)
    problems = filters.transport_problems(
        [{"__service_worker": "spark-b", **result}, {"skipped": True, "__service_worker": "spark-c"}],
        "__service_worker")
    assert problems == [
        "spark-b rail0 (192.168.100.11, expected RDMA): the newest connection runs over TCP: RDMA never probed "
        "(banner: TCP (RDMA auto-negotiate enabled); the fallback is silent)",
        "spark-b rail1 (192.168.200.11, expected RDMA): RDMA activated on rocep1s0f0, not on the rail's device "
        "rocep1s0f1"]


def test_a_rail_without_an_rdma_device_is_expected_on_tcp(capsys, monkeypatch):
    rail = {"name": "rail0", "address": "198.19.0.2/24", "rdma_device": ""}
    result, _ = run([rail], {"twinrail-rpc@198.19.0.2.service": TCP}, capsys, monkeypatch)
    assert result["rails"][0]["expected"] == "tcp" and result["rails"][0]["problem"] is None
    assert filters.transport_problems([{"__service_worker": "lab-worker1", **result}], "__service_worker") == []
