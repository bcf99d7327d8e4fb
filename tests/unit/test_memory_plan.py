"""The memory plan (seed 004) and its module."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible.module_utils.weights import gguf_figures
import twinrail_memory_plan
from ansible.module_utils.weights.gguf_figures import GGUFError, model_figures
from ansible.module_utils.inventory.memory_plan import GIB, plan

REPO = Path(__file__).resolve().parents[2]
SMOLLM2 = (Path.home() / ".cache" / "twinrail" / "bundle" / "models" / "smollm2-135m-instruct"
           / "SmolLM2-135M-Instruct.Q4_1.gguf")
NO_KV = {"layers": 1, "kv_heads": 1, "head_dim": 1, "context": 0, "kv_type": "f16", "parallel": 1}


def model(**figures):
    base = {"name": "m", **NO_KV}
    base.update(figures)
    return base


def test_seed_004_figures():
    """671B at 8 bits is 671 GB of weights, 805 GB with the 1.2 factor; 4 bits halves it."""
    eight = plan(model(params_b=671, bits_per_param=8), {"a": 1 << 40}, 85, 92, 1.2)
    four = plan(model(params_b=671, bits_per_param=4), {"a": 1 << 40}, 85, 92, 1.2)
    assert eight["file_bytes"] == 671_000_000_000
    assert eight["weights_bytes"] == 805_200_000_000
    assert four["weights_bytes"] == 402_600_000_000


def test_kv_cache_arithmetic():
    """layers x kv heads x head dim x 2 x bytes per element of the type x context x parallel."""
    figures = dict(params_b=0, bits_per_param=4, layers=30, kv_heads=3, head_dim=64, context=8192, parallel=4)
    f16 = plan(model(kv_type="f16", **figures), {"a": 8 * GIB}, 85, 92, 1.2)
    assert f16["kv_bytes"] == 30 * 3 * 64 * 2 * 2 * 8192 * 4 == 754_974_720
    # q8_0: blocks of 32 elements in 34 bytes; q4_0: 18 bytes
    assert plan(model(kv_type="q8_0", **figures), {"a": 8 * GIB}, 85, 92, 1.2)["kv_bytes"] == 754_974_720 * 34 // 64
    q4 = plan(model(kv_type="q4_0", **figures), {"a": 8 * GIB}, 85, 92, 1.2)
    assert q4["kv_bytes"] == 754_974_720 * 18 // 64
    assert "x 0.5625 bytes (q4_0) x" in q4["lines"][1]


def test_share_is_split_over_nodes_and_gated_by_soft_watermark():
    """Seed 000's 552B at 2.9 bits on 2 x 128 GiB: 87 % per node with 1.2, over 85 %."""
    mem = {"spark-a": 128 * GIB, "spark-b": 128 * GIB}
    result = plan(model(params_b=552, bits_per_param=2.9), mem, 85, 92, 1.2)
    assert result["share_bytes"] == int(552e9 * 2.9 / 8 * 1.2 / 2)
    assert result["nodes"]["spark-a"]["share_pct"] == pytest.approx(87.355, abs=0.01)
    assert not result["nodes"]["spark-a"]["fits"]
    assert len(result["failures"]) == 2
    assert result["failures"][0].startswith(
        "spark-a: memory plan: the model needs 111.81 GiB on this node (87.4 % of 128.00 "
        "GiB), required at most the soft watermark 85 % = 108.80 GiB")
    relaxed = plan(model(params_b=552, bits_per_param=2.9), mem, 85, 92, 1.05)
    assert relaxed["failures"] == []
    assert any("fits" in line for line in relaxed["lines"])


def test_plan_prints_its_arithmetic():
    result = plan(model(params_b=552, bits_per_param=2.9), {"a": 128 * GIB}, 85, 92, 1.2)
    assert result["lines"][0] == ("model m: 552 B params x 2.9 bits / 8 x 1.2 overhead "
                                  "= 223.63 GiB of weights")


def test_gguf_figures_of_the_real_smollm2_file():
    """Read from the GGUF that tools/bundle.py fetches (`make test` fetches it first)."""
    assert SMOLLM2.exists(), "run `tools/bundle.py models` (make test does) first"
    figures = model_figures(str(SMOLLM2))
    assert figures["architecture"] == "llama"
    assert figures["params_b"] * 1e9 == pytest.approx(134_515_008)
    assert figures["tensor_bytes"] == 96_576_768
    assert figures["bits_per_param"] == pytest.approx(5.7437, abs=1e-4)
    assert (figures["layers"], figures["kv_heads"], figures["head_dim"]) == (30, 3, 64)
    assert figures["context_length"] == 8192


