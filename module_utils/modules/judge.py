# -*- coding: utf-8 -*-
"""The one way a judge module runs: its spec, its judgement, its answer.

A judge reads nothing but its arguments (and, for some, a file on the
controller) and says pass or fail: the gates that weigh facts the nodes
already reported (gpu_gate, profile_gate, rdma_rail_gate, ...) and the
decisions whether to measure (bandwidth_due, acceptance_due). Each such
module states ARGUMENT_SPEC and `judge(params, warn) -> dict` (a result
with `failed` and `msg` when it refuses) and its main() is
`run_module(ARGUMENT_SPEC, judge)`.

The same two names let the controller run the judgement in its own
process (action_plugins/twinrail_judge.py), without shipping the module
to localhost and starting a Python for it: about half a second a task.
"""

from __future__ import annotations

import json
import os

from ansible.module_utils.basic import AnsibleModule


def run_module(argument_spec: dict, judge) -> None:
    """Run `judge` as a module: exit_json with its result, fail_json when it says failed."""
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    result = judge(module.params, module.warn)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


def read_kept(path: str | None, warn, said: str) -> dict | None:
    """A report kept on the controller (JSON), or None when there is none;
    one that cannot be read is None too, with a warning naming it
    (``said``: what it is, for the warning)."""
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        warn(f"{said} {path} is unreadable ({exc}): measuring")
        return None
