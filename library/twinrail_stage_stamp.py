#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Whether a stage has anything to do on a node: its stamp against now."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: twinrail_stage_stamp
short_description: Tell whether a stage is still converged on a node, or record that it is
description:
  - With O(mode=check) it reads the stage's stamp on the node
    (C(<directory>/<stage>.json)), takes a snapshot of the state the stage
    names in O(state) and returns RV(current) true when the stamp's inputs
    digest equals O(inputs) and no file, link, sysctl or unit moved since the
    stamp was written, with RV(reason) saying which held or what moved. A
    stamp that no longer holds is removed (outside check mode), so a run that
    fails half-way leaves none behind.
  - With O(mode=record) it writes the stamp with O(inputs) and the snapshot
    taken now; in check mode it writes nothing.
  - The stamp is the stages' bookkeeping, not a setting of the node, so the
    module never reports a change.
  - The action plugin of the same name computes O(inputs) on the controller
    (the role's files, the modules and plugins, every setting the role's
    argument spec names, for every node of the play, and O(extra)), and
    records nothing after a run that left some of the stage's tasks out
    (C(--tags) of a part, C(--skip-tags)).
version_added: "0.9.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  stage:
    description: The stage's name (the stamp's file name).
    type: str
    required: true
  mode:
    description: C(check) compares, C(record) writes.
    type: str
    choices: [check, record]
    default: check
  inputs:
    description: The digest of the stage's inputs (set by the action plugin).
    type: str
    required: true
  checked:
    description:
      - With O(mode=record), the registered result of the stage's check; its
        inputs, their parts and its O(state) are recorded (read by the action
        plugin only).
    type: dict
  state:
    description:
      - What the stage manages on this node. C(files) are paths or globs
        (directories are walked; files up to 4 MiB compared by content,
        larger ones by size and modification time; links by their target),
        C(sysctls) keys read from /proc/sys, C(units) systemd units (load,
        active and enable states), C(commands) read-only commands (each an
        argv list) whose exit status and output are live state no file holds.
    type: dict
    default: {}
  parts:
    description:
      - Each input's own digest, by the name a change of it is given (set by
        the action plugin), kept in the stamp so that a run names what changed.
    type: dict
    default: {}
  extra:
    description:
      - Values the role passes into the inputs digest (read by the action plugin only).
      - With O(mode=record) and O(checked), the values as the run left them, in
        place of the ones the check read (an input the stage itself provides, such
        as an artifact it cached on the controller, is recorded as it now is, so
        the next run does not read it as changed).
    type: raw
  applied_every_run:
    description:
      - Settings of the role that are not among the inputs, because the role
        applies them on every run whatever the stamp says (read by the action
        plugin only). A change of one re-runs only the tasks that apply it.
    type: list
    elements: str
    default: []
  tags:
    description: The stage's own tags (read by the action plugin only, to tell a partial run).
    type: list
    elements: str
    default: []
  directory:
    description: Where the stamps are kept on the node.
    type: path
    default: /var/lib/twinrail/stamps
"""

EXAMPLES = r"""
- name: Is the stage still converged here?
  twinrail_stage_stamp:
    stage: kernel
    tags: [kernel_sysctl, kernel_memlock]
    state:
      files: [/etc/sysctl.d/60-twinrail-kernel.conf]
      sysctls: [net.ipv4.tcp_mtu_probing]
      units: [swap.target]
    host: "{{ inventory_hostname }}"
  register: __kernel_tuning_stamp

- name: Record the finished stage
  twinrail_stage_stamp:
    stage: kernel
    mode: record
    tags: [kernel_sysctl, kernel_memlock]
    checked: "{{ __kernel_tuning_stamp }}"
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
current:
  description: The stamp holds (mode check); false for record.
  returned: always
  type: bool
reason:
  description: Why it holds or not, or what was recorded.
  returned: always
  type: str
since:
  description: When the stamp was written (UTC, ISO 8601), or null.
  returned: always
  type: str
recorded:
  description: A stamp was written (mode record).
  returned: always
  type: bool
"""

import datetime
import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.stage_stamp import STAMP_VERSION, snapshot, verdict


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "stage": {"type": "str", "required": True},
            "mode": {"type": "str", "choices": ["check", "record"], "default": "check"},
            "inputs": {"type": "str", "required": True},
            "state": {"type": "dict", "default": {}},
            "parts": {"type": "dict", "default": {}},
            "checked": {"type": "dict"},
            "extra": {"type": "raw"},
            "applied_every_run": {"type": "list", "elements": "str", "default": []},
            "tags": {"type": "list", "elements": "str", "default": []},
            "directory": {"type": "path", "default": "/var/lib/twinrail/stamps"},
            "host": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    path = os.path.join(params["directory"], f"{params['stage']}.json")
    where = f"{params['stage']}: {params['host']}"
    try:
        now = snapshot(params["state"], run_command=lambda argv: module.run_command(
            argv, environ_update={"LC_ALL": "C", "SYSTEMD_PAGER": ""}))
    except (RuntimeError, ValueError) as err:
        module.fail_json(msg=f"{where}: cannot read the stage's state: {err}")
    if params["mode"] == "record":
        if module.check_mode:
            module.exit_json(changed=False, current=False, recorded=False, since=None,
                             reason="check mode: no stamp written")
        stamped = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {"version": STAMP_VERSION, "stage": params["stage"], "inputs": params["inputs"],
                "parts": params["parts"], "time": stamped, "state": now}
        os.makedirs(params["directory"], mode=0o700, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=params["directory"], prefix=f".{params['stage']}.")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(body, out, sort_keys=True, indent=1)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
        module.exit_json(changed=False, current=False, recorded=True, since=stamped,
                         reason=f"stamp of {stamped} written")
    try:
        with open(path, encoding="utf-8") as handle:
            stamp = json.load(handle)
    except FileNotFoundError:
        stamp = None
    except (OSError, ValueError) as err:
        stamp = None
        module.warn(f"{where}: unreadable stamp {path} ({err}); the stage runs")
    current, reason = verdict(stamp, params["inputs"], now, params["parts"])
    if not current and stamp is not None and not module.check_mode:
        os.unlink(path)
    module.exit_json(changed=False, current=current, reason=reason, recorded=False,
                     since=(stamp or {}).get("time"))


if __name__ == "__main__":
    main()
