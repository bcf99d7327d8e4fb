# -*- coding: utf-8 -*-
"""The vLLM engine's layout over the cluster: how many ranks, whether the
tensor and pipeline sizes fit the GPUs, heads and layers, and each node's
command line and environment (vLLM's own multi-node launch: the master
runs the OpenAI server and rank 0's workers, every other node a headless
process with --node-rank; the group meets at the master's rail0 address).

Why vLLM's launch and not Ray: it needs no daemon and no cluster of its
own to keep alive, the group is exactly the inventory's nodes in its
order, and its CPU platform runs it unchanged (over Ray the CPU platform
refuses until told which Ray resource to use)."""

from __future__ import annotations


def ranks_per_node(gpus: int) -> int:
    """vLLM runs one rank a GPU; a node without GPUs runs one."""
    return gpus if gpus > 0 else 1


def parallel_problems(*, tensor: int, pipeline: int, gpus: dict, heads: int | None, kv_heads: int | None,
                      layers: int | None, eager: bool = False) -> list[str]:
    """What is wrong with tensor x pipeline parallel on these nodes (host ->
    GPUs, in the group's order) for this model, each naming the setting,
    what it is and what it must be."""
    problems = []
    if tensor < 1 or pipeline < 1:
        return [f"inference_service_vllm_tensor_parallel and _pipeline_parallel: expected sizes of at least 1, "
                f"got {tensor} and {pipeline}"]
    per_node = {host: ranks_per_node(int(n or 0)) for host, n in gpus.items()}
    if len(set(per_node.values())) > 1:
        listing = ", ".join(f"{host} {n}" for host, n in per_node.items())
        problems.append(f"the nodes run different numbers of ranks (one a GPU, one a node without): {listing}; "
                        "vLLM's multi-node launch expects the same on every node")
    total = sum(per_node.values())
    if tensor * pipeline != total:
        problems.append(f"inference_service_vllm_tensor_parallel x inference_service_vllm_pipeline_parallel: "
                        f"expected {total} (the ranks: {len(per_node)} nodes x {max(per_node.values())}), "
                        f"got {tensor} x {pipeline} = {tensor * pipeline}")
    if tensor > 1 and not heads:
        problems.append(f"twinrail_model.heads: expected the model's attention heads (a whole number: tensor "
                        f"parallel {tensor} must divide them), got none")
    if heads and heads % tensor:
        problems.append(f"inference_service_vllm_tensor_parallel: expected a divisor of the model's {heads} "
                        f"attention heads (twinrail_model.heads), got {tensor}")
    if kv_heads and tensor > 1 and kv_heads % tensor and tensor % kv_heads:
        problems.append(f"inference_service_vllm_tensor_parallel: expected a divisor or a multiple of the model's "
                        f"{kv_heads} KV heads (twinrail_model.kv_heads), got {tensor}")
    if eager and pipeline > 1 and not any(int(n or 0) for n in gpus.values()):
        # vLLM's CPU runner allocates a later stage's receive buffers only in
        # its compile warm-up, which eager mode skips: the first request then
        # kills the group ("assert self.intermediate_tensors is not None")
        problems.append("inference_service_vllm_eager: expected false with pipeline parallel on nodes without "
                        f"GPUs (pipeline {pipeline}): vLLM's CPU engine gives a later stage no buffers in eager mode "
                        "and its first request fails")
    if layers and pipeline > layers:
        problems.append(f"inference_service_vllm_pipeline_parallel: expected at most the model's {layers} layers "
                        f"(twinrail_model.layers), got {pipeline}")
    return problems


