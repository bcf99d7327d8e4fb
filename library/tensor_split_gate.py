#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Split gate: does every node hold the share of the layers the plan gave it?"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: tensor_split_gate
short_description: Check that llama-server placed every node's planned share of the model
description:
  - Reads the journal of llama-server's unit since it last started (its
    invocation id) and adds up, per node, the buffers llama.cpp's loader
    reports (C(model buffer size), C(KV buffer size), C(RS buffer size)),
    an RPC server's by its endpoint, the CPU's and local GPU's the master's.
  - Fails when a node's share of them is off its planned share by more
    than O(tolerance) of it plus one layer's worth, naming the node, the
    planned and the measured share; or when the loader failed (its error
    line); or when the process died, before or after the load (a CUDA
    error, a failed assertion; named with the fatal line, the GPU it names
    and what it means), or systemd or the kernel ended or OOM-killed a process of
    the unit; or when the unit was started in this run and its journal holds
    no buffer lines.
  - Passes with a warning when llama.cpp's compute buffers did not fit
    and it went on without pipeline parallelism (named, with the
    allocations it gave up). A server running since an earlier run whose journal
    no longer holds them (rotated) gets a warning. Reads only.
version_added: "0.1.0"
author: twinrail developers
options:
  plan:
    description: The split (the twinrail_tensor_split filter's result) with master, nodes, devices and layers.
    type: dict
    required: true
  tolerance:
    description: How far a node's share may be from its planned share, as a fraction of it (one layer's worth is added).
    type: float
    default: 0.1
  started:
    description: Whether the unit was (re)started in this run (its buffer lines must be in the journal).
    type: bool
    default: true
  deaths_only:
    description: >-
      Judge only whether the process died or failed to load (the fatal line, systemd's or the kernel's, the
      load's error), and pass otherwise: what the service stage asks when C(/health) does not answer, to name
      the cause instead of the journal's last lines.
    type: bool
    default: false
  unit:
    description: llama-server's unit.
    type: str
    default: twinrail-llama.service
  cache_dir:
    description: >-
      Where what the loader said at the running unit's start is kept, by its invocation id (a run that did not
      start the unit reads it there, not from the journal, which grows with every request the server answers).
    type: path
    default: /run/twinrail
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Gate the split
  tensor_split_gate:
    plan: "{{ __service_split }}"
    tolerance: 0.1
"""

RETURN = r"""
nodes:
  description: Per node, the planned share, the measured share and bytes.
  returned: always
  type: dict
lines:
  description: Per node, planned and measured, in words.
  returned: always
  type: list
  elements: str
total_bytes:
  description: All buffers the loader reported.
  returned: always
  type: int
buffers:
  description: The loader's buffers (device, kind, bytes) in log order.
  returned: always
  type: list
  elements: dict
degraded:
  description: llama.cpp's retry without pipeline parallelism (line, given_up), or null.
  returned: success
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engines.llamacpp.tensor_split import (MIB, death_message, gpu_split_problems, load_error_cause, measured_shares,
                                               parse_buffers, split_problems)
from ansible.module_utils.node.unit_journal import record_failures, since_start, unit_failures, unit_state


def _kept_path(cache_dir: str, unit: str) -> str:
    return os.path.join(cache_dir, f"{unit}.load.json")


def kept_load(cache_dir: str, unit: str, state: dict) -> dict | None:
    """What the loader's lines said at the running unit's start, as read
    by an earlier run of this run of the unit (the same invocation id, the
    unit active): a server that runs on is not read again from a journal
    that grows with every request. None when there is nothing to trust."""
    if state.get("ActiveState") != "active" or not state.get("InvocationID"):
        return None
    try:
        with open(_kept_path(cache_dir, unit), encoding="utf-8") as handle:
            kept = json.load(handle)
    except (OSError, ValueError):
        return None
    return kept.get("log") if kept.get("invocation") == state["InvocationID"] else None


def keep_load(cache_dir: str, unit: str, state: dict, log: dict) -> None:
    """Keep what the loader said for this invocation of an active unit (in
    /run: gone at the next boot, when the unit starts again anyway)."""
    if state.get("ActiveState") != "active" or not state.get("InvocationID"):
        return
    try:
        os.makedirs(cache_dir, mode=0o755, exist_ok=True)
        path = _kept_path(cache_dir, unit)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump({"invocation": state["InvocationID"], "log": log}, handle)
        os.replace(path + ".tmp", path)
    except OSError:
        pass  # a node that cannot keep it reads the journal next time


