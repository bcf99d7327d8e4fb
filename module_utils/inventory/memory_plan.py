# -*- coding: utf-8 -*-
"""The memory plan of a twinrail cluster (seed 004, preflight stage).

    weights  = params x bits/8 x overhead            (overhead 1.2 by default)
    kv cache = layers x kv_heads x head_dim x 2 (K and V) x bytes per element
               of kv_type x context x parallel sequences
    per node = (weights + kv cache) / nodes          (the runtime splits the
                                                      layers over all nodes)

Each node's share must fit under its soft watermark (a percentage of its
memory). A node with discrete GPUs (servers with several, consumer cards)
holds its share in their memory instead: the share is divided evenly over
its GPUs (as the split gives llama.cpp one equal proportion per GPU:
tensor_split.py), and each GPU's part must fit in its memory times the
GPU utilization (vLLM's --gpu-memory-utilization idea: what the CUDA
context, cuBLAS workspaces and compute buffers leave). The KV cache goes
where llama.cpp puts it: each layer's with the layer (llama_kv_cache
allocates per layer on the layer's device unless --no-kv-offload), so it
follows the same proportions. The plan returns its arithmetic as lines, so a failed gate shows
how the figure was reached. Pure Python: no Ansible import.
"""

from __future__ import annotations

GIB = 1 << 30

# The KV cache types llama.cpp accepts (--cache-type-k/-v, common/arg.cpp's
# kv_cache_types) and their bytes per element: ggml's block size over its
# element count (ggml-common.h: block_q8_0 is a 2-byte scale and 32 int8
# for 32 elements, 34/32; block_q4_0 a scale and 16 bytes of nibbles, 18/32).
KV_TYPES = {
    "f32": 4.0, "f16": 2.0, "bf16": 2.0,
    "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32,
}


def _gib(value: float) -> str:
    return f"{value / GIB:.2f} GiB"