def serve_args(*, model: str, name: str, dtype: str, max_model_len: int, max_num_seqs: int, tensor: int,
               pipeline: int, nodes: int, rank: int, master_addr: str, master_port: int, listen_host: str,
               listen_port: int, gpu: bool, gpu_memory_utilization: float, enforce_eager: bool,
               kv_cache_bytes: int = 0) -> list[str]:
    """One node's arguments to vLLM's serve: rank 0 serves the API on the
    loopback, every other node runs headless."""
    args = [model, "--served-model-name", name, "--dtype", dtype, "--max-model-len", str(max_model_len),
            "--max-num-seqs", str(max_num_seqs), "--tensor-parallel-size", str(tensor),
            "--pipeline-parallel-size", str(pipeline), "--distributed-executor-backend", "mp"]
    if nodes > 1:
        args += ["--nnodes", str(nodes), "--node-rank", str(rank), "--master-addr", master_addr,
                 "--master-port", str(master_port)]
    if gpu:
        args += ["--gpu-memory-utilization", f"{gpu_memory_utilization:g}"]
        if kv_cache_bytes:
            # a fixed cache instead of vLLM's sizing by profiling (which does
            # not hold to the utilization on unified memory)
            args += ["--kv-cache-memory-bytes", str(int(kv_cache_bytes))]
    if enforce_eager:
        args.append("--enforce-eager")
    if rank == 0:
        args += ["--host", listen_host, "--port", str(listen_port)]
    else:
        args.append("--headless")
    return args


def nccl_gid_env(host: str, links: dict) -> dict:
    """NCCL's RoCE GID for the rails' RDMA devices, from the node's own GID
    tables (links: rdma_link_facts' rails, each rail's rdma_device, address,
    its port's link_layer and gid_index, the RoCE v2 GID holding the rail's
    IPv4 address). One index for every RoCE rail: NCCL_IB_GID_INDEX; rails
    whose indexes differ (NCCL takes one index for all its devices): NCCL's
    own choice per device, held to RoCE v2 and IPv4 (NCCL 2.21 and later);
    InfiniBand ports need none. A RoCE rail whose table holds no RoCE v2
    GID of its address is refused (ValueError naming host, rail, device):
    NCCL would take another GID, RoCE v1 or the link-local one, and the
    peers would not reach each other."""
    roce = [link for _, link in sorted(links.items())
            if link.get("rdma_device") and (link.get("port") or {}).get("link_layer") == "Ethernet"]
    missing = [link for link in roce if link.get("gid_index") is None]
    if missing:
        raise ValueError("; ".join(
            f"{host}: {link['name']} ({link['rdma_device']}): no RoCE v2 GID holds its address "
            f"{str(link.get('address') or '').split('/')[0] or '(none)'} (the port's GID table, "
            f"/sys/class/infiniband/{link['rdma_device']}/ports/{(link.get('port') or {}).get('port', 1)}/gids): give "
            f"{link.get('interface')} the rail's address, or run the rdma stage on this node" for link in missing))
    indexes = sorted({int(link["gid_index"]) for link in roce})
    if len(indexes) == 1:
        return {"NCCL_IB_GID_INDEX": str(indexes[0])}
    if indexes:
        return {"NCCL_IB_ROCE_VERSION_NUM": "2", "NCCL_IB_ADDR_FAMILY": "AF_INET"}
    return {}


def serve_env(*, interface: str, address: str, gpu: bool, rdma_devices: list, kvcache_gib: int,
              threads_bind: str, host: str = "", links: dict | None = None) -> dict:
    """One node's environment: the group's traffic on rail0 (gloo, and
    NCCL on GPUs, over RDMA where the rails have devices, on every rail's
    device with the RoCE GID the node's tables give: nccl_gid_env), the CPU
    engine's KV cache and thread binding."""
    env = {"GLOO_SOCKET_IFNAME": interface, "VLLM_HOST_IP": address}
    if gpu:
        env["NCCL_SOCKET_IFNAME"] = interface
        devices = [d for d in rdma_devices if d]
        if devices:
            # "=": these devices exactly; without it NCCL matches prefixes and
            # mlx5_1 takes mlx5_10 too (tests/fixtures/nccl, NCCL 2.29.3)
            env["NCCL_IB_HCA"] = "=" + ",".join(devices)
            env.update(nccl_gid_env(host, links or {}))
        else:
            env["NCCL_IB_DISABLE"] = "1"
    else:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kvcache_gib)
        env["VLLM_CPU_OMP_THREADS_BIND"] = threads_bind
    return env
