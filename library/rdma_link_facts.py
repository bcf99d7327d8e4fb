#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Link state of each rail of this node: netdev, RDMA port, rate, GIDs."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_link_facts
short_description: Read the link state of a node's rails
description:
  - For each rail, reads the interface from sysfs (operstate, carrier,
    speed, MTU) and, when the rail has an RDMA device, its first port
    (state, physical state, rate, link layer, GID table), the RoCE v2 GID
    index whose address is the rail's IPv4 address and, when
    C(ibv_devinfo) is installed, the active MTU.
  - Reads only; never fails for a down link (the gate judges).
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment: [twinrail_rails]
options:
  peers:
    description:
      - The rail gate's probes of this node's peers (the filter
        C(twinrail_rail_probes) makes them), one per rail and peer, all at
        once. Each runs C(ip -j route get ADDRESS from OWN) and a full-MTU
        ping with DF set (C(ping -M do -s MTU-28 -I OWN ADDRESS)); RV(reachability)
        says which passed. Read-only, so they run in check mode too.
    type: list
    elements: dict
    default: []
    suboptions:
      rail: {description: The rail's name., type: str, required: true}
      interface: {description: This node's interface of the rail., type: str, required: true}
      own: {description: This node's address on the rail., type: str, required: true}
      peer: {description: The peer's inventory name., type: str, required: true}
      address: {description: The peer's address on the rail., type: str, required: true}
      mtu: {description: The rail's MTU., type: int, required: true}
  ping_count:
    description: Pings per probe.
    type: int
    default: 3
"""

EXAMPLES = r"""
- name: Read the rails' link state
  rdma_link_facts:
    rails: "{{ twinrail_rails }}"
  register: __links
"""

RETURN = r"""
machine_id:
  description: The node's /etc/machine-id (a reinstalled or replaced box has a new one).
  returned: always
  type: str
kernel:
  description: The running kernel's release (what a bandwidth baseline is valid for).
  returned: always
  type: str
reachability:
  description: >-
    Per rail name, per peer, whether the full-MTU ping reached the peer and
    the route to it left by the rail's interface (empty without O(peers)).
  returned: always
  type: dict
rails:
  description: >-
    Per rail name, its state (address, up, problem, rate_gbps, netdev with driver and PCIe link, port with firmware,
    gid_index).
  returned: always
  type: dict
"""

import platform
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.rails.rdma_link import ParseError, parse_ibv_devinfo, probe_peers, rail_state, said


def devinfo_problem(rc: int, out: str, err: str, state: dict) -> str | None:
    """Fill the port's MTUs from `ibv_devinfo -v -d DEV`; the sentence
    when the tool failed or did not list the port."""
    device, number = state["rdma_device"], state["port"]["port"]
    if rc != 0:
        return f"ibv_devinfo -d {device} exited {rc}: {said(err or out)}"
    try:
        info = parse_ibv_devinfo(out).get(device)
    except ParseError as exc:
        return str(exc)
    port = (info or {}).get("ports", {}).get(number)
    if port is None:
        return f"ibv_devinfo does not list {device} port {number}"
    state["port"]["active_mtu"] = port.get("active_mtu")
    state["port"]["max_mtu"] = port.get("max_mtu")
    return None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "rails": {"type": "list", "elements": "dict", "required": True},
            "sysfs_root": {"type": "path", "default": "/sys"},
            "peers": {"type": "list", "elements": "dict", "default": [], "options": {
                "rail": {"type": "str", "required": True},
                "interface": {"type": "str", "required": True},
                "own": {"type": "str", "required": True},
                "peer": {"type": "str", "required": True},
                "address": {"type": "str", "required": True},
                "mtu": {"type": "int", "required": True},
            }},
            "ping_count": {"type": "int", "default": 3},
        },
        supports_check_mode=True,
    )
    states = {}
    devinfo = shutil.which("ibv_devinfo")
    for rail in module.params["rails"]:
        state = rail_state(module.params["sysfs_root"], rail)
        if devinfo and state.get("port"):
            rc, out, err = module.run_command([devinfo, "-v", "-d", state["rdma_device"]],
                                              environ_update={"LC_ALL": "C"})
            # a failed read is the rail's problem, quoting the tool, never an unknown MTU let pass
            state["port"]["devinfo_problem"] = devinfo_problem(rc, out, err, state)
        states[rail["name"]] = state
    try:
        with open("/etc/machine-id", encoding="ascii") as handle:
            machine_id = handle.read().strip() or None
    except OSError:
        machine_id = None
    reachability = probe_peers(module.params["peers"], lambda argv: module.run_command(argv, environ_update={"LC_ALL": "C"}),
                               module.params["ping_count"])
    module.exit_json(changed=False, rails=states, kernel=platform.release(), machine_id=machine_id,
                     reachability=reachability)


if __name__ == "__main__":
    main()
