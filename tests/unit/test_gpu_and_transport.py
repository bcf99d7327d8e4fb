"""nvidia-smi (table and query forms) and ggml-rpc-server's transport, on
real captures from GB10 boxes and a Tesla T4 (tests/fixtures/hardware/)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from gpu_facts import ParseError, gpu_gate, parse_query, parse_table
from rpc_transport import parse_log, transport_verdict

HW = FIXTURES / "hardware"


def read(name: str) -> str:
    return (HW / name).read_text()


def test_the_gb10_table_unified_memory_not_supported():
    facts = parse_table(read("nvidia-smi_gb10_table_persistence_off_3procs_cudf_notebook_dgx_spark_playbooks.txt"))
    assert (facts["driver_version"], facts["cuda_version"], facts["nvidia_smi"]) == ("580.82.09", "13.0", "580.82.09")
    (gpu,) = facts["gpus"]
    assert gpu == {"index": 0, "name": "NVIDIA GB10", "persistence": False, "bus_id": "0000000F:01:00.0",
                   "memory_used_mib": None, "memory_total_mib": None, "memory_supported": False,
                   "utilization_pct": 0}


def test_a_gb10_table_after_a_shell_prompt():
    facts = parse_table(read("nvidia-smi_gb10_table_prompt_firefox_procs_obrienlabs_blog.txt"))
    assert facts["driver_version"] == "580.95.05"
    assert facts["gpus"][0]["persistence"] is True and facts["gpus"][0]["utilization_pct"] == 10


def test_the_old_layout_of_a_discrete_gpu():
    facts = parse_table(read("nvidia-smi_tesla_t4_table_535_old_layout_cloud_native_docs.txt"))
    assert (facts["driver_version"], facts["cuda_version"]) == ("535.86.10", "12.2")
    (gpu,) = facts["gpus"]
    assert (gpu["name"], gpu["memory_used_mib"], gpu["memory_total_mib"], gpu["bus_id"]) == (
        "Tesla T4", 0, 15109, "00000000:00:1E.0")


def test_the_query_forms_with_and_without_header():
    with_units = parse_query(read("nvidia-smi_gb10_query_csv_header_units_nvitop_pr208.txt"))
    assert with_units == [{"memory.total": None, "memory.used": None, "memory.free": None,
                           "utilization.gpu": 0, "power.draw": 11.17, "temperature.gpu": 35}]
    bare = parse_query(read("nvidia-smi_gb10_query_csv_noheader_nounits_marimo_pr6822.txt"),
                       ["index", "name", "memory.total", "memory.used", "memory.free"])
    assert bare == [{"index": 0, "name": "NVIDIA GB10", "memory.total": None, "memory.used": None,
                     "memory.free": None}]


def test_other_tools_output_is_refused():
    with pytest.raises(ParseError):
        parse_table(read("free_dgx_spark_kib_prompt_obrienlabs_blog.txt"))
    with pytest.raises(ParseError):
        parse_query(read("nvidia-smi_gb10_query_csv_noheader_nounits_marimo_pr6822.txt"), ["index", "name"])


def test_the_gate_names_the_node_and_the_versions():
    a = parse_table(read("nvidia-smi_gb10_table_persistence_off_3procs_cudf_notebook_dgx_spark_playbooks.txt"))
    b = parse_table(read("nvidia-smi_gb10_table_prompt_firefox_procs_obrienlabs_blog.txt"))
    assert gpu_gate({"spark-a": a, "spark-b": a}, cuda_required=True) == []
    assert gpu_gate({"spark-a": a, "spark-b": b}, cuda_required=True) == [
        "spark-b: NVIDIA driver version 580.95.05, expected 580.82.09 as on spark-a (every node runs the same)"]
    assert gpu_gate({"spark-a": a, "spark-b": None}, cuda_required=True) == [
        "spark-b: no NVIDIA GPU found (nvidia-smi is not installed) while the runtime is built with CUDA "
        "(runtime_build_cuda)"]
    assert gpu_gate({"spark-a": None, "spark-b": None}, cuda_required=False) == []


JOURNAL = "rpc-server_gb10_rdma_autoneg_journal_probed_activated_thinkoffapp.txt"


def test_the_rdma_journal_of_a_gb10_rpc_server():
    log = parse_log(read(JOURNAL))
    assert log["endpoint"] == "192.168.100.11:50052"
    assert log["banner"] == "TCP (RDMA auto-negotiate enabled)"
    assert [c["rdma"] for c in log["connections"]] == [False, True, True, True, True]
    assert log["connections"][-1] == {"rdma": True, "device": "rocep1s0f0", "gid": 5, "mtu": 1024, "closed": True}
    assert transport_verdict(log, "rocep1s0f0") is None
    assert transport_verdict(log, "rocep1s0f1") == \
        "RDMA activated on rocep1s0f0, not on the rail's device rocep1s0f1"


def test_the_banner_alone_proves_nothing():
    # the same journal up to its first connection, which stayed on TCP
    text = read(JOURNAL)
    first = text[:text.index("Client connection closed") + len("Client connection closed")]
    verdict = transport_verdict(parse_log(first), "rocep1s0f0")
    assert verdict == ("the newest connection runs over TCP: RDMA never probed (banner: TCP (RDMA "
                       "auto-negotiate enabled); the fallback is silent)")
    # a TCP-only build at start: nobody connected yet
    tcp = parse_log(read("rpc-server_rtx5090_tcp_v3_startup_llama_cpp_readme.txt"))
    assert transport_verdict(tcp, "") == "no client connection in its log yet (the master has not connected)"
