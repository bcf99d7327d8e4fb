"""nvidia-smi (table and query forms) and ggml-rpc-server's transport, on
real captures from GB10 boxes and a Tesla T4 (tests/fixtures/hardware/)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ansible.module_utils.gpu.facts import ParseError, gpu_gate, parse_query, parse_table, unified_memory
from ansible.module_utils.engines.llamacpp.rpc_transport import parse_log, transport_verdict

HW = FIXTURES / "hardware"
GPU = FIXTURES / "gpu"


def read(name: str) -> str:
    return (HW / name).read_text()


def test_the_gb10_table_unified_memory_not_supported():
    facts = parse_table(read("nvidia-smi_gb10_table_persistence_off_3procs_cudf_notebook_dgx_spark_playbooks.txt"))
    assert (facts["driver_version"], facts["cuda_version"], facts["nvidia_smi"]) == ("580.82.09", "13.0", "580.82.09")
    (gpu,) = facts["gpus"]
    assert gpu == {"index": 0, "name": "NVIDIA GB10", "persistence": False, "bus_id": "0000000F:01:00.0",
                   "memory": "unified", "memory_used_mib": None, "memory_total_mib": None,
                   "memory_supported": False, "mig": None, "utilization_pct": 0, "power_watts": 10.0,
                   "power_limit_watts": None}
    assert facts["problems"] == []


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
                     "memory.free": None, "memory": "unified"}]


def test_other_tools_output_is_refused():
    with pytest.raises(ParseError):
        parse_table(read("free_dgx_spark_kib_prompt_obrienlabs_blog.txt"))
    with pytest.raises(ParseError):
        parse_query(read("nvidia-smi_gb10_query_csv_noheader_nounits_marimo_pr6822.txt"), ["index", "name"])


def gpu(name: str) -> str:
    return (GPU / name).read_text()


@pytest.mark.parametrize("name, words", [
    ("nvidia_smi_fail_couldnt_communicate_with_driver.txt",
     "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
    ("nvidia_smi_fail_no_devices_were_found.txt", "No devices were found"),
    ("nvidia_smi_fail_nvml_driver_library_version_mismatch.txt",
     "Failed to initialize NVML: Driver/library version mismatch"),
    ("nvidia_smi_fail_nvml_version_mismatch_with_nvml_lib_version_570.txt", "NVML library version: 570.124"),
    ("nvidia_smi_fail_device_handle_unknown_error.txt",
     "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error"),
    ("nvidia_smi_fail_device_handle_unknown_error_nospace_busid.txt",
     "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error"),
    ("nvidia_smi_fail_device_handle_gpu_is_lost.txt", "GPU is lost. Reboot the system to recover this GPU"),
])
def test_nvidia_smi_failing_is_a_failure_quoting_it(name, words):
    with pytest.raises(ParseError, match="it failed: ") as raised:
        parse_table(gpu(name))
    assert words in str(raised.value)
    with pytest.raises(ParseError, match="nvidia-smi failed: ") as raised:
        parse_query(gpu(name), ["index", "name", "memory.total"])
    assert words in str(raised.value)


def test_outputs_the_parser_cannot_read_are_refused_saying_so():
    # a fragment (no header) and a 2014 driver whose header has no CUDA version
    for name in ("nvidia_smi_table_fragment_power_err_v100_old_layout.txt",
                 "nvidia_smi_3x_gtx_titan_325_lost_gpu_na_fields_partial.txt"):
        with pytest.raises(ParseError, match="nvidia-smi printed no table"):
            parse_table(gpu(name))


@pytest.mark.parametrize("name, driver, names, total_mib, mig", [
    ("nvidia_smi_8x_h100_sxm_565_new_layout.txt", "565.57.01", {"NVIDIA H100 80GB HBM3"}, 81559, [False] * 8),
    ("nvidia_smi_8x_a100_sxm4_40gb_mig_mixed_450_old_layout.txt", "450.80.02", {"A100-SXM4-40GB"}, 40537,
     [False] + [True] * 7),
    ("nvidia_smi_8x_rtx4090_550_new_layout.txt", "550.127.05", {"NVIDIA GeForce RTX 4090"}, 24564, [None] * 8),
    ("nvidia_smi_2x_rtx3090_560_new_layout.txt", "560.35.03", {"NVIDIA GeForce RTX 3090"}, 24576, [None] * 2),
    ("nvidia_smi_1x_rtx4090_580_with_processes.txt", "580.65.06", {"NVIDIA GeForce RTX 4090"}, 24564, [None]),
])
def test_a_multi_gpu_table_is_read_whole(name, driver, names, total_mib, mig):
    """Every GPU of the table, in order, each with its own memory and MIG
    mode; the MIG devices' table and the processes are not GPUs."""
    facts = parse_table(gpu(name))
    assert facts["driver_version"] == driver and facts["problems"] == []
    assert [g["index"] for g in facts["gpus"]] == list(range(len(mig)))
    assert {g["name"] for g in facts["gpus"]} == names
    assert {(g["memory"], g["memory_total_mib"]) for g in facts["gpus"]} == {("discrete", total_mib)}
    assert [g["mig"] for g in facts["gpus"]] == mig
    assert len({g["bus_id"] for g in facts["gpus"]}) == len(mig)


