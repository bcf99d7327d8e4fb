"""What comes after the load, read as what it is (module_utils/
engines/llamacpp/tensor_split.py and the split gate): a runtime that placed every buffer
and then died fails naming the node, the GPU, the fatal line and what it
means; a load that gave up pipeline parallelism passes with a warning
naming it; older buffer lines and a split GGUF's several lines per device
are counted; on real logs (tests/fixtures/llama-load/SOURCES.md)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import FIXTURES

import tensor_split_gate
from ansible.module_utils.engines.llamacpp.tensor_split import MIB, parse_buffers

LOAD = FIXTURES / "llama-load"


def read(name: str) -> str:
    return (LOAD / name).read_text()


@pytest.mark.parametrize("name, line, gpu, where, cause", [
    ("ik-llama-server_cuda_no_kernel_image_after_load_rtx5090_sm120_ik514.txt",
     "CUDA error: no kernel image is available for execution on the device",
     {"index": 0, "name": "NVIDIA GeForce RTX 5090", "compute_capability": "12.0"},
     "in ggml_cuda_compute_forward at /home/mukul/dev-ai/ik_llama.cpp/ggml/src/ggml-cuda.cu:2963",
     "the runtime has no kernel for this GPU (compute capability 12.0, sm_120): its CUDA build's archs "
     "(runtime_build_cuda_archs) do not include it"),
    ("ik-llama-server_cuda_illegal_memory_access_after_serving_2xT4_ik398.txt",
     "CUDA error: an illegal memory access was encountered",
     {"index": 1, "name": "Tesla T4", "compute_capability": "7.5"},
     "in ggml_cuda_up_gate_unary at /kaggle/working/ik_llama.cpp/ggml/src/ggml-cuda.cu:2555",
     "a kernel faulted on the GPU"),
    ("ik-llama-server_cuda_oom_alloc_after_serving_2x4090_ik437.txt", "CUDA error: out of memory",
     {"index": 0, "name": "NVIDIA GeForce RTX 4090", "compute_capability": "8.9"},
     "in alloc at /home/mukul/dev-ai/ik_llama.cpp/ggml/src/ggml-cuda.cu:384",
     "the GPU ran out of memory after the weights were placed"),
    ("ik-llama-server_ggml_assert_rope_after_load_2x5090_ik530.txt",
     "GGML_ASSERT(src0->type == GGML_TYPE_F32 || src0->type == GGML_TYPE_F16) failed", {"index": None},
     "at /home/mukul/dev-ai/ik_llama.cpp/ggml/src/ggml-cuda/rope.cu:370", "an assertion in llama.cpp failed"),
    # ollama's runner: the context's compute buffers were placed, the load's last step
    ("ollama-llama-runner_cuda_illegal_memory_access_after_load_issue-ollama10265.txt",
     "CUDA error: an illegal memory access was encountered", {"index": 0},
     "in ggml_cuda_op_mul_mat at C:\\a\\ollama\\ollama\\ml\\backend\\ggml\\ggml\\src\\ggml-cuda\\ggml-cuda.cu:1621",
     "a kernel faulted on the GPU"),
])
def test_a_death_after_the_load_is_read_with_its_gpu_and_cause(name, line, gpu, where, cause):
    log = parse_buffers(read(name))
    fatal = log["fatal"]
    assert fatal["after_load"] is True and fatal["line"] == line
    assert fatal["gpu"] == gpu and fatal["where"] == where and fatal["cause"].startswith(cause)
    assert log["error"] is None  # every buffer was placed: the load itself did not fail


def test_older_buffer_lines_and_a_split_ggufs_lines_per_device_are_counted():
    old = parse_buffers(read("llama-server_old_llm_load_tensors_buffer_lines_2gpu_pipeline_pr6122_PARTIAL.txt"))
    assert [(b["device"], b["kind"], round(b["bytes"] / MIB, 2)) for b in old["buffers"]] == [
        ("CPU", "model", 1640.62), ("CUDA0", "model", 5434.38), ("CUDA1", "model", 13989.53),
        ("CUDA0", "KV", 1536.0), ("CUDA1", "KV", 3584.0)]  # the output and compute buffers are not counted
    split = parse_buffers(read("ik-llama-server_cuda_no_kernel_image_after_load_rtx5090_sm120_ik514.txt"))
    cpu = [b for b in split["buffers"] if b["device"] == "CPU"]
    assert len(cpu) == 4 and round(sum(b["bytes"] for b in cpu) / MIB, 2) == 109276.9
    assert [(b["device"], b["kind"]) for b in split["buffers"][4:]] == [("CUDA0", "model"), ("CUDA0", "KV")]


def test_a_retry_without_pipeline_parallelism_is_a_degraded_load_not_a_failure():
    log = parse_buffers(read("llama-server_degraded_pipeline_retry_then_serving_3gpu_pr26297.txt"))
    assert log["error"] is None and log["fatal"] is None
    assert log["degraded"]["line"].endswith("W sched_reserve: compute buffer allocation failed, retrying without "
                                            "pipeline parallelism")
    assert [g.split(" E ", 1)[1][:40] for g in log["degraded"]["given_up"]] == [
        "ggml_backend_cuda_buffer_type_alloc_buff", "ggml_gallocr_reserve_n_impl: failed to a",
        "graph_reserve: failed to allocate comput"]
    # without the retry line (cut off in the stored excerpt; the thread says the retry failed too): a failure
    cut = parse_buffers(read("koboldcpp-llama_context_degraded_gallocr_fail_before_retry_2gpu_pr16748_PARTIAL.txt"))
    assert cut["degraded"] is None and cut["error"] == "cudaMalloc failed: out of memory"


def _gate(text: str, capsys, monkeypatch, args: dict | None = None):
    """The gate's result, with the warnings it gave in ``said`` (taken at
    the module: in a process that has loaded controller code, Ansible sends
    a module's warnings to its display instead of its result)."""
    said = []
    monkeypatch.setattr(tensor_split_gate.AnsibleModule, "warn", lambda self, warning, **_kw: said.append(warning))

    def run_command(self, argv, **_kw):
        if argv[1] == "show":
            return 0, "InvocationID=inv-1\nInactiveExitTimestamp=Sat 2026-12-05 10:00:00 UTC\n", ""
        return 0, text, ""

    monkeypatch.setattr(tensor_split_gate.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(tensor_split_gate.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: name)
    plan = {"master": "spark-a", "nodes": {"spark-a": 1.0}, "layers": 61, "devices": {}}
    with patch_module_args(args or {"plan": plan, "tolerance": 0.1}), pytest.raises(SystemExit):
        tensor_split_gate.main()
    return dict(json.loads(capsys.readouterr().out), said=said)


def test_the_gate_fails_a_death_after_the_load_quoting_it_where_it_passed_before(capsys, monkeypatch):
    """The whole log of a single node (one GPU, the rest of the weights on
    its CPU): the buffers add up to the plan's one node, so only the death
    can fail it (it read 'measured 100 %' and passed before)."""
    result = _gate(read("ik-llama-server_cuda_no_kernel_image_after_load_rtx5090_sm120_ik514.txt"), capsys,
                   monkeypatch)
    assert result["failed"] is True
    assert result["msg"] == (
        "service: spark-a: step 3 (master, cluster mode): the split of the layers: llama-server on spark-a died "
        "after it loaded the model (every buffer was placed) on GPU 0 (NVIDIA GeForce RTX 5090, compute capability "
        "12.0): CUDA error: no kernel image is available for execution on the device [in ggml_cuda_compute_forward "
        "at /home/mukul/dev-ai/ik_llama.cpp/ggml/src/ggml-cuda.cu:2963]: the runtime has no kernel for this GPU "
        "(compute capability 12.0, sm_120): its CUDA build's archs (runtime_build_cuda_archs) do not include it; "
        "rebuild with the GPU's arch")


def test_the_gate_passes_a_degraded_load_with_a_warning_naming_what_was_given_up(capsys, monkeypatch):
    """The degraded log has no buffer lines of its own (the excerpt starts
    after them): an older log's buffer lines come first, as a load's
    would, so the gate reaches its verdict on the retry."""
    text = (read("llama-server_old_llm_load_tensors_buffer_lines_2gpu_pipeline_pr6122_PARTIAL.txt")
            + read("llama-server_degraded_pipeline_retry_then_serving_3gpu_pr26297.txt"))
    result = _gate(text, capsys, monkeypatch)
    assert not result.get("failed"), result
    assert result["degraded"]["line"].endswith("retrying without pipeline parallelism")
    (warning,) = result["said"]
    assert warning.startswith("service: spark-a: step 3 (master, cluster mode): the split of the "
                                            "layers: llama-server serves degraded: its compute buffers did not fit "
                                            "with pipeline parallelism")
    assert "failed to allocate CUDA1 buffer of size 54262464512" in warning


def test_an_unhealthy_llama_server_is_named_by_its_death_not_its_last_lines(capsys, monkeypatch):
    """deaths_only (the service stage's question when /health does not
    answer): a death fails naming it; a log with none passes, leaving the
    health gate's own message."""
    def run(text, argv):
        return _gate(text, capsys, monkeypatch, argv)

    plan = {"master": "n1", "nodes": {"n1": 0.5, "n2": 0.5}, "layers": 32, "devices": {}}
    died = run(read("ik-llama-server_cuda_illegal_memory_access_after_serving_2xT4_ik398.txt"),
               {"plan": plan, "deaths_only": True})
    assert died["failed"] and "died after it loaded the model (every buffer was placed) on GPU 1 (Tesla T4" in died["msg"]
    # a split far from the plan's, but no death: not this question's business
    alive = run(read("llama-server_old_llm_load_tensors_buffer_lines_2gpu_pipeline_pr6122_PARTIAL.txt"),
                {"plan": plan, "deaths_only": True})
    assert not alive.get("failed") and alive["lines"] == ["llama-server's journal names no death and no load error"]
