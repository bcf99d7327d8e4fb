#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Validate a twinrail inventory on the controller (preflight gate)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: twinrail_inventory
short_description: Validate a twinrail inventory before any host is touched
description:
  - Checks the groups (exactly one C(master), 1 to 7 C(workers), all under
    C(cluster)) and every node's C(twinrail_*) variables (management address,
    rails (name, interface, address/prefix, RDMA device, MTU), thresholds,
    watermarks, booleans, paths and the model figures).
  - Across nodes, checks that every node has the same rails, that both ends
    of a rail share its subnet, that no two rails share a subnet, that no rail
    overlaps a management network and that every address is unique.
  - Runs on the controller and contacts no host, so an inventory of
    unreachable hosts still gets its input errors first. Changes nothing.
  - Every failure sentence names the host, the variable, what was expected
    and what was found.
version_added: "0.1.0"
author: twinrail developers
options:
  groups:
    description: The inventory's groups (the C(groups) magic variable).
    type: dict
    required: true
  nodes:
    description:
      - For every host of the C(cluster) group, its C(twinrail_*) variables.
    type: dict
    required: true
  names:
    description:
      - For every host of the C(cluster) group, the names of its variables (names only). Those with twinrail's
        prefixes (C(twinrail_) and each stage's from the stage registry, C(module_utils/stages/catalogue.py), e.g.
        C(inference_service_), C(monitoring_)) are checked; an unknown one is refused with the closest known name.
        Not checked when absent.
    type: dict
  roles_dir:
    description: >-
      Where the stages' roles are; the option names of their argument specs are the known settings, and the
      directory above holds site.yml, whose play files give the stages and their prefixes.
    type: path
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Validate the inventory
  twinrail_inventory:
    groups: "{{ groups }}"
    nodes: "{{ __preflight_nodes }}"
"""

RETURN = r"""
errors:
  description: One sentence per defect; empty when the inventory is sound.
  returned: always
  type: list
  elements: str
  sample: ["worker1: twinrail_rails[0].address: expected an IPv4 address with its prefix, such as 10.10.0.1/30, got '10.10.0.2' (str)"]
nodes:
  description: The hosts that were checked, master first.
  returned: always
  type: list
  elements: str
"""

import glob
import os

import yaml
from ansible.module_utils.inventory.rules import validate
from ansible.module_utils.modules.judge import run_module
from ansible.module_utils.stages.catalogue import prefixes


def stage_settings(roles_dir: str) -> set:
    """Every option of every entry point of every role's argument spec."""
    names = set()
    for path in sorted(glob.glob(os.path.join(roles_dir, "*", "meta", "argument_specs.yml"))):
        with open(path, encoding="utf-8") as handle:
            specs = (yaml.safe_load(handle) or {}).get("argument_specs") or {}
        for entry in specs.values():
            names.update((entry or {}).get("options") or {})
    return names


ARGUMENT_SPEC = {
    "groups": {"type": "dict", "required": True},
    "nodes": {"type": "dict", "required": True},
    "names": {"type": "dict"},
    "roles_dir": {"type": "path"},
}


def judge(p: dict, warn) -> dict:  # pylint: disable=unused-argument
    groups = p["groups"]
    settings = stage_settings(p["roles_dir"]) if p["roles_dir"] else set()
    # every stage's prefix, from the stage registry (site.yml and its play files)
    watched = prefixes(os.path.dirname(p["roles_dir"])) if p["roles_dir"] else ()
    errors = validate(groups, p["nodes"], p["names"], settings, watched)
    checked = list(groups.get("master") or []) + list(groups.get("workers") or [])
    if errors:
        return {"failed": True, "errors": errors, "nodes": checked,
                "msg": "preflight: the inventory has {0} defect(s); nothing was changed on "
                       "any host:\n{1}".format(len(errors), "\n".join(errors))}
    return {"changed": False, "errors": [], "nodes": checked}


def main() -> None:
    run_module(ARGUMENT_SPEC, judge)


if __name__ == "__main__":
    main()
