#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Whether the acceptance stage measures this run, and why (or why not)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: acceptance_due
short_description: Decide whether the last acceptance verdict is still valid
description:
  - Compares what each node serves now (its machine-id, runtime release,
    guard, weights and service configuration, from the deployment record
    read in this run) and the stage's settings with what the newest
    acceptance report under O(reports_dir) was measured on, and its verdict.
  - Returns C(measure) true with every reason when anything differs, no
    report is kept, the last one failed, or a measurement is asked for;
    otherwise false and a sentence naming the verdict's date.
  - Runs on the controller; reads the reports, changes nothing.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_measure
options:
  reports_dir:
    description: Directory of the runs' reports (<run>/acceptance.json).
    type: path
    required: true
  records:
    description: Per host, its deployment record as read in this run (none where it was not read).
    type: dict
    required: true
  settings:
    description: The stage's settings the verdict was reached with; any change re-measures.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Decide whether to measure
  acceptance_due:
    reports_dir: "{{ reports }}"
    records: "{{ records_by_host }}"
    settings: {concurrency: 4}
    asked: "{{ ansible_run_tags == ['acceptance'] }}"
  delegate_to: localhost
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
deployed:
  description: What each node serves, to be kept with the next report.
  returned: always
  type: dict
msg:
  description: The decision in one sentence.
  returned: always
  type: str
"""

import glob
import json
import os

from ansible.module_utils.stages.measure_due import MEASURE_OPTIONS, acceptance_due
from ansible.module_utils.modules.judge import run_module


def newest_report(reports_dir: str) -> tuple[str | None, dict | None]:
    """The newest <run>/acceptance.json (runs are named by their UTC time)."""
    found = sorted(path for path in glob.glob(os.path.join(reports_dir, "*", "acceptance.json"))
                   if not os.path.islink(os.path.dirname(path)))
    if not found:
        return None, None
    with open(found[-1], encoding="utf-8") as handle:
        return found[-1], json.load(handle)


ARGUMENT_SPEC = {
    "reports_dir": {"type": "path", "required": True},
    "records": {"type": "dict", "required": True},
    "settings": {"type": "dict", "required": True},
    **MEASURE_OPTIONS,
}


def judge(p: dict, warn) -> dict:
    try:
        path, last = newest_report(p["reports_dir"])
    except (OSError, ValueError) as exc:
        warn(f"acceptance: the newest report under {p['reports_dir']} is unreadable ({exc}): measuring")
        path, last = None, None
    due = acceptance_due(last, p["records"], p["settings"], p["mode"], p["asked"])
    return {"changed": False, "report": path, **due}


def main() -> None:
    run_module(ARGUMENT_SPEC, judge)


if __name__ == "__main__":
    main()
