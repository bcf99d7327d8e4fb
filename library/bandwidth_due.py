#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Whether the bandwidth stage measures this run, and why (or why not)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bandwidth_due
short_description: Decide whether the kept bandwidth baseline is still valid
description:
  - Compares what the rails are now (each node's kernel; per rail its
    interface, address, RDMA device, MTU, negotiated rate, driver, firmware
    and PCIe link; the error counters) and the gate's settings with what
    the kept baseline report was measured on, and its age and verdict.
  - Returns C(measure) true with every reason when anything differs, the
    baseline is missing, failed or too old, or a measurement is asked for;
    otherwise false and a sentence naming the baseline's date.
  - Runs on the controller; reads the baseline report, changes nothing.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_measure
options:
  baseline:
    description: The kept report (reports/latest/bandwidth.json); absent means none is kept.
    type: path
  rails:
    description: Per host, its rails as in the inventory (twinrail_rails).
    type: dict
    required: true
  links:
    description: Per host, what rdma_link_facts returned (kernel and rails).
    type: dict
    required: true
  counters:
    description: Per host, per rail, the error counters read now (link_counters).
    type: dict
    required: true
  settings:
    description: The gate's settings the baseline was judged with; any change re-measures.
    type: dict
    required: true
  max_age:
    description: Seconds after which a baseline is measured again.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Decide whether to measure
  bandwidth_due:
    baseline: "{{ reports }}/latest/bandwidth.json"
    rails: "{{ rails_by_host }}"
    links: "{{ links_by_host }}"
    counters: "{{ counters_by_host }}"
    settings: {min_ratio: 0.9}
    max_age: 86400
    asked: "{{ ansible_run_tags == ['bandwidth'] }}"
  delegate_to: localhost
  run_once: true
  register: __due
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
  description: What this run's rails are, per host, to be kept with the next report.
  returned: always
  type: dict
msg:
  description: The decision in one sentence.
  returned: always
  type: str
"""

import time

from ansible.module_utils.stages.measure_due import MEASURE_OPTIONS, bandwidth_due, bandwidth_fingerprint
from ansible.module_utils.modules.judge import read_kept, run_module


ARGUMENT_SPEC = {
    "baseline": {"type": "path"},
    "rails": {"type": "dict", "required": True},
    "links": {"type": "dict", "required": True},
    "counters": {"type": "dict", "required": True},
    "settings": {"type": "dict", "required": True},
    "max_age": {"type": "int", "required": True},
    **MEASURE_OPTIONS,
}


def judge(p: dict, warn) -> dict:
    baseline = read_kept(p["baseline"], warn, "bandwidth: the kept baseline")
    fingerprint = bandwidth_fingerprint(p["rails"], p["links"])
    due = bandwidth_due(baseline, fingerprint, p["settings"], p["counters"], time.time(),
                        p["max_age"], p["mode"], p["asked"])
    return {"changed": False, "fingerprint": fingerprint, **due}


def main() -> None:
    run_module(ARGUMENT_SPEC, judge)


if __name__ == "__main__":
    main()
