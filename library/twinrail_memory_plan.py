#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Memory plan gate: does the model fit under every node's soft watermark?"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: twinrail_memory_plan
short_description: Check that the model and its KV cache fit on the nodes
description:
  - Computes params x bits/8 x overhead + KV cache (layers x kv heads x head
    dim x 2 x bytes x context x parallel sequences), splits it over the
    nodes and compares each node's share with its soft memory watermark.
  - When O(model.gguf) names a GGUF file on the machine running the module
    (the controller), the parameter count, bits per parameter, layers, KV
    heads and head dimension come from its metadata instead of the inventory.
  - Returns the arithmetic as lines; fails naming the host, the figure and
    the watermark when a node's share does not fit. Changes nothing.
version_added: "0.1.0"
author: twinrail developers
options:
  model:
    description:
      - The model (C(twinrail_model)) with C(name), C(params_b),
        C(bits_per_param), C(layers), C(kv_heads), C(head_dim), C(context),
        C(kv_type) (a llama.cpp KV cache type), C(parallel) and optionally C(gguf).
    type: dict
    required: true
  memory_mb:
    description: >-
      Each node's total memory in MiB, as the guard reads it (node_memory_facts: a container's cgroup limit, else
      MemTotal).
    type: dict
    required: true
  os_used_mb:
    description: >-
      What each node uses besides twinrail's service, in MiB (node_memory_facts' C(os_used): measured as the guard
      counts used). A node whose share plus this leaves less than O(margin_pct) below the soft watermark is
      warned about, with the figures.
    type: dict
    default: {}
  margin_pct:
    description: Points of a node's memory to keep free below the soft watermark, with what the OS uses.
    type: float
    default: 5
  soft_watermark_pct:
    description: Soft memory watermark in percent of a node's memory.
    type: float
    required: true
  hard_watermark_pct:
    description: Hard memory watermark in percent of a node's memory.
    type: float
    required: true
  overhead:
    description: Factor on the weights for copies, activations and allocations.
    type: float
    default: 1.2
  gpus:
    description: >-
      Per host, what gpu_facts returned as C(gpu) (none without nvidia-smi). With O(cuda), a node whose GPUs have
      their own memory (discrete) holds its share in them: it is divided over its GPUs in proportion to their
      memory and each part is checked against O(gpu_utilization) of that GPU's memory. Nodes with unified memory
      (GB10) or none are checked against their system memory.
    type: dict
    default: {}
  cuda:
    description: The runtime is built with CUDA (runtime_build_cuda), so the layers go to the GPUs.
    type: bool
    default: false
  gpu_utilization:
    description: The fraction of each GPU's memory the plan may use (twinrail_gpu_memory_utilization).
    type: float
    default: 0.9
  kv_cache_gib_per_node:
    description: >-
      GiB of KV cache the engine takes on each node whatever the sequences need (vLLM without GPUs,
      VLLM_CPU_KVCACHE_SPACE); counted instead of the sequences' cache. 0, the sequences' cache.
    type: int
    default: 0
  gguf_headers:
    description:
      - >-
        The headers of the model's GGUF files as C(gguf_header) cut them on
        the node that holds them (the master, when the served set's source
        is C(master)); the figures are read from them when C(model.gguf)
        names no file on the controller.
    type: list
    elements: dict
    default: []
  gguf_where:
    description: Where those headers were cut (node and path), for the messages.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
requirements:
  - gguf (Python package, only when O(model.gguf) is set)
"""

EXAMPLES = r"""
- name: Check the memory plan
  twinrail_memory_plan:
    model: "{{ twinrail_model }}"
    memory_mb: {master: 131072, worker1: 131072}
    soft_watermark_pct: 85
    hard_watermark_pct: 92
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
lines:
  description: The plan's arithmetic, one line per step and per node.
  returned: always
  type: list
  elements: str
source:
  description: Where the model figures came from, C(inventory) or the GGUF path.
  returned: always
  type: str
plan:
  description: Bytes of weights, KV cache, total, per-node share, per-node verdicts.
  returned: always
  type: dict
