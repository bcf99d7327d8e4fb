#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Apply sysctl values and read every one back (kernel stage gate)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: twinrail_sysctl
short_description: Apply sysctl values live and verify them
description:
  - Reads each key from /proc/sys; when O(apply) is true and the live value
    differs, sets it with C(sysctl -w) (persistence is the drop-in file's
    job, written by a template). Then reads every key back and fails naming
    the host, each key, the expected and the actual value.
  - With O(apply=false) it only verifies (used for settings a container
    must not change, which are then only reported).
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  settings:
    description: Keys and their values (lists of numbers as one string).
    type: dict
    required: true
  apply:
    description: Set the values that differ; false only reads them.
    type: bool
    default: true
  verify:
    description: Fail when a value differs after applying.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Reads every key in check mode; reports the keys it would set.
  diff_mode:
    support: full
    details: Shows the keys it sets, as the kernel held them and as they will be.
"""

EXAMPLES = r"""
- name: Apply and verify the network sysctls
  twinrail_sysctl:
    settings: {net.core.rmem_max: 268435456, net.ipv4.tcp_rmem: "4096 1048576 268435456"}
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
before:
  description: Live values before applying (null for an absent key).
  returned: always
  type: dict
after:
  description: Live values after applying.
  returned: always
  type: dict
set:
  description: Keys that were (or in check mode would be) set.
  returned: always
  type: list
  elements: str
mismatches:
  description: One sentence per key that does not hold its value.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.modules.module_diff import diff, key_values
from ansible.module_utils.node.sysctl_values import mismatches, normalize, read


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "settings": {"type": "dict", "required": True},
            "apply": {"type": "bool", "default": True},
            "verify": {"type": "bool", "default": True},
            "host": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    settings = {k: normalize(v) for k, v in module.params["settings"].items()}
    before = {key: read(key) for key in settings}
    to_set = [k for k, v in settings.items() if before[k] != v and before[k] is not None]
    absent = [k for k in settings if before[k] is None]
    if absent:
        module.fail_json(msg=f"kernel: {module.params['host']}: sysctl key(s) not present "
                             f"on this kernel: {', '.join(absent)}", before=before)
    if module.params["apply"] and not module.check_mode:
        for key in to_set:
            rc, _out, err = module.run_command(["sysctl", "-w", f"{key}={settings[key]}"],
                                               environ_update={"LC_ALL": "C"})
            if rc != 0:
                module.fail_json(msg=f"kernel: {module.params['host']}: sysctl -w {key}: "
                                     f"{err.strip()}", before=before)
    after = {key: read(key) for key in settings}
    wrong = mismatches(settings, after) if not module.check_mode else []
    changed = bool(to_set) and module.params["apply"]
    result = {"changed": changed, "before": before, "after": after,
              "set": to_set if module.params["apply"] else [], "mismatches": wrong}
    if module._diff and changed:  # pylint: disable=protected-access
        # the keys it sets, as the kernel held them and as they will be
        result["diff"] = diff("/proc/sys", key_values({k: before[k] for k in to_set}),
                              key_values({k: settings[k] for k in to_set}))
    if wrong and module.params["verify"]:
        module.fail_json(msg=f"kernel: {module.params['host']}: sysctl not in effect: "
                             + "; ".join(wrong), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
