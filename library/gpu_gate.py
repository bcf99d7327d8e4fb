#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The GPU gate across the nodes: a GPU where CUDA is on, one driver and CUDA everywhere."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_gate
short_description: Gate the nodes' GPUs against each other and the build
description:
  - Fails when the runtime is built with CUDA and a node has no NVIDIA GPU,
    or when the nodes do not all run the same driver and CUDA version,
    naming the node and both versions.
  - Per GPU, from C(nvidia-smi -q) (gpu_facts' C(detail)), when O(expected)
    names the host, as many GPUs as C(count), no MIG unless C(mig), and each
    PCIe link at the card's maximum (its width, or at least C(min_width);
    the generation the link can reach against the card's), naming node and
    GPU.
  - Per GPU, its health (gpu_health). Refused when nvidia-smi cannot read
    its ECC state, with uncorrectable ECC errors since the driver loaded,
    pages pending retirement, a row remap pending or failed, or an Xid in
    the kernel log since boot that needs a reset (48, 79, 95, ...), naming
    node, GPU index, bus id and the counter; lifetime errors and an
    application's Xids are warnings. Runs on the controller over what
    gpu_facts read on every node; changes nothing.
version_added: "0.1.0"
author: twinrail developers
options:
  facts:
    description: Per host, what gpu_facts returned as C(gpu) (none without nvidia-smi).
    type: dict
    required: true
  cuda_required:
    description: The runtime is built with CUDA (runtime_build_cuda).
    type: bool
    default: false
  expected:
    description: >-
      Per host, what its GPUs must be: C(count) (twinrail_gpu_count: how many GPUs nvidia-smi must list, none to
      take what it finds), C(mig) (twinrail_gpu_mig: MIG allowed) and C(min_width) (twinrail_gpu_pcie_min_width:
      the narrowest PCIe link accepted, none for the card's own width).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Gate the GPUs
  gpu_gate:
    facts: "{{ gpu_by_host }}"
    cuda_required: true
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
failures:
  description: One sentence per problem (empty when the gate passes).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.gpu.facts import gpu_gate, gpu_node_problems, gpu_settings_problems
from ansible.module_utils.gpu.health import node_health
from ansible.module_utils.stages.settings import truthy
from ansible.module_utils.modules.judge import run_module


ARGUMENT_SPEC = {
    "facts": {"type": "dict", "required": True},
    "cuda_required": {"type": "bool", "default": False},
    "expected": {"type": "dict", "default": {}},
}


def judge(params: dict, warn) -> dict:
    expected = params["expected"] or {}
    refused = [problem for host in sorted(expected) for problem in gpu_settings_problems(host, expected[host])]
    if refused:
        return {"failed": True, "msg": "preflight: " + "; ".join(refused) + "; nothing was changed",
                "failures": refused}
    failures = gpu_gate(params["facts"], params["cuda_required"])
    for host in sorted(params["facts"]):
        facts = params["facts"][host]
        # the GPUs one by one where the build uses them: -q's reading, the table's where -q says less
        if facts and host in expected and params["cuda_required"]:
            want = expected[host]
            failures.extend(f"{host}: {problem}" for problem in (facts.get("detail") or {}).get("problems") or [])
            failures.extend(gpu_node_problems(host, facts, want.get("count"), truthy(want.get("mig")),
                                              want.get("min_width")))
        if facts:
            # a sick GPU is never offered to the split; where the build does
            # not use the GPUs, their health is only said
            refused, warned = node_health(host, facts)
            if params["cuda_required"]:
                failures.extend(refused)
            else:
                warned = refused + warned
            for sentence in warned:
                warn(f"preflight: {sentence}")
    if failures:
        return {"failed": True, "msg": "preflight: " + "; ".join(failures) + "; nothing was changed",
                "failures": failures}
    return {"changed": False, "failures": []}


def main() -> None:
    run_module(ARGUMENT_SPEC, judge)


if __name__ == "__main__":
    main()
