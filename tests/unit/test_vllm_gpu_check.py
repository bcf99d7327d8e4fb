"""The last green make vllm-gpu-check of each CUDA lock, committed
(tests/vllm-gpu-check/<lock>.json): it must be of the lock as it is, and
every CUDA profile that installs the lock must have each of its GPUs run
vLLM's and torch's code as the record lists it. A lock or a profile's GPUs
changed without a new check fails here, naming the command."""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import REPO

from ansible.module_utils.engines.vllm.env import lock_pins
from ansible.module_utils.gpu import cuda_code
from ansible.module_utils.inventory import profiles

LOCKS = REPO / "roles" / "runtime_build" / "files" / "vllm"
RECORDS = REPO / "tests" / "vllm-gpu-check"
CUDA_LOCKS = sorted(p.stem for p in LOCKS.glob("cuda-*.lock"))
MUST = ("vllm/_C_stable_libtorch.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so", "torch/lib/libtorch_cuda.so")


def record(name: str) -> dict:
    path = RECORDS / f"{name}.json"
    assert path.is_file(), f"no record of {name}: run make vllm-gpu-check"
    return json.loads(path.read_text())


def codes_of(names: list[str]) -> list[dict]:
    return cuda_code.from_names(names)  # sm_XY[a|f] and compute_XY, as the record writes them


@pytest.mark.parametrize("name", CUDA_LOCKS)
def test_the_record_is_of_the_lock_as_it_is(name):
    text = (LOCKS / f"{name}.lock").read_text()
    seen = record(name)
    assert seen["lock_sha256"] == hashlib.sha256(text.encode()).hexdigest(), (
        f"{name}.lock changed since its last make vllm-gpu-check: run it again and commit "
        f"tests/vllm-gpu-check/{name}.json")
    assert seen["wheels"] == len(lock_pins(text))


@pytest.mark.parametrize("name", CUDA_LOCKS)
def test_the_code_list_preflight_reads_is_the_records(name):
    """roles/runtime_build/files/vllm/<lock>.code.json, what preflight judges
    each node's GPUs against, is what the check found in this lock."""
    path = LOCKS / f"{name}.code.json"
    assert path.is_file(), f"no {path.name}: run make vllm-gpu-check --lock {name}"
    listed, seen = json.loads(path.read_text()), record(name)
    assert listed["lock_sha256"] == seen["lock_sha256"], f"{path.name} is of another {name}.lock: run make vllm-gpu-check"
    assert listed["code"] == {m: seen["code"][m] for m in MUST}


@pytest.mark.parametrize("name", CUDA_LOCKS)
def test_every_gpu_of_each_profile_on_the_lock_runs_vllm_and_torch(name):
    seen = record(name)
    mine = [p for p in profiles.names() if profiles.setting(p, "runtime_build_vllm_lock_name") == name]
    assert mine and sorted(seen["coverage"]) == sorted(mine), f"profiles on {name} changed: run make vllm-gpu-check"
    for profile in mine:
        verdicts = []
        for cc in str(profiles.setting(profile, "runtime_build_cuda_archs")).split(";"):
            for member in MUST:
                codes = codes_of(seen["code"][member])
                found = cuda_code.coverage(codes, cc.strip())
                assert found["runs"], f"{profile}: sm_{cc} runs nothing of {member}"
                verdicts.append(cuda_code.said(cc.strip(), member, found, codes))
        assert verdicts == seen["coverage"][profile], f"{profile}'s GPUs changed: run make vllm-gpu-check"


def test_the_gb10_runs_vllm_s_sm_120_code_and_torch_s_own():
    spark = record("cuda-aarch64")["coverage"]["dgx-spark"]
    assert spark == ["sm_121: vllm/_C_stable_libtorch.abi3.so runs its sm_120 cubin",
                     "sm_121: vllm/_moe_C_stable_libtorch.abi3.so runs its sm_120 cubin",
                     "sm_121: torch/lib/libtorch_cuda.so runs its sm_121a cubin"]


def test_the_x86_lock_installed_here_and_torch_read_its_cuda_and_nccl():
    seen = record("cuda-x86_64")
    pins = lock_pins((LOCKS / "cuda-x86_64.lock").read_text())
    installed = seen["installed"]
    assert installed["torch"].split("+")[0] == pins["torch"]["version"]
    assert installed["vllm"] == pins["vllm"]["version"]
    assert installed["nccl"] == pins["nvidia-nccl-cu13"]["version"]
    assert installed["cuda"].startswith("13.") and installed["gpus_seen"] == 0
    assert codes_of(installed["arch_list"]), installed["arch_list"]
