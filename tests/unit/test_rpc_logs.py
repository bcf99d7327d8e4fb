"""ggml-rpc-server's and the loader's logs in every format llama.cpp has
printed, failures first, on real captures (tests/fixtures/rpc/SOURCES.md;
the format history in docs/architecture.md): a server that cannot listen,
crashed or cannot allocate is a failure quoting it for the service gate,
the guard's metric and `twinrail status`; an RDMA device the log does not
name never passes; the loader's buffer lines in each naming."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import FIXTURES

import rpc_transport_facts
from ansible.module_utils.engines.llamacpp.rpc_transport import parse_log, server_problem, transport_verdict
from ansible.module_utils.engines.llamacpp.tensor_split import load_error_cause, parse_buffers
from twinrail.ctl import status
from twinrail.guard import textfile

RPC = FIXTURES / "rpc"


def read(name: str) -> str:
    return (RPC / name).read_text()


def first_connection(text: str) -> str:
    """A real log up to the end of its first client connection."""
    return text[:text.index("Client connection closed") + len("Client connection closed")]


@pytest.mark.parametrize("name, words", [
    # a restart that cannot bind, after an allocation failure and a segfault
    ("rpc_server_bind_failure_after_oom_segfault__issue7293.txt", "Failed to create server socket"),
    ("rpc_server_old_banner_host_warning_cuda_crash__issue9214.txt", "CUDA error: CUBLAS_STATUS_NOT_INITIALIZED"),
    ("rpc_server_cuda_crash_backtrace__issue17647.txt", "CUDA error: an illegal memory access was encountered"),
    ("rpc_server_rdma_probed_prerelease_format_no_roce_suffix__pr20590_mithras.txt", "RDMA CQ poll timeout"),
])
def test_a_failed_server_is_a_failure_quoting_it_on_every_rail(name, words):
    log = parse_log(read(name))
    problem = server_problem(log)
    assert problem and problem.startswith("the RPC server failed: ") and words in problem
    # an RDMA rail and a TCP rail alike: the failure comes first
    assert transport_verdict(log, "rocep1s0f0") == problem
    assert textfile.newest_transport(log) == "failed"
    assert status.transport(read(name), "") == "failed: " + problem.split(": ", 1)[1]


def test_the_failures_before_a_restart_that_worked_are_history():
    """The bind-failure log: the first run's allocation failure and
    segfault precede the second start; that start's own failure counts."""
    log = parse_log(read("rpc_server_bind_failure_after_oom_segfault__issue7293.txt"))
    assert log["failures"] == ["Failed to create server socket"]
    assert log["endpoint"] == "0.0.0.0:50052" and log["started"]


