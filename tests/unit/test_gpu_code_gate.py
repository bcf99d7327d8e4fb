"""Preflight's judgement of each node's GPUs against the device code of the
vLLM engine's CUDA lock: the compute capability gpu_facts reads
(nvidia-smi --query-gpu=index,compute_cap; real captures in
tests/fixtures/gpu-telemetry/: full-field queries and a two-GPU query)
against the code make vllm-gpu-check listed beside the lock
(roles/runtime_build/files/vllm/<lock>.code.json)."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
from conftest import FIXTURES, REPO, module_process

from ansible.module_utils.gpu.facts import ParseError, compute_caps, parse_query
from ansible.module_utils.inventory.hardware_profile import host_facts

TELEMETRY = FIXTURES / "gpu-telemetry"
CAPS = FIXTURES / "gpu-caps"
LOCKS = REPO / "roles" / "runtime_build" / "files" / "vllm"
_spec = importlib.util.spec_from_file_location("profile_gate_module", REPO / "library" / "profile_gate.py")
profile_gate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(profile_gate)

H100 = "nvidia_smi_query_gpu_csv_allfields_1x_h100_80gb_hbm3_load_drv590.48.01.txt"
L40S = "nvidia_smi_query_gpu_csv_allfields_1x_l40s_load_drv595.80.txt"
RTX2080S = "nvidia_smi_query_gpu_csv_allfields_1x_rtx2080super_windows_load_drv591.86.txt"
VOLTA_ADA = CAPS / "nvidia_smi_query_gpu_csv_compute_cap_titan_v_rtx5880_ada_drv570.86.15_triton_pr8070.txt"
NO_FIELD = CAPS / "nvidia_smi_query_gpu_compute_cap_not_a_valid_field_inside_snap_inference_snaps_issue128.txt"
EXPECT = {"architecture": "x86_64", "gpu": True, "rdma": False}


def gpu_facts(capture: str) -> dict:
    """gpu_facts' answer for the GPUs of a capture: each GPU's index and
    name with the compute capability read by index, as the module joins its
    table and its compute_cap query."""
    text = (TELEMETRY / capture).read_text()
    caps = compute_caps(text)
    return {"gpus": [{"index": row["index"], "name": row["name"], "compute_cap": caps[row["index"]]}
                     for row in parse_query(text)]}


def gate(tmp_path, gpus: dict, lock: str = "cuda-x86_64") -> dict:
    hardware = {"rdma_devices": [], "connectx_functions": [], "python": "3.11.2", "glibc": "2.36"}
    params = {"profile": "gpu-server", "expect": EXPECT, "architecture": {h: "x86_64" for h in gpus},
              "hardware": {h: hardware for h in gpus}, "gpu": gpus, "cuda": False, "rdma": False,
              "vllm_lock": str(LOCKS / f"{lock}.lock")}
    return profile_gate.judge(params, lambda _: None)


def test_the_captures_read_as_each_gpus_compute_capability():
    assert [compute_caps((TELEMETRY / c).read_text()) for c in (H100, L40S, RTX2080S, VOLTA_ADA)] == [
        {0: "90"}, {0: "89"}, {0: "75"}, {0: "70", 1: "89"}]


def test_a_query_without_the_field_or_nvidia_smis_failure_is_not_read_as_capabilities():
    # a driver (here the one inside a snap) that does not know the field
    with pytest.raises(ParseError, match='no index and compute_cap columns: .*Field "compute_cap" is not a valid'):
        compute_caps((TELEMETRY / NO_FIELD).read_text())
    # a GB10's query of memory and use
    with pytest.raises(ParseError, match="no index and compute_cap columns"):
        compute_caps((TELEMETRY / "nvidia_smi_query_gpu_csv_1x_gb10_dgx_spark_drv580.173.02_mem_NA_util_power_temp"
                      "_header_units.txt").read_text())


def test_hopper_ada_and_turing_nodes_pass_the_x86_cuda_lock(tmp_path):
    # vLLM 0.33's x86-64 kernels and torch's CUDA library hold sm_75 cubins
    result = gate(tmp_path, {"h100": gpu_facts(H100), "l40s": gpu_facts(L40S), "turing": gpu_facts(RTX2080S)})
    assert not result.get("failed"), result


def test_a_volta_gpu_is_refused_naming_node_gpu_and_the_code_the_lock_holds(tmp_path):
    result = gate(tmp_path, {"h100": gpu_facts(H100), "ws": gpu_facts(VOLTA_ADA)})
    assert result["failed"]
    failures = result["failures"]
    # the node's Ada GPU runs the lock; its TITAN V runs none of the three libraries
    assert len(failures) == 3 and all(
        f.startswith("ws: GPU 0 (NVIDIA TITAN V), compute capability 7.0: sm_70: ") for f in failures), failures
    # each library named with the code make vllm-gpu-check listed in it
    listed = json.loads((LOCKS / "cuda-x86_64.code.json").read_text())["code"]
    assert [f.split(": ")[3].split(";")[0] for f in failures] == [
        f"{lib} has no code that runs on it (it has {', '.join(listed[lib])})" for lib in sorted(listed)]
    assert "the vLLM lock cuda-x86_64.lock cannot serve on it" in failures[0]
    assert result["msg"].endswith("Nothing was changed")


def test_the_aarch64_lock_holds_no_turing_code(tmp_path):
    """The same Turing card refused by the aarch64 lock, whose kernels start
    at sm_80 (an aarch64 host with a PCIe GPU judged by the same rule)."""
    hardware = {"rdma_devices": [], "connectx_functions": [], "python": "3.12.3", "glibc": "2.39"}
    params = {"profile": "dgx-spark", "expect": {"architecture": "aarch64", "gpu": True, "rdma": False},
              "architecture": {"n1": "aarch64"}, "hardware": {"n1": hardware}, "gpu": {"n1": gpu_facts(RTX2080S)},
              "cuda": False, "rdma": False, "vllm_lock": str(LOCKS / "cuda-aarch64.lock")}
    result = profile_gate.judge(params, lambda _: None)
    assert result["failed"] and len(result["failures"]) == 3, result
    assert all("compute capability 7.5: sm_75: " in f for f in result["failures"])


def test_a_gpu_whose_capability_nvidia_smi_did_not_say_is_not_passed_unjudged(tmp_path):
    facts = gpu_facts(H100)
    facts["gpus"][0]["compute_cap"] = None
    result = gate(tmp_path, {"old-driver": facts})
    assert result["failures"] == [
        "old-driver: GPU 0 (NVIDIA H100 80GB HBM3): nvidia-smi did not say its compute capability "
        "(--query-gpu=compute_cap, drivers from 510 on), so whether the vLLM lock cuda-x86_64.lock's CUDA code runs "
        "on it cannot be judged"]


@pytest.mark.parametrize("name", sorted(p.stem for p in LOCKS.glob("cuda-*.lock")))
def test_a_cuda_lock_without_its_code_list_or_with_another_locks_is_refused(tmp_path, name):
    lock = tmp_path / f"{name}.lock"
    shutil.copy(LOCKS / f"{name}.lock", lock)
    hosts = {"n1": gpu_facts(H100)}
    hardware = {"rdma_devices": [], "connectx_functions": []}
    params = {"profile": "gpu-server", "expect": EXPECT, "architecture": {"n1": "x86_64"}, "hardware": {"n1": hardware},
              "gpu": hosts, "cuda": False, "rdma": False, "vllm_lock": str(lock)}
    result = profile_gate.judge(params, lambda _: None)
    assert result["failed"] and f"{name}.lock is a CUDA lock without the list of its device code ({name}.code.json): " \
        "run make vllm-gpu-check --lock and commit it" in result["msg"], result
    listed = json.loads((LOCKS / f"{name}.code.json").read_text())
    (tmp_path / f"{name}.code.json").write_text(json.dumps(listed))
    assert "without the list" not in profile_gate.judge(params, lambda _: None).get("msg", "")
    lock.write_text(lock.read_text() + "# a pin changed since the list\n")
    result = profile_gate.judge(params, lambda _: None)
    assert result["failed"] and f"{name}.code.json lists the code of another {name}.lock" in result["msg"], result


def test_host_facts_keep_each_gpus_capability_for_the_gate():
    hosts = host_facts({"n1": "x86_64"}, {"n1": None}, {"n1": gpu_facts(L40S)})
    assert hosts["n1"]["gpus"] == 1
    assert hosts["n1"]["gpu_list"] == [{"index": 0, "name": "NVIDIA L40S", "compute_cap": "89"}]


def run_gpu_facts(tmp_path, query: str) -> dict:
    """library/gpu_facts.py run as Ansible runs it, with an nvidia-smi that
    prints real captures: the table and -q of an 8x H100 node, and `query`
    for --query-gpu (exit 2 where it is nvidia-smi's refusal)."""
    gpu = FIXTURES / "gpu"
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$1\" in\n"
                   f"  --query-gpu=*) cat '{TELEMETRY / query}'; grep -q Field '{TELEMETRY / query}' && exit 2;;\n"
                   f"  -q) cat '{gpu / 'nvidia_smi_q_8x_h100_sxm_565.txt'}';;\n"
                   f"  *) cat '{gpu / 'nvidia_smi_8x_h100_sxm_565_new_layout.txt'}';;\nesac\nexit 0\n")
    smi.chmod(0o755)
    return module_process(REPO / "library" / "gpu_facts.py", {"nvidia_smi": str(smi)}, tmp_path)


def test_the_module_joins_its_table_and_the_query_by_index(tmp_path):
    got = run_gpu_facts(tmp_path, H100)
    assert not got.get("failed"), got
    # the query's one GPU (index 0) is joined to the table's GPU 0; the rest did not say
    assert [g["compute_cap"] for g in got["gpu"]["gpus"]] == ["90"] + [None] * 7
    got = run_gpu_facts(tmp_path, NO_FIELD)
    assert not got.get("failed") and [g["compute_cap"] for g in got["gpu"]["gpus"]] == [None] * 8, got