def test_unified_memory_is_the_product_and_its_reading_together():
    """GB10's own readings (its table's "Not Supported", its query's
    "[N/A]") say unified; the same words on any other product, or a bare
    N/A, say the memory was not read."""
    gb10 = parse_query(read("nvidia-smi_gb10_query_csv_noheader_nounits_marimo_pr6822.txt"),
                       ["index", "name", "memory.total", "memory.used", "memory.free"])
    assert gb10[0]["memory"] == "unified"
    assert unified_memory("NVIDIA GB10", "Not Supported") and unified_memory("NVIDIA GB10", "[N/A]", "query")
    assert not unified_memory("NVIDIA GB10", "N/A") and not unified_memory("NVIDIA H100 80GB HBM3", "Not Supported")
    assert not unified_memory("Tesla T4", "[N/A]", "query")
    titans = parse_query(gpu("nvidia_smi_query_csv_8x_titanx_noheader_nounits.txt"),
                         ["index", "uuid", "name", "temperature.gpu", "utilization.gpu", "memory.used", "memory.total"])
    assert [(t["index"], t["memory"], t["memory.total"]) for t in titans] == [(i, "discrete", 12206) for i in range(8)]


def test_a_discrete_gpu_whose_memory_reads_na_is_unread_never_unified():
    """An H100 whose table (nvidia-smi in a container given one MIG slice)
    reads its memory as "N/A": the old parser recorded it as GB10-like
    unified memory; it is a discrete GPU whose memory was not read."""
    facts = parse_table(gpu("nvidia_smi_h100_mig_in_container_memory_na_535.txt"))
    (h100,) = facts["gpus"]
    assert (h100["name"], h100["memory"], h100["memory_total_mib"], h100["mig"]) == (
        "NVIDIA H100 80GB HBM3", "unread", None, True)
    assert facts["problems"] == [
        "GPU 0 (NVIDIA H100 80GB HBM3, 00000000:8B:00.0): nvidia-smi reads its memory as 'N/A', not a figure: a "
        "discrete GPU whose memory is unknown (only NVIDIA GB10 share the CPU's)"]
    # the MIG devices' table below it is not read as GPUs
    assert gpu_gate({"h100": facts}, cuda_required=True) == [f"h100: {facts['problems'][0]}"]


def test_a_gpu_in_error_among_eight_is_named():
    """Eight A40s, GPU 4 after an Xid: ERR! in its name and fields; the
    others read normally."""
    facts = parse_table(gpu("nvidia_smi_8x_a40_gpu4_err_xid119_525.txt"))
    assert len(facts["gpus"]) == 8 and facts["driver_version"] == "525.60.13"
    (problem,) = facts["problems"]
    assert problem.startswith("GPU 4 (00000000:83:00.0): nvidia-smi shows ERR! where it reads the GPU")
    assert "ERR!  ERR! ERR!    ERR! / ERR!" in problem


def test_mig_mode_and_the_query_forms_na():
    (row,) = parse_query(gpu("nvidia_smi_query_csv_mig_mode_current_na_header.txt"))
    assert row == {"mig.mode.current": None}
    (vgpu,) = parse_query(gpu("nvidia_smi_query_csv_na_value_mig_vgpu_h100l.txt"),
                          ["clocks.max.sm", "memory.total", "name"])
    assert vgpu == {"clocks.max.sm": None, "memory.total": 24576, "name": "NVIDIA H100L-2-24C", "memory": "discrete"}


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
    assert log["connections"][-1] == {"rdma": True, "device": "rocep1s0f0", "gid": 5, "mtu": 1024, "closed": True,
                                      "probed": "RDMA probed: dev=rocep1s0f0 gid=5 RoCEv2 qpn=306 inline=316",
                                      "fallback": None}
    assert (log["version"], log["started"], log["failures"]) == ("6.0.0", True, [])
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