def run_module(rails, journals, capsys, monkeypatch):
    def run_command(self, argv, **_kw):
        if argv[1] == "show":
            return 0, f"InvocationID=inv-{argv[-1]}\nInactiveExitTimestamp=Sat 2026-12-05 10:00:00 UTC\n", ""
        return 0, journals[argv[argv.index("-o") + 2].split("=", 1)[1].removeprefix("inv-")], ""

    monkeypatch.setattr(rpc_transport_facts.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(rpc_transport_facts.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: name)
    with patch_module_args({"rails": rails}), pytest.raises(SystemExit):
        rpc_transport_facts.main()
    return json.loads(capsys.readouterr().out)["rails"]


def test_a_tcp_rails_crashed_server_fails_the_service_gate(capsys, monkeypatch):
    rails = [{"name": "rail0", "address": "192.168.1.2/24", "rdma_device": ""},
             {"name": "rail1", "address": "192.168.2.2/24", "rdma_device": ""}]
    found = run_module(rails, {"twinrail-rpc@192.168.1.2.service": read("rpc_server_old_banner_cpu__pr7319_ggerganov.txt"),
                               "twinrail-rpc@192.168.2.2.service":
                               read("rpc_server_bind_failure_after_oom_segfault__issue7293.txt")}, capsys, monkeypatch)
    assert [(r["name"], r["expected"], r["problem"]) for r in found] == [
        ("rail0", "tcp", None),
        ("rail1", "tcp", "the RPC server failed: Failed to create server socket")]
    assert found[1]["failures"] == ["Failed to create server socket"]


def test_an_rdma_probe_in_the_format_without_the_gid_type_names_its_device():
    """The early RDMA branch printed no RoCE type: the device and GID are
    still read, so a rail up on another device fails."""
    log = parse_log(first_connection(read("rpc_server_rdma_probed_prerelease_format_no_roce_suffix__pr20590_mithras.txt")))
    (conn,) = log["connections"]
    assert (conn["rdma"], conn["device"], conn["gid"], conn["mtu"]) == (True, "rocep101s0", 5, 1024)
    assert transport_verdict(log, "rocep101s0") is None
    assert transport_verdict(log, "rocep1s0f1") == "RDMA activated on rocep101s0, not on the rail's device rocep1s0f1"


@pytest.mark.parametrize("name, endpoint, version", [
    ("docs_readme_first_banner_host_port__5e31828d3.txt", "0.0.0.0:50052", None),
    ("rpc_server_old_banner_cpu__pr7319_ggerganov.txt", "0.0.0.0:5543", None),
    ("rpc_server_old_banner_mem_flag__issue8417.txt", "0.0.0.0:50052", None),
    ("rpc_server_old_banner_accepted_free_mem__issue11552.txt", "192.168.90.190:50052", None),
    ("docs_readme_banner_v3_devices__c61ae20d0.txt", "127.0.0.1:50052", "3.0.0"),
])
def test_every_start_banner_is_read(name, endpoint, version):
    log = parse_log(read(name))
    assert (log["started"], log["endpoint"], log["version"], log["failures"]) == (True, endpoint, version, [])
    assert server_problem(log) is None


def test_old_connections_with_their_free_memory_and_a_server_that_never_started():
    log = parse_log(read("rpc_server_old_banner_accepted_free_mem__issue11552.txt"))
    assert len(log["connections"]) == 4 and all(c["closed"] and not c["rdma"] for c in log["connections"])
    # client-side lines only: no banner, no connection, nothing of a server
    nothing = parse_log(read("client_failed_to_connect__issue12385.txt"))
    assert server_problem(nothing) == ("its log has no start banner ('Starting RPC server ...'): it never "
                                       "started listening")


def test_the_loader_buffer_lines_in_each_naming_and_its_failure():
    old = parse_buffers(read("client_load_tensors_RPC_bracket_model_buffer__issue11552.txt"))
    assert [(b["device"], b["kind"], b["bytes"]) for b in old["buffers"]] == [
        ("RPC[192.168.90.190:50052]", "model", int(2700.00 * 2**20)), ("CPU_Mapped", "model", int(170.54 * 2**20))]
    assert old["error"] is None
    # timestamped lines; the compute buffers are not the model's
    box = parse_buffers(read("fork_llamabox_load_tensors_RPC_bracket_timestamped__llamabox34.txt"))
    assert [(b["device"], b["kind"]) for b in box["buffers"]] == [("RPC[172.20.10.59:50195]", "model")]
    failed = parse_buffers(read("client_alloc_failure_unable_to_allocate_RPC0__issue23858.txt"))
    assert failed["buffers"] == []
    assert failed["error"] == "failed to allocate RPC0[10.0.69.2:50052] buffer of size 193608946688"



@pytest.mark.parametrize("name, error, words", [
    ("client_rpc_version_mismatch_then_failed_to_connect__issue26392.txt", "RPC server version mismatch: 4.0.1",
     "another RPC protocol version"),
    ("client_failed_to_connect__issue12385.txt", "Failed to connect to :50052", "the --rpc list is malformed"),
])
def test_a_client_that_never_reached_its_rpc_servers_names_why(name, error, words):
    log = parse_buffers(read(name))
    assert log["buffers"] == [] and log["error"] == error
    assert words in load_error_cause(log["error"])


def test_a_refused_allocation_stands_until_a_client_comes_after_it():
    """The bind-failure capture's first run up to its allocation failure
    (before the segfault): the server said it could not allocate and no
    client came after: failed."""
    text = read("rpc_server_bind_failure_after_oom_segfault__issue7293.txt")
    first = text[:text.index("cudaMalloc failed: out of memory") + len("cudaMalloc failed: out of memory")]
    log = parse_log(first)
    assert log["failures"] == ["ggml_backend_cuda_buffer_type_alloc_buffer: allocating 6144.00 MiB on device 0: "
                               "cudaMalloc failed: out of memory"]
    assert server_problem(log).startswith("the RPC server failed: ggml_backend_cuda_buffer_type_alloc_buffer")


def test_an_empty_journal_says_nothing_and_journalctls_no_entries_is_the_rails_problem(capsys, monkeypatch):
    # an empty log (a long-lived server's rotated away) is not judged a failure here
    assert server_problem(parse_log("")) is None
    no_entries = (FIXTURES / "net" / "journalctl_u_k3s_no_entries_logs_begin.txt").read_text()
    found = run_module([{"name": "rail0", "address": "192.168.1.2/24", "rdma_device": ""}],
                       {"twinrail-rpc@192.168.1.2.service": no_entries}, capsys, monkeypatch)
    assert found[0]["problem"] == "journalctl: -- No entries --"
