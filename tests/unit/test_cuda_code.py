"""Which GPUs a library's CUDA code runs on (module_utils/gpu/cuda_code.py),
read from real cuobjdump listings of vLLM's and torch's libraries
(tests/fixtures/cuobjdump/SOURCES.md) and torch's own arch list."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES, REPO

from ansible.module_utils.gpu.cuda_code import coverage, listed, name, said, from_names

CUOBJDUMP = FIXTURES / "cuobjdump"


def codes(*files: str) -> list[dict]:
    return [c for f in files for c in listed((CUOBJDUMP / f).read_text())]


VLLM_C = codes("list-elf_vllm-0.33.0_aarch64_C_stable_libtorch.txt", "list-ptx_vllm-0.33.0_aarch64_C_stable_libtorch.txt")
FA2 = codes("list-elf_vllm-0.33.0_aarch64_vllm_fa2_C.txt", "list-ptx_vllm-0.33.0_aarch64_vllm_fa2_C.txt")
TORCH = codes("list-elf_torch-2.14.0_aarch64_libtorch_cuda.txt", "list-ptx_torch-2.14.0_aarch64_libtorch_cuda.txt")


def test_the_listings_read_as_the_code_they_hold():
    assert [name(c) for c in VLLM_C] == ["sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_110",
                                         "sm_120", "compute_80", "compute_89", "compute_90"]
    assert [name(c) for c in FA2] == ["sm_80", "compute_80"]
    assert "sm_121a" in [name(c) for c in TORCH] and not [c for c in TORCH if c["kind"] == "ptx"]
    assert codes("list-ptx_no-device-code_cuobjdump-itself.txt") == []


@pytest.mark.parametrize("gpu, lib, runs, by", [
    ("121", VLLM_C, "cubin", "sm_120"),     # GB10: vLLM ships no sm_121, its sm_120 cubin runs there
    ("121", TORCH, "cubin", "sm_121a"),
    ("90", VLLM_C, "cubin", "sm_90a"),      # H100: the architecture-specific cubin first
    ("86", VLLM_C, "cubin", "sm_86"),
    ("120", FA2, "ptx", "compute_80"),      # flash-attention 2 on a 50-series: PTX compiled at the start
    ("75", VLLM_C, None, None),             # a Turing GPU: nothing runs
])
def test_each_gpu_runs_a_cubin_of_its_major_or_newer_ptx_or_nothing(gpu, lib, runs, by):
    assert coverage(lib, gpu) == {"runs": runs, "by": by}


def test_an_architecture_specific_cubin_runs_on_its_own_gpu_alone():
    only_90a = [c for c in VLLM_C if name(c) == "sm_90a"]
    assert coverage(only_90a, "90")["runs"] == "cubin"
    assert coverage(only_90a, "100")["runs"] is None
    only_120a = [c for c in TORCH if name(c) == "sm_120a"]
    assert coverage(only_120a, "121")["runs"] is None  # 'a' code is not for the next minor


def test_the_verdict_names_the_gpu_and_what_the_library_holds():
    assert said("121", "vllm/_C", coverage(VLLM_C, "121"), VLLM_C) == "sm_121: vllm/_C runs its sm_120 cubin"
    assert said("120", "fa2", coverage(FA2, "120"), FA2) == (
        "sm_120: fa2 has no cubin for it; the driver compiles its compute_80 PTX at the first start")
    assert said("75", "fa2", coverage(FA2, "75"), FA2) == "sm_75: fa2 has no code that runs on it (it has sm_80, compute_80)"


def test_torch_s_arch_list_reads_sm_as_cubins_and_compute_as_ptx():
    # torch.cuda.get_arch_list() as torch 2.14.0+cu130 printed it, without a GPU, in make vllm-gpu-check
    arch_list = json.loads((REPO / "tests" / "vllm-gpu-check" / "cuda-x86_64.json").read_text())["installed"]["arch_list"]
    found = from_names(arch_list)
    assert [name(c) for c in found] == arch_list == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert coverage(found, "121") == {"runs": "cubin", "by": "sm_120"}
    assert coverage(found, "89") == {"runs": "cubin", "by": "sm_86"}  # the list names no sm_89: 8.6 code runs on 8.9
    assert [name(c) for c in from_names(["compute_120"])] == ["compute_120"]
