"""twinrail-guard gpu (src/twinrail/guard/gpu.py): each GPU's telemetry for
node_exporter, read from real nvidia-smi answers (tests/fixtures/gpu-telemetry/
and tests/fixtures/gpu/, with their SOURCES.md): datacenter and consumer GPUs
under load, a MIG-enabled H200, DGX Spark's GB10 with no framebuffer figures,
and nvidia-smi's failures."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import FIXTURES

from twinrail.guard import gpu
from twinrail.guard.memory import read_meminfo

TELEMETRY = FIXTURES / "gpu-telemetry"
GB10 = "nvidia_smi_query_gpu_csv_1x_gb10_dgx_spark_drv580.173.02_mem_NA_util_power_temp_header_units.txt"


def read(name: str, meminfo=None) -> list[dict]:
    return gpu.telemetry(gpu.parse_query((TELEMETRY / name).read_text()), meminfo)


# (capture, name, power W, limit W, temperature, utilization, memory used MiB, total MiB, uncorrected ECC)
LOADED = [
    ("nvidia_smi_query_gpu_csv_allfields_1x_h100_80gb_hbm3_load_drv590.48.01.txt", "NVIDIA H100 80GB HBM3",
     631.95, 700.0, 59.0, 1.0, 19818, 81559, 0.0),
    ("nvidia_smi_query_gpu_csv_allfields_1x_h200_mig_enabled_load_drv590.48.01.txt", "NVIDIA H200",
     295.01, 700.0, 36.0, None, 16959, 143771, 0.0),
    ("nvidia_smi_query_gpu_csv_allfields_1x_l40s_load_drv595.80.txt", "NVIDIA L40S",
     110.23, 350.0, 54.0, 0.09, 1235, 46068, 0.0),
    ("nvidia_smi_query_gpu_csv_allfields_1x_rtx4080super_linux_load_drv595.71.05.txt",
     "NVIDIA GeForce RTX 4080 SUPER", 84.24, 320.0, 46.0, 0.07, 1474, 16376, None),
    ("nvidia_smi_query_gpu_csv_allfields_1x_rtx2080super_windows_load_drv591.86.txt",
     "NVIDIA GeForce RTX 2080 SUPER", 97.43, 250.0, 45.0, 0.07, 1296, 8192, None),
]


@pytest.mark.parametrize("name, gpu_name, power, limit, temperature, utilization, used, total, ecc", LOADED)
def test_a_gpu_under_load_reads_its_figures_in_base_units(name, gpu_name, power, limit, temperature,
                                                          utilization, used, total, ecc):
    (got,) = read(name)
    assert (got["gpu"], got["name"]) == ("0", gpu_name)
    assert (got["power_watts"], got["power_limit_watts"], got["temperature_celsius"]) == (power, limit, temperature)
    # MIG: utilization is per instance, the whole GPU's reads [N/A]: no sample, not 0
    assert got["utilization_ratio"] == utilization
    assert (got["memory_used_bytes"], got["memory_total_bytes"]) == (used * 2**20, total * 2**20)
    # consumer GPUs have no ECC: no sample
    assert got["ecc_uncorrected_errors"] == ecc and got["memory_unified"] is False


def test_two_consumer_gpus_each_read_by_the_headers_order_and_units():
    first, second = read("nvidia_smi_query_gpu_csv_2x_gtx1080ti_gtx1060_fan_mem_util_temp_power_clocks_header_units.txt")
    assert (first["gpu"], first["name"], first["power_watts"], first["utilization_ratio"]) == (
        "0", "GeForce GTX 1080 Ti", 106.56, 0.36)
    assert (second["gpu"], second["memory_used_bytes"], second["memory_total_bytes"]) == ("1", 4 * 2**20, 6078 * 2**20)
    assert first["power_limit_watts"] is None  # not asked in that query


GB10_NAMED = "nvidia_smi_query_gpu_csv_na_memory_gb10_dgx_spark_unsloth_pr10703.txt"


def test_a_gb10_reads_the_nodes_memory_as_its_own():
    meminfo = read_meminfo("/proc")
    (got,) = read(GB10_NAMED, meminfo)
    assert got["name"] == "NVIDIA GB10" and got["broken"] == []
    assert got["memory_unified"] and got["memory_total_bytes"] == meminfo["MemTotal"]
    assert got["memory_used_bytes"] == meminfo["MemTotal"] - meminfo["MemAvailable"]
    # without the node's memory, no figure at all (never a zero)
    (bare,) = read(GB10_NAMED)
    assert bare["memory_total_bytes"] is None and bare["memory_used_bytes"] is None and not bare["memory_unified"]
    # rows that do not name the GPU (queries without `name`; twinrail's own asks it): memory unknown, never the
    # node's, the other figures read
    for name in (GB10, "nvidia_smi_query_gpu_csv_1x_gb10_dgx_spark_memory_free_total_used_NA_header.txt"):
        (unnamed,) = read(name, meminfo)
        assert not unnamed["memory_unified"] and unnamed["memory_total_bytes"] is None
    assert read(GB10, meminfo)[0]["power_watts"] == 11.17


def test_the_unified_rule_is_the_gpu_gates():
    from ansible.module_utils.gpu.facts import UNIFIED_MEMORY_PRODUCTS  # pylint: disable=import-outside-toplevel
    assert gpu.UNIFIED_MEMORY_PRODUCTS == UNIFIED_MEMORY_PRODUCTS


def test_a_gpu_that_needs_a_reset_is_broken_not_unsupported(tmp_path):
    """[GPU requires reset] and [Unknown Error] are a GPU in error: its own
    series, nvidia-smi not up; a discrete GPU whose memory is unread gets
    no figure, never the node's memory."""
    meminfo = read_meminfo("/proc")
    (h100,) = read("nvidia_smi_query_gpu_csv_gpu_requires_reset_h100_slurm_gpu_crash_diagnosis_md.txt", meminfo)
    assert h100["broken"] == ["temperature.gpu: [GPU requires reset]", "utilization.gpu: [GPU requires reset]"]
    assert h100["temperature_celsius"] is None and not h100["memory_unified"] and h100["memory_total_bytes"] is None
    (rtx,) = read("nvidia_smi_query_gpu_csv_unknown_error_power_default_limit_drv442.19_rtx2080ti_mindminer_issue627.txt")
    assert rtx["broken"] == ["power.default_limit: [Unknown Error]"] and rtx["power_watts"] == 228.82
    text = gpu.render([h100], 0, None, 1765000000.0)
    assert "twinrail_gpu_smi_up 0\n" in text
    assert ('twinrail_gpu_broken{gpu="0",bus_id="",name="",field="temperature.gpu",said="GPU requires reset"} 1'
            in text)
    promtool = Path(os.environ["PATH"].split(os.pathsep)[0]) / "promtool"
    checked = subprocess.run([str(promtool), "check", "metrics"], input=text, capture_output=True, text=True,
                             check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    healthy = gpu.render(read(LOADED[0][0]), 0, None, 1765000000.0)
    assert "twinrail_gpu_smi_up 1\n" in healthy and "twinrail_gpu_broken{" not in healthy


FAILURES = sorted([*(FIXTURES / "gpu").glob("nvidia_smi_fail_*.txt"), *TELEMETRY.glob("*noheader*.txt"),
                   *(FIXTURES / "gpu").glob("nvidia_smi_query_csv_*noheader*.txt"),
                   *(FIXTURES / "gpu").glob("nvidia_smi_query_csv_na_value_*.txt"),
                   *TELEMETRY.glob("nvidia_smi_table_*.txt"), *TELEMETRY.glob("nvidia_smi_q_*.txt")])


@pytest.mark.parametrize("path", FAILURES, ids=lambda p: p.name)
def test_what_is_not_the_queried_csv_is_refused_quoting_it(path):
    """nvidia-smi's failures, and answers without the header that names the
    columns (the telemetry's own query always asks for one)."""
    with pytest.raises(gpu.QueryError, match=r"^nvidia-smi answered no CSV: \S"):
        gpu.parse_query(path.read_text())


def test_every_capture_is_read_or_refused_by_a_test():
    read_ones = {name for name, *_ in LOADED} | {GB10, GB10_NAMED,
                                                 "nvidia_smi_query_gpu_csv_gpu_requires_reset_h100_slurm_gpu_crash_diagnosis_md.txt",
                                                 "nvidia_smi_query_gpu_csv_unknown_error_power_default_limit_drv442.19_rtx2080ti_mindminer_issue627.txt",
                                                 "nvidia_smi_query_gpu_csv_1x_gb10_dgx_spark_memory_free_total_used_NA_header.txt",
                                                 "nvidia_smi_query_gpu_csv_2x_gtx1080ti_gtx1060_fan_mem_util_temp_power_clocks_header_units.txt"}
    captures = {p.name for p in TELEMETRY.glob("*.txt")}
    assert captures == read_ones | {p.name for p in FAILURES if p.parent == TELEMETRY}


def smi_replaying(tmp_path: Path, capture: Path, code: int = 0) -> str:
    """A stand-in nvidia-smi that prints a real capture and exits with code."""
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ngrep -v '^\\$ ' '{capture}'\nexit {code}\n")
    script.chmod(0o755)
    return str(script)


def test_the_textfile_passes_promtool_and_names_each_gpu(tmp_path):
    gpus, error = gpu.read_gpus(smi_replaying(tmp_path, TELEMETRY / LOADED[0][0]))
    assert error is None
    text = gpu.render(gpus, 2, None, 1765000000.0)
    (tmp_path / "gpu.prom").write_text(text)
    promtool = Path(os.environ["PATH"].split(os.pathsep)[0]) / "promtool"
    checked = subprocess.run([str(promtool), "check", "metrics"], input=text, capture_output=True, text=True,
                             check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    labels = '{gpu="0",bus_id="00000000:00:09.0",name="NVIDIA H100 80GB HBM3"}'
    assert f"twinrail_gpu_power_watts{labels} 631.95\n" in text
    assert f"twinrail_gpu_utilization_ratio{labels} 1.0\n" in text
    assert f"twinrail_gpu_memory_total_bytes{labels} {81559 * 2**20:.1f}\n" in text
    assert "twinrail_gpu_smi_up 1\n" in text and "twinrail_gpu_xid_errors 2\n" in text


def test_a_failed_nvidia_smi_is_a_metric_with_its_words_and_no_stale_figures(tmp_path):
    capture = FIXTURES / "gpu" / "nvidia_smi_fail_couldnt_communicate_with_driver.txt"
    gpus, error = gpu.read_gpus(smi_replaying(tmp_path, capture, 9))
    assert gpus == [] and error.startswith("exit 9: NVIDIA-SMI has failed because it couldn't communicate")
    text = gpu.render(gpus, None, error, 1765000000.0)
    assert "twinrail_gpu_smi_up 0\n" in text and 'twinrail_gpu_smi_error_info{error="exit 9: NVIDIA-SMI' in text
    assert "twinrail_gpu_power_watts{" not in text and "twinrail_gpu_xid_errors" not in text
    # an nvidia-smi that is not there
    gpus, error = gpu.read_gpus(str(tmp_path / "absent"))
    assert gpus == [] and "No such file" in error