"""

import os

from ansible.module_utils.weights.gguf_figures import GGUFError, cached_model_figures, figures_from_headers
from ansible.module_utils.inventory.memory_plan import plan
from ansible.module_utils.modules.judge import run_module

FROM_GGUF = ("params_b", "bits_per_param", "layers", "kv_heads", "head_dim")


ARGUMENT_SPEC = {
    "model": {"type": "dict", "required": True},
    "memory_mb": {"type": "dict", "required": True},
    "soft_watermark_pct": {"type": "float", "required": True},
    "hard_watermark_pct": {"type": "float", "required": True},
    "overhead": {"type": "float", "default": 1.2},
    "os_used_mb": {"type": "dict", "default": {}},
    "margin_pct": {"type": "float", "default": 5},
    "gpus": {"type": "dict", "default": {}},
    "cuda": {"type": "bool", "default": False},
    "gpu_utilization": {"type": "float", "default": 0.9},
    "kv_cache_gib_per_node": {"type": "int", "default": 0},
    "gguf_headers": {"type": "list", "elements": "dict", "default": []},
    "gguf_where": {"type": "str", "default": ""},
}


def discrete_gpus(facts: dict | None) -> list[dict]:
    """The GPUs of one node's gpu_facts that have memory of their own."""
    return [{"index": gpu["index"], "name": gpu["name"], "memory_bytes": int(gpu["memory_total_mib"]) << 20}
            for gpu in (facts or {}).get("gpus") or [] if gpu.get("memory") == "discrete"]


def judge(params: dict, warn) -> dict:
    model = dict(params["model"])
    source = "inventory"
    gguf = model.get("gguf") or ""
    if gguf:
        if not os.path.isfile(gguf):
            return {"failed": True, "msg": f"preflight: twinrail_model.gguf: expected a GGUF file on "
                                           f"the controller, got {gguf!r}, which does not exist"}
        try:
            figures = cached_model_figures(gguf)
        except GGUFError as exc:
            return {"failed": True, "msg": f"preflight: twinrail_model.gguf: {exc}"}
        source = gguf
    elif params.get("gguf_headers"):
        try:
            figures = figures_from_headers(params["gguf_headers"], params.get("gguf_where") or "")
        except GGUFError as exc:
            return {"failed": True, "msg": f"preflight: {exc}"}
        source = f"{params['gguf_where']} ({figures['files']} file(s), their headers)"
    if source != "inventory":
        model.update({key: figures[key] for key in FROM_GGUF})
    memory = {}
    for host, mib in params["memory_mb"].items():
        try:
            memory[host] = int(mib) * (1 << 20)
        except (TypeError, ValueError):
            return {"failed": True, "msg": f"preflight: {host}: ansible_memtotal_mb: expected a "
                                           f"number of MiB, got {mib!r}"}
    os_used = {host: int(mib) * (1 << 20) for host, mib in (params["os_used_mb"] or {}).items() if mib is not None}
    utilization = params["gpu_utilization"]
    if not 0 < utilization <= 1:
        return {"failed": True, "msg": f"preflight: twinrail_gpu_memory_utilization: expected a fraction above 0 "
                                       f"and at most 1, got {utilization!r}"}
    gpus = ({host: discrete_gpus(facts) for host, facts in (params["gpus"] or {}).items()}
            if params["cuda"] else {})
    result = plan(model, memory, params["soft_watermark_pct"], params["hard_watermark_pct"], params["overhead"],
                  os_used, params["margin_pct"], gpus, utilization, int(params.get("kv_cache_gib_per_node") or 0) << 30)
    for warning in result.pop("warnings"):
        warn(f"preflight: {warning}")
    lines = [f"model figures from {source}"] + result.pop("lines")
    failures = result.pop("failures")
    if failures:
        return {"failed": True, "msg": "preflight: " + "; ".join(failures),
                "lines": lines, "failures": failures, "plan": result, "source": source}
    return {"changed": False, "lines": lines, "plan": result, "source": source, "model": model}


def main() -> None:
    run_module(ARGUMENT_SPEC, judge)


if __name__ == "__main__":
    main()
