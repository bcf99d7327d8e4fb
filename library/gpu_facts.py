#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read a node's NVIDIA GPUs with nvidia-smi (none where it is not installed)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Read a node's NVIDIA GPUs, driver and CUDA versions
description:
  - Runs C(nvidia-smi) (its table, whose header alone holds the driver and
    CUDA versions) and returns the versions and, per GPU, its name, bus id,
    persistence mode, memory (none where it is unified with the CPU's, as
    on GB10, where the memory figures come from /proc/meminfo) and use.
  - Also runs C(nvidia-smi -q) and returns it read as C(gpu.detail), per
    GPU its MIG mode, framebuffer memory and PCIe link (the generation the
    link can reach against the card's own, the width it trained at against
    the card's widest), for the per-GPU gates.
  - Returns C(gpu) none when nvidia-smi is not installed. Reads only.
version_added: "0.1.0"
author: twinrail developers
options:
  nvidia_smi:
    description: The nvidia-smi to run (a name looked up in PATH and the usual sbin directories, or a path).
    type: str
    default: nvidia-smi
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Read the GPUs
  gpu_facts:
  register: __gpu
"""

RETURN = r"""
gpu:
  description: >-
    The driver_version, cuda_version, nvidia_smi and gpus (index, name, bus_id, memory_*, utilization_pct), and
    detail (nvidia-smi -q: per GPU mig, memory_total_mib and pcie); none without nvidia-smi.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu_facts import ParseError, parse_detail, parse_table


def main() -> None:
    module = AnsibleModule(argument_spec={"nvidia_smi": {"type": "str", "default": "nvidia-smi"}},
                           supports_check_mode=True)
    smi = module.get_bin_path(module.params["nvidia_smi"])
    if not smi:
        module.exit_json(changed=False, gpu=None)
    rc, out, err = module.run_command([smi], environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"gpu: nvidia-smi exited {rc}: {(err or out).strip()[-300:]} (is the driver loaded?)")
    try:
        gpu = parse_table(out)
    except ParseError as exc:
        module.fail_json(msg=f"gpu: cannot read nvidia-smi's output: {exc}")
    rc, out, err = module.run_command([smi, "-q"], environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"gpu: nvidia-smi -q exited {rc}: {(err or out).strip()[-300:]}")
    try:
        gpu["detail"] = parse_detail(out)
    except ParseError as exc:
        module.fail_json(msg=f"gpu: cannot read nvidia-smi -q's output: {exc}")
    module.exit_json(changed=False, gpu=gpu)


if __name__ == "__main__":
    main()