def test_gguf_figures_are_kept_until_the_file_changes(tmp_path, monkeypatch):
    """The preflight reads the model's figures on every run: kept per file,
    read again once its size, time or inode change."""
    assert SMOLLM2.exists(), "run `tools/bundle.py models` (make test does) first"
    copy = tmp_path / "model.gguf"
    copy.write_bytes(SMOLLM2.read_bytes())
    reads = []
    real = gguf_figures.model_figures
    monkeypatch.setattr(gguf_figures, "model_figures", lambda path: reads.append(path) or real(path))
    cache = tmp_path / "cache"
    first = gguf_figures.cached_model_figures(str(copy), str(cache))
    assert first == real(str(SMOLLM2)) and reads == [str(copy)]
    assert gguf_figures.cached_model_figures(str(copy), str(cache)) == first and len(reads) == 1
    info = copy.stat()
    os.utime(copy, ns=(info.st_atime_ns, info.st_mtime_ns + 1_000_000_000))
    assert gguf_figures.cached_model_figures(str(copy), str(cache)) == first and len(reads) == 2
    # a kept entry that is not JSON is read past, not trusted
    for kept in cache.iterdir():
        kept.write_text("{")
    assert gguf_figures.cached_model_figures(str(copy), str(cache)) == first and len(reads) == 3