def main() -> None:
    module = AnsibleModule(argument_spec={"plan": {"type": "dict", "required": True},
                                          "tolerance": {"type": "float", "default": 0.1},
                                          "started": {"type": "bool", "default": True},
                                          "deaths_only": {"type": "bool", "default": False},
                                          "unit": {"type": "str", "default": "twinrail-llama.service"},
                                          "cache_dir": {"type": "path", "default": "/run/twinrail"}},
                           supports_check_mode=True)
    plan, unit = module.params["plan"], module.params["unit"]
    master = plan["master"]
    where = f"service: {master}: step 3 (master, cluster mode): the split of the layers"
    state = unit_state(module, unit)
    log = None if module.params["started"] else kept_load(module.params["cache_dir"], unit, state)
    crashed = []
    if log is None:
        journal = since_start(module, unit, state=state)
        if not journal.invocation:
            module.fail_json(msg=f"{where}: {unit} is not running (no invocation id): {journal.err.strip()[-200:]}")
        if journal.rc != 0:
            module.fail_json(msg=f"{where}: cannot read the journal of {unit}: "
                                 f"{(journal.err or journal.text).strip()[-300:]}")
        log = parse_buffers(journal.text)
        crashed = record_failures(journal.records) if journal.records else unit_failures(journal.text)
        if log["buffers"] and not (log["fatal"] or log["error"] or crashed):
            keep_load(module.params["cache_dir"], unit, state, log)
    systemd = f" (systemd: {crashed[-1]})" if crashed else ""
    if log["fatal"]:
        module.fail_json(msg=f"{where}: {death_message(log['fatal'], master)}{systemd}", fatal=log["fatal"],
                         buffers=log["buffers"])
    if crashed and not log["buffers"]:
        module.fail_json(msg=f"{where}: llama-server's process failed before it loaded: {'; '.join(crashed[-2:])}")
    if log["error"]:
        why = load_error_cause(log["error"])
        module.fail_json(msg=f"{where}: llama-server failed to load the model: {log['error']}"
                             + (f": {why}" if why else ""))
    if crashed:
        module.fail_json(msg=f"{where}: llama-server's process ended or was killed after it loaded the model: "
                             f"{'; '.join(crashed[-2:])}", buffers=log["buffers"])
    degraded = log["degraded"]
    if module.params["deaths_only"]:
        module.exit_json(changed=False, nodes={}, total_bytes=0, buffers=log["buffers"], degraded=degraded,
                         lines=["llama-server's journal names no death and no load error"])
    if degraded:
        module.warn(f"{where}: llama-server serves degraded: its compute buffers did not fit with pipeline "
                    f"parallelism, so it gave pipeline parallelism up (slower prompt processing across the "
                    f"devices): {degraded['line']}"
                    + (f" (after: {'; '.join(degraded['given_up'][-2:])})" if degraded["given_up"] else ""))
    if not log["buffers"]:
        if module.params["started"]:
            module.fail_json(msg=f"{where}: {unit} started in this run but its journal has no buffer lines "
                                 "(load_tensors: ... model buffer size); cannot tell where the layers went")
        module.warn(f"{where}: {unit} has run since an earlier run and its journal no longer holds the "
                    "loader's buffer lines (rotated): the split was checked when it started")
        module.exit_json(changed=False, nodes={}, total_bytes=0, buffers=[],
                         lines=["the loader's buffer lines are no longer in the journal (rotated)"])
    measured = measured_shares(log["buffers"], plan["devices"], master)
    nodes = {host: {"planned": planned, "measured": round(measured["nodes"].get(host, {}).get("share", 0.0), 4),
                    "bytes": measured["nodes"].get(host, {}).get("bytes", 0)}
             for host, planned in plan["nodes"].items()}
    lines = [f"{host}: planned {node['planned']:.1%}, measured {node['measured']:.1%} "
             f"({node['bytes'] / MIB:.1f} MiB of llama-server's buffers)" for host, node in nodes.items()]
    problems = (split_problems(plan, measured, module.params["tolerance"])
                + gpu_split_problems(plan, log["buffers"], module.params["tolerance"]))
    if problems:
        module.fail_json(msg=f"{where} is not the memory plan's: " + "; ".join(problems),
                         nodes=nodes, total_bytes=measured["total_bytes"], buffers=log["buffers"], lines=lines)
    module.exit_json(changed=False, nodes=nodes, total_bytes=measured["total_bytes"], buffers=log["buffers"],
                     lines=lines, degraded=degraded)


if __name__ == "__main__":
    main()
