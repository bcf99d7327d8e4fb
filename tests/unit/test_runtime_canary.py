"""The runtime stage's canary read on real logs (tests/fixtures/canary/
SOURCES.md, llama-load/): a full offload on the GPU asked passes; a GPU
left unused (no -ngl, a failed CUDA start), a death for a missing arch, a
failed load, no answer each fail naming the node, the GPU and the cause;
the CPU path of a CPU build; when it runs again (module_utils/
runtime/canary.py)."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from ansible.module_utils.runtime.canary import KEPT_PASSES, answered, due, passed_at, problems, read_load, server_args, verdict

CANARY = FIXTURES / "canary"
V100 = "llama-cli_cuda0_full_offload_v100_cc70_33of33_ci-ggml-4_c6af2161_2025-03.txt"
GB10_NGL0 = "llama-logits_cuda_build_gb10_ngl0_offloaded_0of41_cpu_mapped_danbev-learning-ai.txt"
INIT_FAILED = "llama-server_cuda_init_failed_unknown_error_cpu_fallback_0cuda_devices_danbev-learning-ai.txt"
LAB_CPU = "llama-server_canary_cpu_build_smollm2_q4_1_lab_runtime.txt"
LAB_TRUNCATED = "llama-server_canary_cpu_build_truncated_gguf_load_error_lab_runtime.txt"
DRIVER_OLD = "llama_cuda_init_driver_insufficient_jetson_xavier_b5415_issue13629.txt"
NO_DEVICE = "ik_llama-bench_cuda_init_no_cuda_capable_device_issue476.txt"
SPARK_NO_KERNEL = "llama-server_no_kernel_image_dgx_spark_pasted_issue.txt"
NO_KERNEL = FIXTURES / "llama-load" / "ik-llama-server_cuda_no_kernel_image_after_load_rtx5090_sm120_ik514.txt"


def load(name: str) -> dict:
    return read_load((CANARY / name).read_text())


def reply() -> dict:
    """The lab's llama-server answering /completion (tests/fixtures/llama-server/SOURCES.md)."""
    text = (FIXTURES / "llama-server" / "lab_completion.json").read_text()
    return json.loads(text.split("\n\n", 1)[1])


def test_a_full_offload_on_the_gpu_asked_passes_and_on_another_fails():
    read = load(V100)
    assert read["offloaded"] == (33, 33)
    assert read["devices"] == [{"index": 0, "name": "Tesla V100-PCIE-16GB", "compute_capability": "7.0"}]
    assert problems("gpu-a", 0, read, reply()) == []
    # the same log read as the canary's run for the node's second GPU: its buffers are on the first
    assert problems("gpu-a", 1, read, reply()) == [
        "gpu-a GPU 1: buffers on CUDA0, expected only on CUDA1",
        "gpu-a GPU 1: the model buffer is on CPU_Mapped, CUDA0, expected on CUDA1",
        "gpu-a GPU 1: the KV buffer is on CUDA0, expected on CUDA1"]


def test_a_gb10_that_offloaded_nothing_fails_naming_the_layers_and_buffers():
    found = problems("spark-1", 0, load(GB10_NGL0), reply())
    assert found == ["spark-1 GPU 0: 0/41 layers offloaded to the GPU, expected all of them",
                     "spark-1 GPU 0: the model buffer is on CPU_Mapped, expected on CUDA0",
                     "spark-1 GPU 0: the KV buffer is on CPU, expected on CUDA0"]


def test_a_cuda_start_that_failed_is_named_before_anything_else():
    read = load(INIT_FAILED)
    assert read["cuda_init"] == "ggml_cuda_init: failed to initialize CUDA: unknown error"
    assert problems("gpu-b", 0, read, reply()) == [
        "gpu-b GPU 0: llama-server could not use the GPU (ggml_cuda_init: failed to initialize CUDA: unknown "
        "error): the CUDA runtime could not start on this node"]


def test_a_driver_older_than_the_toolkit_and_a_hidden_gpu_are_named_with_what_to_do():
    old = load(DRIVER_OLD)
    assert problems("spark-1", 0, old, None, exit_code=1, driver="535.104.05") == [
        "spark-1 GPU 0: llama-server could not use the GPU (ggml_cuda_init: failed to initialize CUDA: CUDA driver "
        "version is insufficient for CUDA runtime version): the NVIDIA driver (535.104.05) is older than the CUDA "
        "toolkit the runtime was built with: update the driver, or build with a toolkit the driver supports "
        "(runtime_build_cuda_root)"]
    hidden = problems("gpu-d", 1, load(NO_DEVICE), None)
    assert hidden == [
        "gpu-d GPU 1: llama-server could not use the GPU (ggml_cuda_init: failed to initialize CUDA: no "
        "CUDA-capable device is detected): the process sees no GPU: the driver is not loaded, /dev/nvidia* is "
        "missing, or CUDA_VISIBLE_DEVICES hides it"]
    # the same words on the CPU path of a CPU build are not a GPU failure
    assert not any("could not use the GPU" in line for line in problems("lab-master", None, old, reply()))