def test_gguf_reader_refuses_a_file_that_is_not_gguf(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUX" + bytes(64))
    with pytest.raises(GGUFError, match="cannot read"):
        model_figures(str(bad))


def run_module(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        twinrail_memory_plan.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def test_module_reads_the_gguf_and_passes(capsys):
    assert SMOLLM2.exists()
    code, result = run_module({
        "model": model(params_b=999, bits_per_param=16, gguf=str(SMOLLM2)),
        "memory_mb": {"lab-master": 24000, "lab-worker1": 24000},
        "soft_watermark_pct": 85, "hard_watermark_pct": 92}, capsys)
    assert code == 0 and not result["changed"]
    assert result["source"] == str(SMOLLM2)
    assert result["model"]["layers"] == 30
    assert result["plan"]["file_bytes"] == pytest.approx(96_576_768, rel=1e-6)


def test_module_fails_naming_host_figure_and_watermark(capsys):
    code, result = run_module({
        "model": model(params_b=552, bits_per_param=2.9),
        "memory_mb": {"spark-a": 131072, "spark-b": 131072},
        "soft_watermark_pct": 85, "hard_watermark_pct": 92}, capsys)
    assert code == 1 and result["failed"]
    assert "spark-b: memory plan: the model needs 111.81 GiB" in result["msg"]
    assert "soft watermark 85 % = 108.80 GiB" in result["msg"]


def test_module_refuses_a_missing_gguf(capsys):
    code, result = run_module({
        "model": model(params_b=1, bits_per_param=4, gguf="/nonexistent/m.gguf"),
        "memory_mb": {"a": 1024}, "soft_watermark_pct": 85, "hard_watermark_pct": 92},
        capsys)
    assert code == 1
    assert result["msg"] == ("preflight: twinrail_model.gguf: expected a GGUF file on the "
                             "controller, got '/nonexistent/m.gguf', which does not exist")


def test_the_service_accepts_exactly_the_kv_types_the_plan_knows():
    import yaml

    from ansible.module_utils.inventory.memory_plan import KV_TYPES
    specs = yaml.safe_load((REPO / "roles" / "inference_service" / "meta" / "argument_specs.yml").read_text())
    option = specs["argument_specs"]["main"]["options"]["inference_service_kv_type"]
    assert option["choices"] == list(KV_TYPES)


def spark_free() -> tuple[int, int]:
    """(MemTotal, MemTotal - MemAvailable) in bytes, from a DGX Spark's
    `free` (tests/fixtures/hardware: KiB; used is what the guard counts)."""
    text = (Path(__file__).resolve().parents[1] / "fixtures" / "hardware"
            / "free_dgx_spark_kib_prompt_obrienlabs_blog.txt").read_text()
    row = next(line.split() for line in text.splitlines() if line.startswith("Mem:"))
    total, available = int(row[1]) * 1024, int(row[6]) * 1024
    return total, total - available


EXAMPLE_MODEL = {"name": "moe-552b-q2_9", "params_b": 552, "bits_per_param": 2.9, "layers": 28, "kv_heads": 8,
                 "head_dim": 128, "context": 131072, "kv_type": "q8_0", "parallel": 1}


def test_the_example_fits_a_spark_on_paper_and_warns_with_what_the_os_uses():
    """inventory/example's model on two Sparks as Linux sees them (119.7
    GiB each): 84.8 % under the 85 % watermark, a fit; with the 4.9 GiB the
    box's desktop and OS use, 88.9 %, past it: preflight warns, naming the
    node and the figures, and still passes."""
    total, used = spark_free()
    memory = {"spark-a": total, "spark-b": total}
    result = plan(EXAMPLE_MODEL, memory, 85, 92, 1.05, {"spark-a": used, "spark-b": used}, 5)
    assert result["failures"] == []
    assert result["nodes"]["spark-a"]["share_pct"] == pytest.approx(84.8, abs=0.05)
    assert len(result["warnings"]) == 2
    assert result["warnings"][0].startswith("spark-a: memory plan: the model's 101.56 GiB and what the node uses "
                                            "besides it (4.85 GiB, measured now) make 88.9 % of 119.70 GiB")
    assert "below the soft watermark 85 % (margin wanted 5)" in result["warnings"][0]
    # without the OS's figure the plan says nothing more than it did
    assert plan(EXAMPLE_MODEL, memory, 85, 92, 1.05)["warnings"] == []
    # a node with room: no warning
    roomy = plan(dict(EXAMPLE_MODEL, params_b=400), memory, 85, 92, 1.05, {"spark-a": used, "spark-b": used}, 5)
    assert roomy["warnings"] == []


def test_the_node_memory_module_counts_the_service_apart_on_a_real_systemctl_show():
    import node_memory_facts  # pylint: disable=import-outside-toplevel

    text = (Path(__file__).resolve().parents[1] / "fixtures" / "lab"
            / "systemctl_show_id_memorycurrent_twinrail_units_lab_master.txt").read_text()
    total, units = node_memory_facts.service_bytes(text)
    assert units == ["twinrail-guard.service", "twinrail-lab-webhook.service", "twinrail-llama.service"]
    assert total == 13832192 + 9465856 + 602963968  # the firewall's "[not set]" counts nothing


def test_an_engine_with_its_own_cache_a_node_is_planned_with_it():
    """vLLM without GPUs takes VLLM_CPU_KVCACHE_SPACE a node whatever the
    sequences need: the lab-vllm model in bf16 (16 bits) with 1 GiB a node."""
    smol = model(params_b=0.1345, bits_per_param=16, layers=30, kv_heads=3, head_dim=64, context=2048,
                 kv_type="bf16", parallel=4)
    nodes = {"lab-master": 6 * GIB, "lab-worker1": 6 * GIB}
    sequences = plan(smol, nodes, 85, 92, 1.2)
    fixed = plan(smol, nodes, 85, 92, 1.2, kv_per_node_bytes=1 * GIB)
    weights = 0.1345e9 * 2 * 1.2
    assert fixed["nodes"]["lab-master"]["share_bytes"] == int((weights + 2 * GIB) / 2)
    assert fixed["nodes"]["lab-master"]["share_bytes"] > sequences["nodes"]["lab-master"]["share_bytes"]
    assert any(line.startswith("KV cache: the engine's own, 1.00 GiB a node x 2 node(s)") for line in fixed["lines"])
    tight = plan(smol, {"a": 2 * GIB, "b": 2 * GIB}, 85, 92, 1.2, kv_per_node_bytes=2 * GIB)
    assert tight["failures"] and "DOES NOT FIT" in "\n".join(tight["lines"])


def test_two_sparks_with_vllm_are_planned_with_the_fixed_kv_cache_the_profile_gives():
    """dgx-spark with the vLLM engine: the GB10's memory is the system's
    (its real nvidia-smi table reads unified), so the plan holds each node
    to its memory's watermark, counting the KV cache the profile fixes
    (inference_service_vllm_gpu_kvcache_gib, passed to vLLM as
    --kv-cache-memory-bytes) instead of what the sequences need."""
    from ansible.module_utils.gpu.facts import parse_table  # pylint: disable=import-outside-toplevel
    from ansible.module_utils.inventory import profiles  # pylint: disable=import-outside-toplevel
    gb10 = parse_table((REPO / "tests" / "fixtures" / "hardware"
                        / "nvidia-smi_gb10_table_prompt_firefox_procs_obrienlabs_blog.txt").read_text())
    assert [g["memory"] for g in gb10["gpus"]] == ["unified"]
    total, used = spark_free()
    fixed_gib = profiles.setting("dgx-spark", "inference_service_vllm_gpu_kvcache_gib")
    params = {"model": dict(EXAMPLE_MODEL, params_b=400), "memory_mb": {"spark-a": total >> 20, "spark-b": total >> 20},
              "soft_watermark_pct": 85, "hard_watermark_pct": 92, "overhead": 1.05,
              "os_used_mb": {"spark-a": used >> 20, "spark-b": used >> 20}, "margin_pct": 5,
              "gpus": {"spark-a": gb10, "spark-b": gb10}, "cuda": True, "gpu_utilization": 0.9,
              "kv_cache_gib_per_node": fixed_gib}
    fixed = twinrail_memory_plan.judge(dict(params), print)
    sequences = twinrail_memory_plan.judge(dict(params, kv_cache_gib_per_node=0), print)
    assert not fixed.get("failed") and "gpus" not in fixed["plan"]["nodes"]["spark-a"]  # its system memory
    assert any(line.startswith(f"KV cache: the engine's own, {fixed_gib:.2f} GiB a node x 2 node(s)")
               for line in fixed["lines"]), fixed["lines"]
    assert fixed["plan"]["kv_bytes"] == 2 * fixed_gib * GIB != sequences["plan"]["kv_bytes"]
