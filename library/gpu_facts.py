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
    the card's widest) and its memory's health (ECC mode and errors,
    retired pages, remapped rows), for the per-GPU gates.
  - Asks C(nvidia-smi --query-gpu=index,compute_cap) for each GPU's
    compute capability (C(compute_cap), "90" for 9.0; none where the driver
    does not say), which preflight judges against the device code of the
    engine's wheels.
  - Reads the kernel's Xid lines about the GPUs since boot (C(journalctl
    -k -b), else C(dmesg)) as C(gpu.xids).
  - When nvidia-smi fails, says what its words mean (one GPU that fell off
    the bus, named by its bus id; no GPU the loaded driver drives; no
    driver; a driver upgraded without a reboot).
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
    The driver_version, cuda_version, nvidia_smi and gpus (index, name, bus_id, compute_cap, memory_*,
    utilization_pct), and
    detail (nvidia-smi -q: per GPU mig, memory_total_mib, pcie and health), xids (the kernel's Xid lines since
    boot: bus, xid, text, line); none without nvidia-smi.
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.gpu.facts import CAPS_QUERY, ParseError, compute_caps, has_table, parse_detail, parse_table
from ansible.module_utils.gpu.health import parse_xids, smi_failure


def kernel_log(module) -> str:
    """The kernel's messages since boot (journalctl -k -b, else dmesg); '' when neither can be read."""
    journalctl = module.get_bin_path("journalctl")
    if journalctl:
        rc, out, _ = module.run_command([journalctl, "-k", "-b", "--no-pager", "-o", "short-iso"],
                                        environ_update={"LC_ALL": "C"})
        if rc == 0:
            return out
    dmesg = module.get_bin_path("dmesg")
    if dmesg:
        rc, out, _ = module.run_command([dmesg], environ_update={"LC_ALL": "C"})
        if rc == 0:
            return out
    return ""


def main() -> None:
    module = AnsibleModule(argument_spec={"nvidia_smi": {"type": "str", "default": "nvidia-smi"}},
                           supports_check_mode=True)
    smi = module.get_bin_path(module.params["nvidia_smi"])
    if not smi:
        module.exit_json(changed=False, gpu=None)
    loaded = os.path.exists("/proc/driver/nvidia/version")
    rc, out, err = module.run_command([smi], environ_update={"LC_ALL": "C"})
    # a table with one GPU that did not answer still exits non-zero: the table is read, the GPU named
    if rc != 0 and not has_table(out):
        module.fail_json(msg=f"gpu: {smi_failure(rc, err + chr(10) + out, loaded)}")
    try:
        gpu = parse_table(out + "\n" + err)
    except ParseError as exc:
        module.fail_json(msg=f"gpu: cannot read nvidia-smi's output: {exc}")
    # a driver that cannot say (older than 510) leaves compute_cap None: the gate says it cannot judge
    rc, out, err = module.run_command([smi, f"--query-gpu={','.join(CAPS_QUERY)}", "--format=csv"],
                                      environ_update={"LC_ALL": "C"})
    try:
        caps = compute_caps(out) if rc == 0 else {}
    except ParseError:
        caps = {}
    for seen in gpu["gpus"]:
        seen["compute_cap"] = caps.get(seen.get("index"))
    rc, out, err = module.run_command([smi, "-q"], environ_update={"LC_ALL": "C"})
    if rc != 0 and "Attached GPUs" not in out:
        module.fail_json(msg=f"gpu: -q: {smi_failure(rc, err + chr(10) + out, loaded)}")
    try:
        gpu["detail"] = parse_detail(out)
    except ParseError as exc:
        module.fail_json(msg=f"gpu: cannot read nvidia-smi -q's output: {exc}")
    gpu["xids"] = parse_xids(kernel_log(module))
    module.exit_json(changed=False, gpu=gpu)


if __name__ == "__main__":
    main()