def plan(model: dict, memory_bytes: dict, soft_pct: float, hard_pct: float,
         overhead: float, os_used_bytes: dict | None = None, margin_pct: float = 5,
         gpus: dict | None = None, gpu_utilization: float = 0.9, kv_per_node_bytes: int = 0) -> dict:
    """Return {'nodes': {host: {...}}, 'lines': [...], 'failures': [...],
    'warnings': [...]}. With ``os_used_bytes`` (what each node uses
    without twinrail's service, measured as the guard counts it), a
    warning for each node where the share plus that leaves less than
    ``margin_pct`` of its memory below the soft watermark: the guard would
    refuse requests there, though the plan fits.

    ``gpus``: host -> its discrete GPUs, [{'index', 'name', 'memory_bytes'}]
    (gpu_facts' figures); such a node's share, divided evenly, is checked GPU by GPU
    against ``gpu_utilization`` of each one's memory, and its system
    memory is not the limit. Each node's ``gpus`` in the result lists
    every GPU's part."""
    params = float(model["params_b"]) * 1e9
    bits = float(model["bits_per_param"])
    weights = params * bits / 8 * overhead
    kv_elem = KV_TYPES[model["kv_type"]]
    kv = (int(model["layers"]) * int(model["kv_heads"]) * int(model["head_dim"]) * 2
          * kv_elem * int(model["context"]) * int(model["parallel"]))
    count = len(memory_bytes)
    kv_line = (f"KV cache: {model['layers']} layers x {model['kv_heads']} kv heads x "
               f"{model['head_dim']} head dim x 2 (K,V) x {kv_elem:g} bytes ({model['kv_type']}) x "
               f"{model['context']} context x {model['parallel']} sequences = {_gib(kv)}")
    if kv_per_node_bytes:
        # an engine that takes a fixed cache a node whatever the sequences
        # need (vLLM on CPUs: VLLM_CPU_KVCACHE_SPACE): that is what it holds
        kv_line = (f"KV cache: the engine's own, {_gib(kv_per_node_bytes)} a node x {count} node(s) = "
                   f"{_gib(kv_per_node_bytes * count)} (the sequences need {_gib(kv)})")
        kv = kv_per_node_bytes * count
    total = weights + kv
    share = total / count if count else total
    lines = [
        f"model {model['name']}: {params / 1e9:.4g} B params x {bits:.4g} bits / 8 x "
        f"{overhead:g} overhead = {_gib(weights)} of weights",
        kv_line,
        f"total {_gib(total)} over {count} node(s) = {_gib(share)} per node",
    ]
    nodes, failures, warnings = {}, [], []
    for host, mem in memory_bytes.items():
        devices = (gpus or {}).get(host) or []
        if devices:
            nodes[host], problems = _gpu_node(host, share, devices, float(gpu_utilization), lines)
            failures.extend(problems)
            continue
        soft = mem * soft_pct / 100
        hard = mem * hard_pct / 100
        used_pct = 100 * share / mem if mem else float("inf")
        ok = share <= soft
        nodes[host] = {"memory_bytes": mem, "share_bytes": int(share),
                       "soft_bytes": int(soft), "hard_bytes": int(hard),
                       "share_pct": round(used_pct, 2), "fits": ok}
        lines.append(f"{host}: {_gib(share)} of {_gib(mem)} = {used_pct:.1f} % "
                     f"(soft watermark {soft_pct:g} % = {_gib(soft)}): "
                     f"{'fits' if ok else 'DOES NOT FIT'}")
        os_used = (os_used_bytes or {}).get(host)
        if os_used is not None and mem:
            nodes[host]["os_used_bytes"] = int(os_used)
            expected = share + os_used
            room_pct = soft_pct - 100 * expected / mem
            lines.append(f"{host}: with what the node uses besides the service ({_gib(os_used)}): "
                         f"{_gib(expected)} = {100 * expected / mem:.1f} %, {room_pct:.1f} points below the soft "
                         f"watermark")
            if ok and room_pct < margin_pct:
                warnings.append(
                    f"{host}: memory plan: the model's {_gib(share)} and what the node uses besides it "
                    f"({_gib(os_used)}, measured now) make {100 * expected / mem:.1f} % of {_gib(mem)}, "
                    f"{room_pct:.1f} points below the soft watermark {soft_pct:g} % (margin wanted "
                    f"{margin_pct:g}): the guard counts the same and refuses requests past it. Free memory on the "
                    f"node, lower the overhead or the context, or raise twinrail_memory_soft_watermark_pct")
        if not ok:
            failures.append(
                f"{host}: memory plan: the model needs {_gib(share)} on this node "
                f"({used_pct:.1f} % of {_gib(mem)}), required at most the soft "
                f"watermark {soft_pct:g} % = {_gib(soft)}")
    return {"file_bytes": int(params * bits / 8), "weights_bytes": int(weights), "kv_bytes": int(kv), "total_bytes": int(total),
            "share_bytes": int(share), "nodes": nodes, "lines": lines,
            "failures": failures, "warnings": warnings}


def _gpu_node(host: str, share: float, devices: list, utilization: float, lines: list) -> tuple[dict, list]:
    """A node's share over its discrete GPUs, evenly (the split's); each
    part against the GPU's memory times ``utilization``: the smallest GPU
    of a mixed node decides."""
    capacity = sum(int(gpu["memory_bytes"]) for gpu in devices)
    parts, problems = [], []
    lines.append(f"{host}: {_gib(share)} over {len(devices)} GPU(s) with {_gib(capacity)} of memory, "
                 f"each up to {utilization:.0%} of its own")
    for gpu in devices:
        size = int(gpu["memory_bytes"])
        part = share / len(devices)
        usable = size * utilization
        fits = part <= usable
        parts.append({"index": gpu["index"], "name": gpu.get("name", ""), "memory_bytes": size,
                      "share_bytes": int(part), "usable_bytes": int(usable),
                      "share_pct": round(100 * part / size, 2) if size else None, "fits": fits})
        label = f"{host}: GPU {gpu['index']} ({gpu.get('name') or 'GPU'})"
        lines.append(f"{label}: {_gib(part)} of {_gib(size)} = {100 * part / size if size else float('inf'):.1f} % "
                     f"(usable {utilization:.0%} = {_gib(usable)}): {'fits' if fits else 'DOES NOT FIT'}")
        if not fits:
            problems.append(f"{label}: memory plan: its part of the model is {_gib(part)}, required at most "
                            f"{utilization:.0%} of its {_gib(size)} = {_gib(usable)} (twinrail_gpu_memory_utilization); "
                            f"more nodes or GPUs, fewer bits, a shorter context")
    node = {"memory_bytes": capacity, "share_bytes": int(share), "gpus": parts,
            "share_pct": round(100 * share / capacity, 2) if capacity else None,
            "fits": all(part["fits"] for part in parts)}
    return node, problems
