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
    naming the node and both versions. Runs on the controller over what
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

from ansible.module_utils.gpu_facts import gpu_gate
from ansible.module_utils.judge import run_module


ARGUMENT_SPEC = {
    "facts": {"type": "dict", "required": True},
    "cuda_required": {"type": "bool", "default": False},
}


def judge(params: dict, warn) -> dict:  # pylint: disable=unused-argument
    failures = gpu_gate(params["facts"], params["cuda_required"])
    if failures:
        return {"failed": True, "msg": "preflight: " + "; ".join(failures) + "; nothing was changed",
                "failures": failures}
    return {"changed": False, "failures": []}


def main() -> None:
    run_module(ARGUMENT_SPEC, judge)


if __name__ == "__main__":
    main()
