#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Disk gate: is there room for the weights and the runtime?"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: twinrail_disk_space
short_description: Check free space for paths that may not exist yet
description:
  - Resolves each path to its nearest existing ancestor and reads the free
    space of its file system. Needs on the same file system add up.
  - Fails naming the host, the mount point, the free and the required space
    and what needs it. Changes nothing.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  needs:
    description: What must fit, one entry per directory.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path (need not exist).
        type: path
        required: true
      bytes:
        description: Bytes needed under that path.
        type: int
        required: true
      what:
        description: What needs the space, for the messages.
        type: str
        required: true
      held:
        description:
          - Paths that already hold part of what is needed (a weight set's
            revision synced before). Their apparent size, as
            C(du --apparent-size) counts it, is taken off O(needs[].bytes),
            down to zero; a path that is not there holds nothing.
        type: list
        elements: path
        default: []
"""

EXAMPLES = r"""
- name: Check free disk
  twinrail_disk_space:
    needs:
      - {path: /srv/twinrail/models, bytes: 429496729600, what: "2 copies of the weights"}
      - {path: /opt/twinrail, bytes: 4294967296, what: runtime}
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
filesystems:
  description: Per file system, its mount point, free, total and required bytes.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.node.disk_space import check, held_bytes


def less_held(module: AnsibleModule, need: dict) -> dict:
    """The need less what its `held` paths already hold (du's apparent size, summed)."""
    if not need["held"]:
        return need
    _, out, _ = module.run_command(["du", "-s", "-B1", "--apparent-size", "--total", "--", *need["held"]],
                                   environ_update={"LC_ALL": "C"})
    held = held_bytes(out)
    return dict(need, bytes=max(need["bytes"] - held, 0), held_bytes=held,
                what=f"{need['what']}, less the {held} bytes of them already there")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "needs": {"type": "list", "elements": "dict", "required": True, "options": {
                "path": {"type": "path", "required": True},
                "bytes": {"type": "int", "required": True},
                "what": {"type": "str", "required": True},
                "held": {"type": "list", "elements": "path", "default": []},
            }},
            "host": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    for need in module.params["needs"]:
        if not need["path"].startswith("/") or need["bytes"] < 0:
            module.fail_json(msg=f"preflight: needs: expected an absolute path and a "
                                 f"byte count >= 0, got {need!r}")
    needs = [less_held(module, need) for need in module.params["needs"]]
    result = check(needs, module.params["host"])
    if result["failures"]:
        module.fail_json(msg="preflight: " + "; ".join(result["failures"]), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
