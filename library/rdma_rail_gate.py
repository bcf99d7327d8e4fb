#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The rail gate of the rdma stage, judged across all nodes at once."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rdma_rail_gate
short_description: Judge every rail from every node's link facts and pings
description:
  - A rail passes when every node's end is up (port ACTIVE / LinkUp where
    there is an RDMA device, carrier on the interface), negotiated at least
    the expected rate, and reaches every other end at full MTU with DF set.
  - Fails naming the rail and, per host, what was measured and what was
    required. With O(allow_single_rail) the run goes on when at least one
    rail is healthy, and the result says which rails it goes on with.
version_added: "0.1.0"
author: twinrail developers
options:
  links:
    description: Per host, per rail name, the state from rdma_link_facts.
    type: dict
    required: true
  pings:
    description: Per host, per rail name, per peer host, whether the ping passed.
    type: dict
    default: {}
  expected_rate_gbps:
    description: The line rate every rail must negotiate.
    type: float
    required: true
  allow_single_rail:
    description: Go on with the healthy rails when one is degraded.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Judge the rails
  rdma_rail_gate:
    links: {node-a: {rail0: {}}, node-b: {rail0: {}}}
    expected_rate_gbps: 200
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
failed_rails:
  description: Rails that failed on some node.
  returned: always
  type: list
  elements: str
healthy:
  description: Rails that passed on every node.
  returned: always
  type: list
  elements: str
failures:
  description: One sentence per failed rail.
  returned: always
  type: list
  elements: str
degraded:
  description: True when the run goes on without some rail (allow_single_rail).
  returned: always
  type: bool
"""

from ansible.module_utils.rails.rdma_link import rail_gate
from ansible.module_utils.modules.judge import run_module


ARGUMENT_SPEC = {
    "links": {"type": "dict", "required": True},
    "pings": {"type": "dict", "default": {}},
    "expected_rate_gbps": {"type": "float", "required": True},
    "allow_single_rail": {"type": "bool", "default": False},
}


def judge(params: dict, warn) -> dict:
    result = rail_gate(params["links"], params["expected_rate_gbps"], params["allow_single_rail"], params["pings"])
    if not result["passed"]:
        return {"failed": True, "msg": "rdma: " + " | ".join(result["failures"]), **result}
    if result["degraded"]:
        warn("rdma: going on with " + ", ".join(result["healthy"]) + " only: " + " | ".join(result["failures"]))
    return {"changed": False, **result}


def main() -> None:
    run_module(ARGUMENT_SPEC, judge)


if __name__ == "__main__":
    main()
