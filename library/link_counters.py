#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Error counters of each rail: RDMA port counters and interface statistics."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: link_counters
short_description: Read the error counters of a node's rails
description:
  - For each rail, reads the interface's error statistics
    (/sys/class/net/IF/statistics) and, when the rail has an RDMA device,
    the port's error counters (counters/ and hw_counters/ under
    /sys/class/infiniband/DEV/ports/N). Read before and after a
    measurement, any increase is a loss.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment: [twinrail_rails]
"""

EXAMPLES = r"""
- name: Read the error counters
  link_counters:
    rails: "{{ twinrail_rails }}"
  register: __counters
"""

RETURN = r"""
counters:
  description: Per rail name, counter name to value.
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.rails.perftest import IB_ERROR_COUNTERS, NETDEV_ERROR_COUNTERS


def read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def rail_counters(root: str, rail: dict) -> dict:
    out = {}
    stats = os.path.join(root, "class", "net", rail["interface"], "statistics")
    for name in NETDEV_ERROR_COUNTERS:
        value = read_int(os.path.join(stats, name))
        if value is not None:
            out[f"netdev.{name}"] = value
    device = rail.get("rdma_device") or ""
    ports = os.path.join(root, "class", "infiniband", device, "ports")
    if device and os.path.isdir(ports):
        port = sorted(p for p in os.listdir(ports) if p.isdigit())[0]
        for sub in ("counters", "hw_counters"):
            for name in IB_ERROR_COUNTERS:
                value = read_int(os.path.join(ports, port, sub, name))
                if value is not None:
                    out[f"{sub}.{name}"] = value
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "rails": {"type": "list", "elements": "dict", "required": True},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    counters = {rail["name"]: rail_counters(module.params["sysfs_root"], rail)
                for rail in module.params["rails"]}
    module.exit_json(changed=False, counters=counters)


if __name__ == "__main__":
    main()
