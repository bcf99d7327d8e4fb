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

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu_facts import gpu_gate


def main() -> None:
    module = AnsibleModule(
        argument_spec={"facts": {"type": "dict", "required": True},
                       "cuda_required": {"type": "bool", "default": False}},
        supports_check_mode=True,
    )
    failures = gpu_gate(module.params["facts"], module.params["cuda_required"])
    if failures:
        module.fail_json(msg="preflight: " + "; ".join(failures) + "; nothing was changed", failures=failures)
    module.exit_json(changed=False, failures=[])


if __name__ == "__main__":
    main()
