"""The vLLM engine's layout (module_utils/engines/vllm/layout.py) through the
filters the service stage calls (filter_plugins/vllm.py): the sizes'
check against nodes, GPUs, heads and layers, and each node's command
line and environment."""

from __future__ import annotations

import shlex

import pytest

from ansible.module_utils.engines.vllm.layout import parallel_problems, serve_args, serve_env

SMOL = {"heads": 9, "kv_heads": 3, "layers": 30}
GEMMA = {"heads": 4, "kv_heads": 1, "layers": 18}


def problems(gpus, tensor, pipeline, model):
    return parallel_problems(tensor=tensor, pipeline=pipeline, gpus=gpus, heads=model.get("heads"),
                             kv_heads=model.get("kv_heads"), layers=model.get("layers"))


def test_the_lab_pipeline_of_two_cpu_nodes_fits():
    assert problems({"lab-master": None, "lab-worker1": None}, 1, 2, SMOL) == []


def test_two_eight_gpu_servers_tp8_pp2_fits():
    assert problems({"gpu-a": 8, "gpu-b": 8}, 8, 2, {"heads": 64, "kv_heads": 8, "layers": 80}) == []


def test_sizes_that_do_not_make_the_ranks_are_refused():
    got = problems({"gpu-a": 8, "gpu-b": 8}, 8, 1, {"heads": 64, "kv_heads": 8, "layers": 80})
    assert got == ["inference_service_vllm_tensor_parallel x inference_service_vllm_pipeline_parallel: "
                   "expected 16 (the ranks: 2 nodes x 8), got 8 x 1 = 8"]


def test_tensor_parallel_must_divide_the_heads():
    got = problems({"a": None, "b": None}, 2, 1, SMOL)
    assert any("a divisor of the model's 9 attention heads (twinrail_model.heads), got 2" in p for p in got)
    assert problems({"a": None, "b": None}, 2, 1, GEMMA) == []  # 4 heads, 1 KV head replicated


def test_tensor_parallel_needs_the_heads_given():
    got = problems({"a": None, "b": None}, 2, 1, {"layers": 30})
    assert got == ["twinrail_model.heads: expected the model's attention heads (a whole number: tensor parallel 2 "
                   "must divide them), got none"]
    assert problems({"a": None, "b": None}, 1, 2, {"layers": 30}) == []


def test_kv_heads_neither_divisor_nor_multiple():
    got = problems({"a": 3, "b": 3}, 6, 1, {"heads": 12, "kv_heads": 4, "layers": 24})
    assert got == ["inference_service_vllm_tensor_parallel: expected a divisor or a multiple of the model's 4 KV "
                   "heads (twinrail_model.kv_heads), got 6"]


def test_more_stages_than_layers_and_uneven_nodes():
    assert any("at most the model's 1 layers" in p for p in problems({"a": None, "b": None}, 1, 2, {"layers": 1}))
    got = problems({"a": 2, "b": 1}, 3, 1, {})
    assert got[0].startswith("the nodes run different numbers of ranks") and "a 2, b 1" in got[0]


def test_sizes_below_one():
    assert "expected sizes of at least 1" in problems({"a": None}, 0, 1, SMOL)[0]


def settings(rank, **over):
    base = {"model": "/srv/twinrail/models/smol/current", "name": "smol", "dtype": "bfloat16",
            "max_model_len": 2048, "max_num_seqs": 4, "tensor": 1, "pipeline": 2, "nodes": 2, "rank": rank,
            "master_addr": "198.19.0.1", "master_port": 29500, "listen_host": "127.0.0.1", "listen_port": 8080,
            "gpu": False, "gpu_memory_utilization": 0.9, "enforce_eager": True}
    base.update(over)
    return base


def test_rank_zero_serves_on_the_loopback_and_the_others_run_headless():
    master = serve_args(**settings(0))
    worker = serve_args(**settings(1))
    assert master[0] == "/srv/twinrail/models/smol/current"
    assert master[master.index("--node-rank") + 1] == "0" and master[-4:] == ["--host", "127.0.0.1", "--port", "8080"]
    assert worker[worker.index("--node-rank") + 1] == "1" and worker[-1] == "--headless"
    for args in (master, worker):
        assert args[args.index("--master-addr") + 1] == "198.19.0.1"
        assert args[args.index("--distributed-executor-backend") + 1] == "mp"
        assert "--gpu-memory-utilization" not in args and "--enforce-eager" in args


