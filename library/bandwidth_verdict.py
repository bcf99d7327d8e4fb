#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The bandwidth stage's verdict, from all its measurements at once."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bandwidth_verdict
short_description: Judge the bandwidth stage's measurements and build its report
description:
  - Per rail, the median of repeated BW averages against the rail's required
    figure (fraction x negotiated rate); all rails at once against the
    aggregate minimum; on RDMA rails, typical and p99.9 latency and the
    spread of repeated latency averages; and every error counter, which must
    not have moved. Compares with a kept baseline report and flags drops.
  - Returns the report and one sentence per failure (rail, hosts, measured,
    required). Writes nothing; fails when O(fail) is true and a gate missed.
version_added: "0.1.0"
author: twinrail developers
options:
  rails:
    description: Per rail measurement sets (rail, client, server, transport, required_gbps, runs, latency).
    type: list
    elements: dict
    required: true
  aggregates:
    description: All-rails-at-once measurement sets (client, server, rails, required_gbps, runs).
    type: list
    elements: dict
    default: []
  counters_before:
    description: Per host, per rail, error counters before.
    type: dict
    required: true
  counters_after:
    description: Per host, per rail, error counters after.
    type: dict
    required: true
  max_latency_spread_pct:
    description: Largest spread of repeated latency averages, in percent.
    type: float
    default: 1.0
  baseline:
    description: A previous report (bandwidth.json) to compare with.
    type: dict
  max_drop_pct:
    description: Largest drop below the baseline before it is flagged, in percent.
    type: float
    default: 10
  fail_on_drop:
    description: A drop below the baseline fails the gate (otherwise a warning).
    type: bool
    default: false
  fail:
    description: Fail the task when a gate missed.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Judge the measurements
  bandwidth_verdict:
    rails: "{{ __rails }}"
    aggregates: "{{ __aggregates }}"
    counters_before: "{{ __before }}"
    counters_after: "{{ __after }}"
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
report:
  description: Per rail and aggregate figures, counters moved, baseline drops, passed.
  returned: always
  type: dict
failures:
  description: One sentence per missed gate.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.rails.perftest import baseline_drops, verdict
from ansible.module_utils.modules.judge import run_module


ARGUMENT_SPEC = {
    "rails": {"type": "list", "elements": "dict", "required": True},
    "aggregates": {"type": "list", "elements": "dict", "default": []},
    "counters_before": {"type": "dict", "required": True},
    "counters_after": {"type": "dict", "required": True},
    "max_latency_spread_pct": {"type": "float", "default": 1.0},
    "baseline": {"type": "dict"},
    "max_drop_pct": {"type": "float", "default": 10},
    "fail_on_drop": {"type": "bool", "default": False},
    "fail": {"type": "bool", "default": True},
}


def judge(p: dict, warn) -> dict:
    report = verdict(p["rails"], p["aggregates"], p["counters_before"], p["counters_after"],
                     p["max_latency_spread_pct"])
    drops = baseline_drops(report, p["baseline"], p["max_drop_pct"])
    report["baseline_drops"] = drops
    failures = list(report["failures"])
    if drops and p["fail_on_drop"]:
        failures += [f"below baseline: {d}" for d in drops]
    elif drops:
        warn("bandwidth: below the kept baseline: " + "; ".join(drops))
    report["passed"] = not failures
    if failures and p["fail"]:
        return {"failed": True, "msg": "bandwidth: " + " | ".join(failures), "report": report, "failures": failures}
    return {"changed": False, "report": report, "failures": failures}


def main() -> None:
    run_module(ARGUMENT_SPEC, judge)


if __name__ == "__main__":
    main()
