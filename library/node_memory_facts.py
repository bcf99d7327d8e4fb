#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read a node's memory as the guard reads it, and what the OS uses of it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_memory_facts
short_description: Read a node's memory as the guard does, and the OS's own use of it
description:
  - >-
    Reads the node's memory with the guard's own function
    (C(twinrail.guard.memory.node_memory); module_utils/node/memory.py is a
    link to it). The total is the smallest cgroup limit above this process
    (a container's) or C(/proc/meminfo)'s MemTotal, and C(used) is what
    the guard's watermarks count (MemTotal - MemAvailable, or the cgroup's
    usage less its inactive page cache). The memory plan and the guard so
    hold the node to one definition of used.
  - >-
    C(service) is what twinrail's own units hold now (systemd's
    MemoryCurrent of each - llama-server, the RPC servers, the guard and its
    agent), C(os_used) the rest of C(used), what the node needs whatever
    twinrail serves. Reads only.
version_added: "0.1.0"
author: twinrail developers
options:
  units_pattern:
    description: The units whose memory is the service's (a pattern systemctl show takes).
    type: str
    default: twinrail-*.service
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Read the node's memory
  node_memory_facts:
  register: __memory
"""

RETURN = r"""
memory:
  description: >-
    total, used, os_used and service (bytes), total_mb and os_used_mb (MiB), percent (used of total), source and
    units (the service's).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.node.memory import node_memory


def service_bytes(text: str) -> tuple[int, list[str]]:
    """What the units of `systemctl show -p Id -p MemoryCurrent UNITS`
    hold now (bytes), and the units counted; "[not set]" (no accounting,
    a unit not running) counts nothing."""
    total, units = 0, []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        value = fields.get("MemoryCurrent", "")
        if value.isdigit() and int(value) < 1 << 62:  # systemd prints 2^64-1 for "unknown" on some versions
            total += int(value)
            units.append(fields.get("Id", "?"))
    return total, units


def main() -> None:
    module = AnsibleModule(argument_spec={"units_pattern": {"type": "str", "default": "twinrail-*.service"}},
                           supports_check_mode=True)
    try:
        memory = node_memory()
    except (OSError, KeyError, ValueError) as exc:
        module.fail_json(msg=f"cannot read the node's memory (/proc/meminfo, cgroup): {exc}")
    systemctl = module.get_bin_path("systemctl")
    service, units = 0, []
    if systemctl:
        rc, out, err = module.run_command([systemctl, "show", "-p", "Id", "-p", "MemoryCurrent",
                                           module.params["units_pattern"]], environ_update={"LC_ALL": "C"})
        if rc != 0:
            module.fail_json(msg=f"cannot read the service's memory (systemctl show): {(err or out).strip()[-300:]}")
        service, units = service_bytes(out)
    memory.update(service=service, os_used=max(0, memory["used"] - service), units=units)
    memory.update(total_mb=memory["total"] >> 20, os_used_mb=memory["os_used"] >> 20)
    module.exit_json(changed=False, memory=memory)


if __name__ == "__main__":
    main()
