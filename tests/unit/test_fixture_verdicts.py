"""Every capture of a sick GPU, a late death, a degraded load, an OOM kill
or a failing nvidia-smi has its verdict asserted here, read by the parser
twinrail reads it with: the directories are enumerated, so a capture added
without a verdict fails this test, and none of them reads as health."""

from __future__ import annotations

import re

import pytest
from conftest import FIXTURES

from ansible.module_utils.gpu.facts import ParseError, _head_version, _tree, has_table, parse_detail, parse_table
from ansible.module_utils.gpu.health import XID_NVLINK, XID_REFUSED, health_of, node_health, parse_xids, smi_failure, xid_problems, \
    xid_severity
from ansible.module_utils.engines.llamacpp.timings import parse_timings
from ansible.module_utils.engines.llamacpp.tensor_split import parse_buffers
from ansible.module_utils.node.unit_journal import unit_failures

SICK, WARNED, WELL, FAILED, DEGRADED, TIMINGS = "sick", "warned", "well", "failed", "degraded", "timings"
CATALOGUE = "catalogue"  # NVIDIA's Xid catalogue: what the Xid verdicts are read against

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
        # Xid 154 (the driver's recovery action), GSP and micro-controller halts, NVLink's own Xids by the
        # severity their line states, an Xid 45 judged by the Xid it says caused it
        "dmesg_T_xid120_xid154_gpu_reset_required_gpu_node_blog_md.txt": SICK,
        "dmesg_xid79_pid_name_xid154_node_reboot_required_rtx3090_training_notes_md.txt": SICK,
        "journal_xid120_gsp_exception_xid154_gpu_reset_required_drv595.58.03_rtxpro6000_nvidia_forum_364958_crash1.txt":
            SICK,
        "journal_xid62_pmu_halt_xid154_gpu_reset_required_xid45_channel_drv595.58.03_rtxpro6000_nvidia_forum_364958_"
        "crash2.txt": SICK,
        "journalctl_k_xid120_xid154_gpu_reset_required_gpu_node_blog_md.txt": SICK,
        "kernel_xid144_xid149_netir_link_evt_kmsg_gpud_pr1160.txt": SICK,
        "kernel_xid149_netir_xid145_rlw_rxpipe_xid94_kmsg_gpud_pr1174.txt": SICK,
        "kernel_xid45_caused_by_previous_xid149_xid145_drv590.48.01_open_gpu_kernel_modules_issue1150.txt": SICK,
        "kernel_xid51_bad_tsg_xid154_pf_flr_reset_required_compositor_notes_md.txt": SICK,
        "kernel_xid62_then_xid45_channel_hex_drv595_rtx4090d_gpu_lock_notes_md.txt": SICK,
        "kernel_xid79_fallen_off_bus_xid154_os_reboot_gaming_psu_notes_md.txt": SICK,
        "kernel_xid79_xid154_os_reboot_gpu_is_lost_drv610.43.02_open_llama_burnin_notes_md.txt": SICK,
        "xid_catalogue_excerpt_docs_nvidia_com_analyzing_xid_catalog.txt": CATALOGUE,
    },
    # nvidia-smi of drivers that print "KMD Version" (610 on), and of GPUs that are lost
    "gpu-smi": {
        "nvidia_smi_L_error_lowercase_gpu_unknown_error_0000_08_00_0_gpustat_issue125.txt": FAILED,
        "nvidia_smi_a_i0_error_unknown_error_0000_09_00_0_nvidia_docker_issue1553.txt": FAILED,
        "nvidia_smi_error_fragment_gpu1_gpu_is_lost_windows_egpu_rtx5070ti_runbook_md.txt": FAILED,
        "nvidia_smi_error_gpu_is_lost_wrapped_windows_drv369.30_geforce840m_darknet_issue86.txt": FAILED,
        "nvidia_smi_error_unable_to_detect_device_handle_windows_vm_a10_easy_gpu_pv_issue276.txt": FAILED,
        "nvidia_smi_error_unknown_error_short_domain_000_BA_80_0_dcgm_exporter_issue604.txt": FAILED,
        "nvidia_smi_header_fragment_wsl_nvidia_smi_615.78.02_kmd_617.14_cuda_umd_13.4_factcheck_md.txt": WELL,
        "nvidia_smi_lost_gpu1_unable_to_determine_handle_0000_34_00_0_kmd_drv610.57.04_rtxpro6000_dfch_session.txt":
            FAILED,
        "nvidia_smi_q_excerpt_deprecated_driver_cuda_version_annotation_drv616.92_windows_env_audit_md.txt": WELL,
        "nvidia_smi_q_interleaved_lost_gpu1_0000_04_00_0_rtx3060_clinfo_report_md.txt": FAILED,
        "nvidia_smi_table_kmd_version_cuda_umd_drv610.43.02_b200_sglang_issue27487.txt": WELL,
        "nvidia_smi_table_kmd_version_cuda_umd_drv610.43.02_rtx3090x2_report_md.txt": WELL,
        "nvidia_smi_table_kmd_version_cuda_umd_drv610.43.02_rtx5070_laptop_mistralrs_pr2287.txt": WELL,
        "nvidia_smi_table_kmd_version_cuda_umd_drv610.43.03_rtx3080_laptop_finpilot_issue160.txt": WELL,
        "nvidia_smi_table_kmd_version_cuda_umd_drv610.57.04_b300x7_xe9780_readme.txt": WELL,
        "nvidia_smi_table_kmd_version_cuda_umd_drv615.71.09_l4_vm_passthrough_guide_md.txt": WELL,
        "nvidia_smi_table_kmd_version_wddm_driver_model_drv617.14_rtx3050_laptop_windows_report_md.txt": WELL,
        "nvidia_smi_table_kmd_version_wddm_drv616.92_rtx5070ti_laptop_windows_cg_process_env_audit_md.txt": WELL,
        "nvidia_smi_table_wsl_nvidia_smi_615.71.08_kmd_616.92_cuda_umd_13.4_rtx5070ti_laptop_env_audit_md.txt": WELL,
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
        # ROCm's HSA runtime, Vulkan's lost device, aborts as a shell, Go or systemd print them
        "llama.cpp-gfx906_b7973_rocm6.4.3_hsa_aperture_violation_issue17.txt": FAILED,
        "whisper.cpp_rocm7_strixhalo_hsa_aperture_violation_issue3576.txt": FAILED,
        "llama-server_b7083_vulkan_intel_xe_devicelost_terminate_issue17334.txt": FAILED,
        "llama-completion_vulkan_devicelost_gdb_tail_issue27849.txt": FAILED,
        "ollama_rocm_invalid_device_function_memory_in_use_sigabrt_issue11380.txt": FAILED,
        "llama.cpp_rocm_sdk_builder_gfx906_warmup_cannot_find_symbol_aborted_issue180.txt": FAILED,
        "llama-server_snap_gemma4_llamacpp-rocm_gfx1103_signal_aborted_inference-snaps_issue337.txt": FAILED,
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
    if directory == "gpu-smi":
        _smi_verdict(name, text, want)
    elif want == CATALOGUE:
        _catalogue(text)
    elif directory == "gpu-health" and want != FAILED:
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


_BUS = re.compile(r"(?:GPU\s*|gpu\s*)(?:\d+:\s*)?(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)")
_SMI_VERSIONS = re.compile(r"(?:Driver|KMD) Version\s*:\s*(?P<driver>[0-9.]+)")


def _smi_verdict(name: str, text: str, want: str) -> None:
    """A table of a newer driver reads with its versions and every GPU; a
    lost GPU is named by its bus id, whether nvidia-smi printed a table
    around it or only its failure."""
    named = [m.group("bus") for m in _BUS.finditer(text) if "device handle" in text[max(0, m.start() - 40):m.end()]]
    if want == FAILED:
        assert named, name
        if has_table(text):
            table = parse_table(text)
            assert any(named[0] in p for p in table["problems"]), table["problems"]
        else:
            said = smi_failure(6, text, True)
            assert f"the GPU at {named[0]}" in said and "device handle" in said, said
        return
    driver = _SMI_VERSIONS.search(text).group("driver")
    if "NVIDIA-SMI" in text:  # a table, or its header quoted alone
        table = parse_table(text)
        assert table["driver_version"] == driver and table["cuda_version"].startswith("13.")
        rows = re.findall(r"^\|\s+\d+\s+\S.*\|\s+[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:", text, re.MULTILINE)
        if rows:
            assert len(table["gpus"]) == len(rows) and table["problems"] == [], table["problems"]
    else:  # nvidia-smi -q's head, its old keys marked deprecated
        head = _tree(text.splitlines())
        assert _head_version(head, "KMD Version", "Driver Version") == driver
        assert _head_version(head, "CUDA UMD Version", "CUDA Version") == "13.4"


def _catalogue(text: str) -> None:
    """Every NVLink Xid of NVIDIA's catalogue (144-150) is one twinrail
    reads by its line's severity, and the driver's recovery action (154)
    is refused."""
    numbers = {int(n) for n in re.findall(r"^(\d{2,3}) \|$", text, re.MULTILINE)}
    nvlink = {n for n in numbers if 144 <= n <= 150}
    assert nvlink == set(XID_NVLINK) and 154 in numbers and 154 in XID_REFUSED


def test_a_chain_names_its_cause_and_a_nonfatal_nvlink_error_is_a_warning():
    xids = parse_xids((FIXTURES / "gpu-health" / "kernel_xid149_netir_xid145_rlw_rxpipe_xid94_kmsg_gpud_pr1174.txt")
                      .read_text())
    verdicts = {x["xid"]: xid_severity(x, xids)[0] for x in xids}
    assert verdicts == {149: "refused", 145: "warned", 94: "warned"}
    chain = parse_xids((FIXTURES / "gpu-health" / "kernel_xid45_caused_by_previous_xid149_xid145_drv590.48.01_open_gpu"
                        "_kernel_modules_issue1150.txt").read_text())
    refused, warned = xid_problems("n", chain, {})
    assert warned == [] and len(refused) == 4  # four GPUs, each Xid 45 refused by its NVLink cause
    assert all("caused by Xid 14" in r and "NVLink" in r for r in refused)


@pytest.mark.parametrize("name", SMI_FAILURES)
def test_nvidia_smis_failures_never_read_as_a_table(name):
    text = (FIXTURES / "gpu" / name).read_text()
    with pytest.raises(ParseError):
        parse_table(text)
    with pytest.raises(ParseError):
        parse_detail(text)
    assert smi_failure(1, text, True).startswith("nvidia-smi exited 1: ")
