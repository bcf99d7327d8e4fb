#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Whether the engine's collectives are measured this run, and what they must reach."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: collective_due
short_description: Decide whether the group's collectives are measured, and the bus bandwidth they must reach
description:
  - Compares what the group is now (each node's engine environment, the
    runtime release, the bandwidth report the requirement comes from, the
    settings) with what the kept collectives report was measured on, and
    measures when the group starts (a node's engine not running, or
    restarted by this run), when anything differs, when the last report
    failed or none is kept, or when asked.
  - Computes the bus bandwidth required, a share of what the bandwidth
    stage measured on the rails the group's data crosses (every rail with
    an RDMA device under NCCL, rail0 otherwise).
  - Runs on the controller; reads the two reports, changes nothing.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_measure
options:
  report:
    description: The kept collectives report (reports/<site>/collectives.json); absent means none is kept.
    type: path
  bandwidth_report:
    description: The bandwidth stage's kept report (reports/<site>/latest/bandwidth.json).
    type: path
  hosts:
    description: Per node, the engine's environment (what the group is told).
    type: dict
    required: true
  runtime:
    description: The engine's runtime release on the nodes.
    type: str
    required: true
  rails:
    description: The master's rails as in the inventory (name, rdma_device).
    type: list
    elements: dict
    required: true
  backend:
    description: C(nccl) on GPU nodes, C(gloo) on CPU nodes.
    type: str
    choices: [nccl, gloo]
    required: true
  share:
    description: The share of the rails' measured bandwidth the bus bandwidth must reach.
    type: float
    required: true
  settings:
    description: The sweep's settings (sizes, iterations); any change measures again.
    type: dict
    required: true
  running:
    description: Per node, what C(systemctl is-active) says of its engine's unit (C(active) when it runs).
    type: dict
    required: true
  restart:
    description: Whether this run restarts the group (a node's configuration changed).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Decide whether to measure the collectives
  collective_due:
    report: "{{ reports }}/collectives.json"
    bandwidth_report: "{{ reports }}/latest/bandwidth.json"
    hosts: "{{ env_by_host }}"
    runtime: 4f1c2a9b7d3e
    rails: "{{ twinrail_rails }}"
    backend: nccl
    share: 0.5
    settings: {sizes_mib: [1, 32, 512], iterations: 5}
    running: {spark-a: active, spark-b: inactive}
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
measure:
  description: Whether to measure.
  returned: always
  type: bool
reasons:
  description: Why it measures, one sentence each (empty when it does not).
  returned: always
  type: list
  elements: str
fingerprint:
  description: What this run's group is, to be kept with the next report.
  returned: always
  type: dict
required:
  description: The bus bandwidth required (gbytes, GB/s, or None when no report measured the rails) and its basis in words.
  returned: always
  type: dict
rails:
  description: The names of the rails the group's data crosses.
  returned: always
  type: list
  elements: str
msg:
  description: The decision in one sentence.
  returned: always
  type: str
"""

from ansible.module_utils.rails import collective
from ansible.module_utils.stages.measure_due import MEASURE_OPTIONS, collective_due, starting_nodes
from ansible.module_utils.modules.judge import read_kept, run_module


ARGUMENT_SPEC = {
    "report": {"type": "path"},
    "bandwidth_report": {"type": "path"},
    "hosts": {"type": "dict", "required": True},
    "runtime": {"type": "str", "required": True},
    "rails": {"type": "list", "elements": "dict", "required": True},
    "backend": {"type": "str", "choices": ["nccl", "gloo"], "required": True},
    "share": {"type": "float", "required": True},
    "settings": {"type": "dict", "required": True},
    "running": {"type": "dict", "required": True},
    "restart": {"type": "bool", "default": False},
    **MEASURE_OPTIONS,
}


def judge(p: dict, warn) -> dict:
    if not 0 < p["share"] <= 1:
        return {"failed": True, "changed": False,
                "msg": f"inference_service_collectives_min_share: expected a fraction in (0, 1], got {p['share']!r}"}
    bandwidth = read_kept(p["bandwidth_report"], warn, "collectives: the kept bandwidth report")
    rails = [r["name"] for r in collective.rails_used(p["backend"], p["rails"])]
    fingerprint = {"hosts": p["hosts"], "runtime": p["runtime"], "backend": p["backend"], "rails": rails,
                   "bandwidth_run": (bandwidth or {}).get("run"),
                   "settings": dict(p["settings"], min_share=p["share"])}
    due = collective_due(read_kept(p["report"], warn, "collectives: the kept report"), fingerprint,
                         starting_nodes(p["running"], p["restart"]), p["mode"], p["asked"])
    return {"changed": False, "fingerprint": fingerprint, "rails": rails,
            "required": collective.required(bandwidth, rails, p["share"]), **due}


def main() -> None:
    run_module(ARGUMENT_SPEC, judge)


if __name__ == "__main__":
    main()