def test_gpu_nodes_get_the_memory_share_and_one_node_no_group():
    args = serve_args(**settings(0, gpu=True, nodes=1, pipeline=1, enforce_eager=False))
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.9"
    assert "--nnodes" not in args and "--enforce-eager" not in args


def test_the_environment_puts_the_group_on_rail0():
    cpu = serve_env(interface="ens1f0np0", address="198.19.0.2", gpu=False, rdma_devices=["", ""], kvcache_gib=1,
                    threads_bind="1")
    assert cpu == {"GLOO_SOCKET_IFNAME": "ens1f0np0", "VLLM_HOST_IP": "198.19.0.2", "VLLM_CPU_KVCACHE_SPACE": "1",
                   "VLLM_CPU_OMP_THREADS_BIND": "1"}
    gpu = serve_env(interface="enp1s0f0np0", address="198.19.0.1", gpu=True, rdma_devices=["rocep1s0f0", "roceP2p1s0f1"],
                    kvcache_gib=1, threads_bind="auto")
    assert gpu["NCCL_SOCKET_IFNAME"] == "enp1s0f0np0" and gpu["NCCL_IB_HCA"] == "=rocep1s0f0,roceP2p1s0f1"
    assert "VLLM_CPU_KVCACHE_SPACE" not in gpu
    tcp = serve_env(interface="eth1", address="10.0.0.1", gpu=True, rdma_devices=[""], kvcache_gib=1, threads_bind="auto")
    assert tcp["NCCL_IB_DISABLE"] == "1"


def test_the_filter_quotes_for_the_unit():
    from filter_plugins_vllm import serve_args as quoted  # noqa: PLC0415
    line = quoted(settings(1, model="/srv/models/my model/current"))
    assert shlex.split(line)[0] == "/srv/models/my model/current"


@pytest.fixture(autouse=True, scope="module")
def _filters_importable():
    import importlib.util  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415
    path = Path(__file__).resolve().parents[2] / "filter_plugins" / "vllm.py"
    spec = importlib.util.spec_from_file_location("filter_plugins_vllm", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["filter_plugins_vllm"] = module


def test_eager_mode_with_pipeline_parallel_on_cpus_is_refused():
    cpu = {"lab-master": None, "lab-worker1": None}
    got = parallel_problems(tensor=1, pipeline=2, gpus=cpu, heads=9, kv_heads=3, layers=30, eager=True)
    assert got == ["inference_service_vllm_eager: expected false with pipeline parallel on nodes without GPUs "
                   "(pipeline 2): vLLM's CPU engine gives a later stage no buffers in eager mode and its first "
                   "request fails"]
    assert parallel_problems(tensor=2, pipeline=1, gpus=cpu, heads=4, kv_heads=1, layers=18, eager=True) == []
    assert parallel_problems(tensor=1, pipeline=2, gpus={"a": 1, "b": 1}, heads=9, kv_heads=3, layers=30,
                             eager=True) == []


def test_a_fixed_gpu_kv_cache_is_passed_instead_of_vllms_own_sizing():
    """vLLM 0.33's --kv-cache-memory-bytes (CacheConfig.kv_cache_memory_bytes
    "ignores gpu_memory_utilization"): given where the site fixes the cache,
    on GPUs only; the dgx-spark profile fixes it (unified memory)."""
    fixed = serve_args(**settings(0, gpu=True, kv_cache_bytes=8 << 30))
    assert fixed[fixed.index("--kv-cache-memory-bytes") + 1] == "8589934592"
    assert "--gpu-memory-utilization" in fixed
    assert "--kv-cache-memory-bytes" not in serve_args(**settings(0, gpu=True))
    assert "--kv-cache-memory-bytes" not in serve_args(**settings(0, gpu=False, kv_cache_bytes=8 << 30))
    from ansible.module_utils.inventory import profiles  # noqa: PLC0415
    assert profiles.setting("dgx-spark", "inference_service_vllm_gpu_kvcache_gib") == 8
    assert profiles.setting("gpu-server", "inference_service_vllm_gpu_kvcache_gib") == 0  # discrete: vLLM sizes it
