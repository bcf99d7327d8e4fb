#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The group's collectives, measured on every node at once in the engine's own environment."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: collective_gate
short_description: Sweep an all_reduce and an all_gather over the group (NCCL on GPUs, gloo on CPUs) and judge it
description:
  - Runs a short script in the engine environment's Python on each node at
    once (the play's hosts run the task together), one rank a node, the
    master rank 0 at its rail0 address, with the engine's own environment
    (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, the RoCE GID) and NCCL_DEBUG=INFO.
  - Each operation is timed over a few sizes; the figures are nccl-tests'
    (algbw, bus bandwidth), each the slowest rank's time.
  - Judges what NCCL said it used (its network, every RDMA device, its
    bootstrap interface), the values every rank must see, and the best bus
    bandwidth of each operation against I(required).
  - Changes nothing. With I(fail) false it returns its problems for the
    controller to report before the run stops.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
  - twinrail_group
options:
  backend:
    description: C(nccl) on GPU nodes (the first GPU of each), C(gloo) on CPU nodes.
    type: str
    choices: [nccl, gloo]
    required: true
  environment:
    description: The engine's environment on this node, as its unit has it.
    type: dict
    required: true
  sizes_mib:
    description: The message sizes swept (MiB; for all_gather the whole gathered buffer).
    type: list
    elements: int
    default: [1, 32, 512]
  iterations:
    description: Timed runs of each operation and size (after one untimed).
    type: int
    default: 5
  devices:
    description: The RDMA devices NCCL must use, every rail's (empty on sockets or gloo).
    type: list
    elements: str
    default: []
  interface:
    description: The rail0 interface (NCCL's and gloo's socket interface).
    type: str
    required: true
  required:
    description: What collective_due computed, gbytes (GB/s bus bandwidth, or None) and its basis.
    type: dict
    required: true
  fail:
    description: Fail when anything is wrong (false returns the problems).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Measure the group's collectives
  collective_gate:
    python: /opt/twinrail/vllm/current/bin/python
    address: 198.19.0.1
    port: "{{ inference_service_collectives_port }}"
    world_size: 2
    rank: 1
    backend: nccl
    environment: {NCCL_SOCKET_IFNAME: enp1s0f0np0, NCCL_IB_HCA: "=rocep1s0f0,roceP2p1s0f0"}
    devices: [rocep1s0f0, roceP2p1s0f0]
    interface: enp1s0f0np0
    required: {gbytes: 12.5, basis: "0.5 x (rail0 100 + rail1 100) Gb/s / 8"}
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
ok:
  description: Whether nothing is wrong.
  returned: always
  type: bool
problems:
  description: What is wrong, one sentence each naming the node.
  returned: always
  type: list
  elements: str
rows:
  description: Each operation and size, time_us, algbw and busbw (GB/s), correct.
  returned: when the group formed
  type: list
  elements: dict
peaks:
  description: The best bus bandwidth of each operation, with its size.
  returned: when the group formed
  type: dict
used:
  description: What NCCL said it used, per host of its log (network, ib_devices, socket_interfaces, version).
  returned: under NCCL
  type: dict
msg:
  description: What the sweep reached, or what is wrong.
  returned: always
  type: str
"""

import json

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.rails.collective import GROUP_OPTIONS, SCRIPT, summary, verdict


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **GROUP_OPTIONS,
            "backend": {"type": "str", "choices": ["nccl", "gloo"], "required": True},
            "environment": {"type": "dict", "required": True},
            "sizes_mib": {"type": "list", "elements": "int", "default": [1, 32, 512]},
            "iterations": {"type": "int", "default": 5},
            "devices": {"type": "list", "elements": "str", "default": []},
            "interface": {"type": "str", "required": True},
            "required": {"type": "dict", "required": True},
            "fail": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    bad = [s for s in p["sizes_mib"] if s < 1] + ([p["iterations"]] if p["iterations"] < 1 else [])
    if bad or not p["sizes_mib"]:
        module.fail_json(msg=f"collectives: {p['host']}: inference_service_collectives_sizes_mib expects a list of "
                             f"sizes >= 1 MiB and inference_service_collectives_iterations >= 1, got "
                             f"{p['sizes_mib']!r} and {p['iterations']!r}")
    if module.check_mode:
        module.exit_json(changed=False, ok=True, problems=[],
                         msg=f"collectives: {p['host']}: check mode: the {p['backend']} sweep is not run")
    config = {"address": p["address"], "port": p["port"], "world": p["world_size"], "rank": p["rank"],
              "backend": p["backend"], "timeout": p["timeout"], "sizes": [s << 20 for s in p["sizes_mib"]],
              "iterations": p["iterations"], "warmup": 1}
    env = {k: str(v) for k, v in p["environment"].items()}
    env.update(LC_ALL="C", NCCL_DEBUG="INFO")
    rc, out, err = module.run_command([p["python"], "-c", SCRIPT, json.dumps(config)], environ_update=env)
    outcome = verdict(out, rc, err, host=p["host"], backend=p["backend"], world=p["world_size"],
                      devices=p["devices"], interface=p["interface"], need=p["required"])
    msg = "; ".join(outcome["problems"]) if outcome["problems"] else summary(p["host"], p["backend"], outcome,
                                                                            p["required"])
    if outcome["problems"] and p["fail"]:
        module.fail_json(changed=False, msg=msg, **outcome)
    module.exit_json(changed=False, msg=msg, **outcome)


if __name__ == "__main__":
    main()
