"""Every capture of a sick GPU, a late death, a degraded load, an OOM kill
or a failing nvidia-smi has its verdict asserted here, read by the parser
twinrail reads it with: the directories are enumerated, so a capture added
without a verdict fails this test, and none of them reads as health."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from gpu_facts import ParseError, _tree, parse_detail, parse_table
from gpu_health import health_of, node_health, parse_xids, smi_failure, xid_problems
from llama_timings import parse_timings
from tensor_split import parse_buffers
from unit_journal import unit_failures

SICK, WARNED, WELL, FAILED, DEGRADED, TIMINGS = "sick", "warned", "well", "failed", "degraded", "timings"

VERDICTS = {
    "gpu-health": {
        "dmesg_ctime_xid119_gsp_timeout_gpud.txt": SICK,
        "dmesg_decode_iso_xid13_43_gpud.txt": WARNED,
        "dmesg_iso_xid48_63_94_dbe_row_remap_gpud.txt": SICK,
        "dmesg_oom_killed_process_global_oom_session_scope_shinode.txt": FAILED,
        "dmesg_xid63_row_remapper_a100_ml_engineering.txt": WARNED,
        "dmesg_xid79_fallen_off_bus_with_sxid20034_nvswitch_gpud.txt": SICK,
        "nvidia_smi_q_a100_10_1c_remapped_rows_pending_elided_ml_engineering.txt": SICK,
        "nvidia_smi_q_a100x4_gpu1_9e_remapped_rows_pending_thamada_gls.txt": SICK,
        "nvidia_smi_q_a10_remapped_rows_uncorrectable4_pending_gpud.txt": SICK,
        "nvidia_smi_q_ecc_errors_sram_uncorrectable_vol1_agg5_ml_engineering.txt": SICK,
        "nvidia_smi_q_gh200_dram_uncorrectable_aggregate1_thamada_gls.txt": WARNED,
        "nvidia_smi_q_h100_healthy_gpu0_19_00_gpud.txt": WELL,
        "nvidia_smi_q_rtx4090_ecc_disabled_na_gpud.txt": WELL,
        "nvidia_smi_q_v100x8_legacy_format_sbe_retired_thamada_gls.txt": WARNED,
        "syslog_xid79_fallen_off_bus_k80_two_gpus_pubsum.txt": SICK,
        "systemctl_status_journal_unit_oom_kill_systemd_run_neevink.txt": FAILED,
        "var_log_messages_memcg_oom_docker_scope_unit_oom_sparrc.txt": FAILED,
    },
    "llama-load": {
        "ik-llama-server_cuda_illegal_memory_access_after_serving_2xT4_ik398.txt": FAILED,
        "ik-llama-server_cuda_no_kernel_image_after_load_rtx5090_sm120_ik514.txt": FAILED,
        "ik-llama-server_cuda_oom_alloc_after_serving_2x4090_ik437.txt": FAILED,
        "ik-llama-server_ggml_assert_rope_after_load_2x5090_ik530.txt": FAILED,
        "ik-llama-server_print_timings_info_1token_cached_huge_tps_crlf_ik612.txt": TIMINGS,
        "koboldcpp-llama_context_degraded_gallocr_fail_before_retry_2gpu_pr16748_PARTIAL.txt": FAILED,
        "llama-server_degraded_pipeline_retry_then_serving_3gpu_pr26297.txt": DEGRADED,
        "llama-server_old_llm_load_tensors_buffer_lines_2gpu_pipeline_pr6122_PARTIAL.txt": WELL,
        "llama-server_print_timings_info_text_issue9013_2024-08.txt": TIMINGS,
        "llama-server_print_timings_json_log_issue7637.txt": TIMINGS,
        "llama-server_slot_print_timing_multiline_forced_reprocess_pr19408.txt": TIMINGS,
        "llama-server_slot_print_timing_multiline_issue9013_2025-05.txt": TIMINGS,
        "llama-server_slot_print_timing_multiline_pid_prefix_pr23269.txt": TIMINGS,
        "llama-server_slot_print_timing_perline_timestamps_graphs_reused_pi-llama-pr19.txt": TIMINGS,
        "ollama-llama-runner_cuda_illegal_memory_access_after_load_issue-ollama10265.txt": FAILED,
    },
}
# nvidia-smi's own failures (tests/fixtures/gpu/nvidia_smi_fail_*)
SMI_FAILURES = sorted(p.name for p in (FIXTURES / "gpu").glob("nvidia_smi_fail_*"))


def test_every_capture_has_a_verdict():
    for directory, verdicts in VERDICTS.items():
        found = {p.name for p in (FIXTURES / directory).iterdir() if p.name != "SOURCES.md"}
        assert found == set(verdicts), f"{directory}: captures without a verdict {sorted(found - set(verdicts))}, " \
                                       f"verdicts without a capture {sorted(set(verdicts) - found)}"
        listed = (FIXTURES / directory / "SOURCES.md").read_text()
        assert [n for n in found if n not in listed] == [], f"{directory}: captures SOURCES.md does not name"


def _gpu_verdict(text: str) -> str:
    if "NVRM: Xid" in text:
        refused, warned = xid_problems("n", parse_xids(text), {})
    else:
        try:
            facts = {"detail": parse_detail(text)}
        except ParseError:  # a section alone, without its GPU header
            facts = {"detail": {"gpus": [{"index": 0, "name": "?", "bus_id": "00000000:00:00.0",
                                          "health": health_of(_tree(text.splitlines()))}]}}
        refused, warned = node_health("n", facts)
    return SICK if refused else WARNED if warned else WELL


@pytest.mark.parametrize("directory, name", [(d, n) for d, v in VERDICTS.items() for n in v])
def test_each_capture_reads_as_its_verdict(directory, name):
    text = (FIXTURES / directory / name).read_text()
    want = VERDICTS[directory][name]
    if directory == "gpu-health" and want != FAILED:
        assert _gpu_verdict(text) == want
    elif directory == "gpu-health":
        assert unit_failures(text), name
    elif want == TIMINGS:
        assert parse_timings(text) and not parse_buffers(text)["fatal"]
    else:
        log = parse_buffers(text)
        got = FAILED if log["fatal"] or log["error"] else DEGRADED if log["degraded"] else WELL
        assert got == want
        if want == WELL:
            assert log["buffers"]  # health is read from what was placed, never from nothing


@pytest.mark.parametrize("name", SMI_FAILURES)
def test_nvidia_smis_failures_never_read_as_a_table(name):
    text = (FIXTURES / "gpu" / name).read_text()
    with pytest.raises(ParseError):
        parse_table(text)
    with pytest.raises(ParseError):
        parse_detail(text)
    assert smi_failure(1, text, True).startswith("nvidia-smi exited 1: ")
