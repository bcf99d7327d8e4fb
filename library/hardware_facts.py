#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The host's RDMA devices and ConnectX functions, for the hardware profile gate."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hardware_facts
short_description: Read the RDMA devices and ConnectX PCI functions of a host
description:
  - Lists /sys/class/infiniband and the PCI functions of vendor 0x15b3
    (NVIDIA networking; present before an RDMA driver is loaded), sorted.
  - Reads the CPU's flags, the Python it runs under and the C library's
    version, which the vLLM engine's wheels must fit. Reads only; changes nothing.
version_added: "0.1.0"
author: twinrail developers
options:
  sys_root:
    description: Where sysfs is mounted.
    type: str
    default: /sys
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Read the RDMA hardware
  hardware_facts:
  register: hardware
"""

RETURN = r"""
hardware:
  description: >-
    rdma_devices and connectx_functions, each a sorted list; cpu_flags; python (the node's python3, X.Y.Z) and glibc
    (X.Y, null where the C library is not glibc), which a vLLM lock's wheels must fit; nccl_settings.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.inventory.hardware_profile import read_host


def main():
    module = AnsibleModule(argument_spec={"sys_root": {"type": "str", "default": "/sys"}}, supports_check_mode=True)
    module.exit_json(changed=False, hardware=read_host(module.params["sys_root"]))


if __name__ == "__main__":
    main()
