#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The monitoring stage's gate: every target scraped up, every rule group loaded."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: monitoring_gate
short_description: Wait until Prometheus scrapes every expected target up and has loaded the rule groups
description:
  - Asks Prometheus's HTTP API (C(/api/v1/targets), C(/api/v1/rules)) on the
    master's loopback until each job has the expected number of active
    targets, all of them up, and every named rule group is loaded, or the
    timeout passes; then fails naming each target that is not up (job,
    node, address, Prometheus's last scrape error) and each missing group.
  - Reads only.
version_added: "0.1.0"
author: twinrail developers
options:
  url:
    description: Prometheus's base URL (the API is under C(/api/v1/)).
    type: str
    required: true
  jobs:
    description: Job name to the number of targets it must have, all up.
    type: dict
    required: true
  rule_groups:
    description: Rule groups that must be loaded.
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds to wait for it all.
    type: int
    default: 90
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Wait for every target to be scraped up
  monitoring_gate:
    url: "http://127.0.0.1:{{ monitoring_prometheus_port }}"
    jobs: {prometheus: 1, guard: 1, node: 2}
    rule_groups: [twinrail-alerts]
"""

RETURN = r"""
targets:
  description: Every active target, sorted by job and node, with job, node, instance, health and last_error.
  returned: always
  type: list
  elements: dict
problems:
  description: What is not as required, in words (empty when the gate passed).
  returned: always
  type: list
  elements: str
waited:
  description: Seconds waited.
  returned: always
  type: float
"""

import json
import time
import urllib.request

from ansible.module_utils.basic import AnsibleModule


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def judge(targets_answer: dict, rules_answer: dict, jobs: dict, groups: list[str]) -> tuple[list[dict], list[str]]:
    """(the targets, the problems) from the API's two answers."""
    targets = sorted(({"job": t["labels"].get("job", t.get("scrapePool")), "node": t["labels"].get("node", ""),
                       "instance": t["labels"].get("instance", t.get("scrapeUrl")), "health": t.get("health"),
                       "last_error": t.get("lastError", "")}
                      for t in targets_answer["data"]["activeTargets"]),
                     key=lambda t: (t["job"], t["node"], t["instance"]))
    problems = []
    for job, count in sorted(jobs.items()):
        mine = [t for t in targets if t["job"] == job]
        if len(mine) != int(count):
            problems.append(f"job {job}: {len(mine)} targets, expected {count}")
        for target in mine:
            if target["health"] != "up":
                problems.append(f"job {job}: {target['node']} {target['instance']} is {target['health']}"
                                f"{': ' + target['last_error'] if target['last_error'] else ''}")
    loaded = {g["name"] for g in rules_answer["data"]["groups"]}
    problems += [f"rule group {g} is not loaded (loaded: {', '.join(sorted(loaded)) or 'none'})"
                 for g in groups if g not in loaded]
    return targets, problems


def main() -> None:
    module = AnsibleModule(argument_spec={"url": {"type": "str", "required": True},
                                          "jobs": {"type": "dict", "required": True},
                                          "rule_groups": {"type": "list", "elements": "str", "default": []},
                                          "timeout": {"type": "int", "default": 90}},
                           supports_check_mode=True)
    p = module.params
    base = p["url"].rstrip("/")
    started = time.monotonic()
    targets, problems = [], ["Prometheus has not answered"]
    while True:
        try:
            targets, problems = judge(_get(f"{base}/api/v1/targets?state=active"), _get(f"{base}/api/v1/rules"),
                                      p["jobs"], p["rule_groups"])
        except (OSError, ValueError, KeyError) as exc:
            targets, problems = [], [f"Prometheus at {base} does not answer its API: {exc}"]
        if not problems or time.monotonic() - started > p["timeout"]:
            break
        time.sleep(2)
    waited = round(time.monotonic() - started, 1)
    if problems:
        module.fail_json(msg=f"monitoring: after {waited} s: " + "; ".join(problems), targets=targets,
                         problems=problems, waited=waited)
    module.exit_json(changed=False, targets=targets, problems=[], waited=waited)


if __name__ == "__main__":
    main()
