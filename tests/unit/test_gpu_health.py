"""A sick GPU read as what it is: nvidia-smi -q's ECC, retired pages and
remapped rows, the kernel's Xid lines, and nvidia-smi's failures in words
that send the operator to the right place; on real captures
(tests/fixtures/gpu-health/SOURCES.md, tests/fixtures/gpu/SOURCES.md)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

import gpu_gate
from ansible.module_utils.gpu.facts import _tree, parse_detail, parse_table
from ansible.module_utils.gpu.health import health_of, node_health, parse_xids, smi_failure, xid_problems

HEALTH = FIXTURES / "gpu-health"
GPU = FIXTURES / "gpu"


def read(name: str) -> str:
    return ((HEALTH if (HEALTH / name).exists() else GPU) / name).read_text()


def q(name: str) -> dict:
    return {"detail": parse_detail(read(name))}


@pytest.mark.parametrize("name, refused", [
    ("nvidia_smi_q_a10_remapped_rows_uncorrectable4_pending_gpud.txt",
     ["spark-a: GPU 0 (NVIDIA A10, 00000000:07:00.0): a row remap is pending (Remapped Rows / Pending: Yes, "
      "4 row(s) for uncorrectable errors): reset the GPU or reboot to apply it"]),
    ("nvidia_smi_q_a100x4_gpu1_9e_remapped_rows_pending_thamada_gls.txt",
     ["spark-a: GPU 1 (NVIDIA A100-SXM4-80GB, 00000000:9E:00.0): a row remap is pending (Remapped Rows / Pending: "
      "Yes, 0 row(s) for uncorrectable errors): reset the GPU or reboot to apply it"]),
    # the author's own "[...]" elisions in it: the health is still read
    ("nvidia_smi_q_a100_10_1c_remapped_rows_pending_elided_ml_engineering.txt",
     ["spark-a: GPU 0 (NVIDIA A100-SXM4-80GB, 00000000:10:1C.0): a row remap is pending (Remapped Rows / Pending: "
      "Yes, 0 row(s) for uncorrectable errors): reset the GPU or reboot to apply it"]),
])
def test_a_pending_row_remap_refuses_that_gpu_by_index_and_bus_id(name, refused):
    assert node_health("spark-a", q(name))[0] == refused


def test_a_healthy_gpu_and_a_gpu_without_ecc_are_not_sick():
    for name in ("nvidia_smi_q_h100_healthy_gpu0_19_00_gpud.txt", "nvidia_smi_q_rtx4090_ecc_disabled_na_gpud.txt",
                 "nvidia_smi_q_8x_h100_sxm_565.txt", "nvidia_smi_q_2x_rtx4060ti_550_link_x4_of_x8.txt"):
        assert node_health("n", q(name)) == ([], []), name
    rtx = parse_detail(read("nvidia_smi_q_rtx4090_ecc_disabled_na_gpud.txt"))["gpus"][0]["health"]
    assert (rtx["ecc_mode"], rtx["volatile_uncorrectable"], rtx["remap_pending"]) == ("Disabled", None, False)
    # the other three A100s of the four: counters read, none sick
    a100 = parse_detail(read("nvidia_smi_q_a100x4_gpu1_9e_remapped_rows_pending_thamada_gls.txt"))["gpus"]
    assert [g["health"]["remap_pending"] for g in a100] == [False, True, False, False]
    assert a100[1]["health"]["volatile_uncorrectable"] == 0


def test_a_past_error_and_retired_pages_are_warnings_not_refusals():
    refused, warned = node_health("n", q("nvidia_smi_q_gh200_dram_uncorrectable_aggregate1_thamada_gls.txt"))
    assert refused == []
    assert warned == ["n: GPU 0 (NVIDIA GH200 480GB, 00000000:DD:00.0): 1 uncorrectable ECC error(s) in its lifetime "
                      "(ECC Errors / Aggregate), none since the driver loaded"]
    # the older layout (Single Bit / Double Bit ... Total): one V100 of eight retired a page for single-bit errors
    v100 = parse_detail(read("nvidia_smi_q_v100x8_legacy_format_sbe_retired_thamada_gls.txt"))
    assert [g["health"]["volatile_uncorrectable"] for g in v100["gpus"]] == [0] * 8
    refused, warned = node_health("n", {"detail": v100})
    assert refused == [] and len(warned) == 1
    assert warned[0].startswith("n: GPU 4 (Tesla V100-SXM2-16GB, 00000000:00:08.0): 1 memory page(s) retired "
                                "(Retired Pages: single-bit 1, double-bit 0)")


def test_uncorrectable_errors_since_the_driver_loaded_refuse_the_gpu():
    """An ECC Errors section alone (no GPU header in the source): the
    volatile SRAM uncorrectable error is a refusal, the lifetime count is said."""
    health = health_of(_tree(read("nvidia_smi_q_ecc_errors_sram_uncorrectable_vol1_agg5_ml_engineering.txt")
                             .splitlines()))
    assert (health["volatile_uncorrectable"], health["aggregate_uncorrectable"]) == (1, 5)
    gpu = {"index": 3, "name": "NVIDIA A100-SXM4-80GB", "bus_id": "00000000:10:1C.0", "health": health}
    refused, _ = node_health("n", {"detail": {"gpus": [gpu]}})
    assert refused == ["n: GPU 3 (NVIDIA A100-SXM4-80GB, 00000000:10:1C.0): 1 uncorrectable ECC error(s) since the "
                       "driver loaded (ECC Errors / Volatile): its memory returned bad data; reset the GPU or reboot, "
                       "and replace it if they come back"]


@pytest.mark.parametrize("name, xids", [
    ("dmesg_iso_xid48_63_94_dbe_row_remap_gpud.txt", {("0000:19:00.0", 48): 1, ("0000:19:00.0", 63): 1,
                                                      ("0000:19:00.0", 94): 9}),
    ("dmesg_ctime_xid119_gsp_timeout_gpud.txt", {("0000:9b:00.0", 119): 5}),
    ("dmesg_decode_iso_xid13_43_gpud.txt", {("0000:38:00.0", 13): 15, ("0000:38:00.0", 43): 1}),
    ("dmesg_xid79_fallen_off_bus_with_sxid20034_nvswitch_gpud.txt", {("0000:91:00.0", 79): 1}),
    ("syslog_xid79_fallen_off_bus_k80_two_gpus_pubsum.txt", {("0000:05:00.0", 79): 1, ("0000:06:00.0", 79): 1}),
    ("dmesg_xid63_row_remapper_a100_ml_engineering.txt", {("0000:10:1c.0", 63): 1}),
])
def test_xid_lines_are_read_in_every_kernel_log_format(name, xids):
    found = {}
    for xid in parse_xids(read(name)):
        found[(xid["bus"], xid["xid"])] = found.get((xid["bus"], xid["xid"]), 0) + 1
    assert found == xids


def test_an_xid_that_needs_a_reset_refuses_the_gpu_an_applications_is_a_warning():
    xids = parse_xids(read("dmesg_iso_xid48_63_94_dbe_row_remap_gpud.txt"))
    refused, warned = xid_problems("n", xids, {"0000:19:00.0": "n: GPU 0 (NVIDIA H100 80GB HBM3, 00000000:19:00.0)"})
    assert len(refused) == 1 and refused[0].startswith(
        "n: GPU 0 (NVIDIA H100 80GB HBM3, 00000000:19:00.0): Xid 48 in the kernel log since boot (1x, newest: "
        "NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error")
    assert refused[0].endswith(": double-bit ECC error; the GPU needs a reset or a reboot (and a replacement if it "
                               "comes back)")
    assert [w.split(": Xid ")[1][:2] for w in warned] == ["63", "94"]
    refused, warned = xid_problems("n", parse_xids(read("dmesg_decode_iso_xid13_43_gpud.txt")), {})
    assert refused == [] and len(warned) == 2
    # a GPU that fell off the bus is no longer listed: named by its bus id
    refused, _ = xid_problems("n", parse_xids(read("syslog_xid79_fallen_off_bus_k80_two_gpus_pubsum.txt")), {})
    assert [r.split(": Xid")[0] for r in refused] == ["n: the GPU at 0000:05:00.0 (nvidia-smi does not list it)",
                                                      "n: the GPU at 0000:06:00.0 (nvidia-smi does not list it)"]


def test_the_gate_refuses_a_sick_gpu_where_the_build_uses_it_and_warns_where_not():
    """-q of an H100 at 19:00.0 that reads healthy, with a kernel log that
    had an Xid 48 on that bus (two real captures joined on the bus id)."""
    facts = parse_table(read("nvidia_smi_8x_h100_sxm_565_new_layout.txt"))
    facts["detail"] = parse_detail(read("nvidia_smi_q_h100_healthy_gpu0_19_00_gpud.txt"))
    facts["detail"]["problems"] = []  # the capture keeps the first of its 8 GPUs' blocks
    facts["xids"] = parse_xids(read("dmesg_iso_xid48_63_94_dbe_row_remap_gpud.txt"))
    warnings = []
    verdict = gpu_gate.judge({"facts": {"gpu-a": facts}, "cuda_required": True, "expected": {}}, warnings.append)
    assert verdict["failed"]
    assert verdict["failures"][0].startswith("gpu-a: GPU 0 (NVIDIA H100 80GB HBM3, 00000000:19:00.0): Xid 48 in the "
                                             "kernel log since boot")
    assert verdict["msg"].endswith("; nothing was changed")
    assert len(warnings) == 2  # Xid 63 and 94: said, not refused
    warnings.clear()
    verdict = gpu_gate.judge({"facts": {"gpu-a": facts}, "cuda_required": False, "expected": {}}, warnings.append)
    assert verdict == {"changed": False, "failures": []}
    assert warnings[0].startswith("preflight: gpu-a: GPU 0 (NVIDIA H100 80GB HBM3, 00000000:19:00.0): Xid 48")


@pytest.mark.parametrize("name, loaded, words", [
    ("nvidia_smi_fail_device_handle_unknown_error.txt", True,
     "the driver answered but the GPU at 0000:0B:00.0 (Unknown Error) did not: it has fallen off the bus or hung; "
     "reseat it, reset it"),
    ("nvidia_smi_fail_device_handle_unknown_error_nospace_busid.txt", True,
     "the GPU at 0000:07:00.0 (Unknown Error) did not"),
    ("nvidia_smi_fail_device_handle_gpu_is_lost.txt", True,
     "the GPU at 0000:02:00.0 (GPU is lost. Reboot the system to recover this GPU) did not"),
    ("nvidia_smi_fail_no_devices_were_found.txt", True, "the nvidia kernel module is loaded but drives no GPU"),
    ("nvidia_smi_fail_no_devices_were_found.txt", False, "the nvidia kernel module is not loaded"),
    ("nvidia_smi_fail_nvml_driver_library_version_mismatch.txt", True, "a driver upgraded without a reboot"),
    ("nvidia_smi_fail_couldnt_communicate_with_driver.txt", False, "(is the driver loaded?)"),
])
def test_nvidia_smis_failure_sends_the_operator_to_the_right_place(name, loaded, words):
    said = smi_failure(9, read(name), loaded)
    assert said.startswith("nvidia-smi exited 9: ") and words in said
    if "device_handle" in name or "no_devices" in name and loaded:
        assert "is the driver loaded" not in said