def test_a_spark_without_its_arch_in_the_build():
    found = problems("spark-2", 0, load(SPARK_NO_KERNEL), None, exit_code=-6, archs="80;86;89;90")
    assert found == ["spark-2 GPU 0: the canary died while loading: CUDA error: no kernel image is available for "
                     "execution on the device [in ggml_cuda_compute_forward at /opt/llama.cpp/ggml/src/ggml-cuda/"
                     "ggml-cuda.cu:2761]: no kernel image for this GPU's arch: the build's archs are 80;86;89;90 "
                     "(runtime_build_cuda_archs); rebuild with the GPU's arch"]


def test_a_missing_arch_names_the_gpu_its_arch_and_the_builds_archs():
    read = read_load(NO_KERNEL.read_text())
    found = problems("gpu-c", 0, read, None, exit_code=-6, archs="86;89")
    assert len(found) == 1
    assert found[0].startswith("gpu-c GPU 0: the canary died after the load (its first kernels): CUDA error: no "
                               "kernel image is available for execution on the device [in ggml_cuda_compute_forward")
    assert found[0].endswith(": no kernel image for sm_120 (compute capability 12.0): the build's archs are 86;89 "
                             "(runtime_build_cuda_archs); rebuild with the GPU's arch")


def test_the_cpu_path_of_a_cpu_build():
    read = load(LAB_CPU)
    assert read["offloaded"] == (31, 31) and read["devices"] == []
    assert problems("lab-worker1", None, read, reply()) == []
    # the same log where a CUDA build was expected: nothing on the GPU
    assert problems("lab-worker1", 0, read, reply()) == [
        "lab-worker1 GPU 0: the model buffer is on CPU, expected on CUDA0",
        "lab-worker1 GPU 0: the KV buffer is on CPU, expected on CUDA0"]


def test_a_model_that_does_not_load():
    found = problems("lab-worker1", None, load(LAB_TRUNCATED), None, exit_code=1)
    assert found == ["lab-worker1 (CPU build): the canary model did not load: error loading model: tensor "
                     "'token_embd.weight' data is not within the file bounds, model is corrupted or incomplete"]


def test_no_answer_or_an_empty_one_fails():
    read = load(LAB_CPU)
    found = problems("lab-master", None, read, None, exit_code=None, tail="last | lines")
    assert found == ["lab-master (CPU build): llama-server did not answer the canary's completion; its last "
                     "lines: last | lines"]
    empty = dict(reply(), tokens_predicted=0, content="")
    assert not answered(empty)
    assert problems("lab-master", None, read, empty)[0].startswith(
        "lab-master (CPU build): the canary's completion came back without a generated token")


def test_the_command_puts_every_layer_on_the_gpu_asked_and_reads_without_mmap():
    gpu = server_args("/r/bin/llama-server", "/m.gguf", 4242, "CUDA1")
    assert gpu[:8] == ["/r/bin/llama-server", "-m", "/m.gguf", "--host", "127.0.0.1", "--port", "4242", "-ngl"]
    assert gpu[gpu.index("--device") + 1] == "CUDA1" and gpu[gpu.index("-lm") + 1] == "none"
    assert gpu[gpu.index("-lv") + 1] == "4"
    assert "--device" not in server_args("/r/bin/llama-server", "/m.gguf", 4242, None)


def test_it_runs_again_when_what_it_vouched_for_changed():
    key = {"runtime": "aa", "model": "mm", "gpus": ["0, GPU-1, NVIDIA GB10, 580.95.05"]}
    assert due(None, key, "auto") == ["no canary has run on this node"]
    assert due({"key": key, "passed": True}, key, "auto") == []
    assert due({"key": key, "passed": True}, key, "always") == ["asked for (runtime_build_measure=always)"]
    assert due({"key": key, "passed": False}, key, "auto") == ["the last canary failed"]
    newer = dict(key, runtime="bb", gpus=["0, GPU-1, NVIDIA GB10, 590.10"])
    assert due({"key": key, "passed": True}, newer, "auto") == ["gpus changed", "runtime changed"]
    with pytest.raises(ValueError, match="runtime_build_measure must be auto or always, got 'sometimes'"):
        due(None, key, "sometimes")


def test_a_rollback_to_a_build_that_passed_loads_nothing_but_a_failure_is_not_forgotten():
    first = {"runtime": "aa", "model": "mm", "gpus": "none (CPU build)"}
    second = dict(first, runtime="bb")
    record = verdict(None, first, [], [], "t1")
    record = verdict(record, second, [], [], "t2")
    assert due(record, second, "auto") == [] and passed_at(record, second) == "t2"
    # rolled back to the first build: its pass is kept
    assert due(record, first, "auto") == [] and passed_at(record, first) == "t1"
    assert due(record, dict(first, runtime="cc"), "auto") == ["runtime changed"]
    # the first build fails later (the GPU changed under the same key is a new
    # key; here the same key, a sick GPU): its earlier pass no longer counts
    failed = verdict(record, first, ["lab-worker1 (CPU build): it died"], [], "t3")
    assert failed["earlier_passes"] == [{"key": second, "at": "t2"}]
    assert due(failed, first, "auto") == ["the last canary failed"]
    assert due(failed, second, "auto") == []
    # bounded: the oldest passes go
    for n in range(2 * KEPT_PASSES):
        record = verdict(record, dict(first, runtime=f"r{n}"), [], [], f"u{n}")
    assert len(record["earlier_passes"]) == KEPT_PASSES
    assert due(record, first, "auto") == ["runtime changed"]
