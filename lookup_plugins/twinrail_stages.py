# -*- coding: utf-8 -*-
"""lookup('twinrail_stages', FIELD): the stage registry (module_utils/
stages/catalogue.py: site.yml's play files and their roles), one field of every
stage in stage order; preflight's settings loop reads the roles of the
stages that have settings tasks."""

from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.stages import catalogue as stages

DOCUMENTATION = r"""
name: twinrail_stages
author: twinrail developers
version_added: "0.1.0"
short_description: The stages of site.yml, from the stage registry
description:
  - Returns one field of every stage, in site.yml's order, read from site.yml, its play files and the roles they
    import (C(module_utils/stages/catalogue.py)).
options:
  _terms:
    description: >-
      The field: C(name) (the tag), C(role), C(prefix), C(play); C(settings_roles) the roles of the stages with
      settings tasks (preflight judges them), C(measured) the names of the stages twinrail_measure can force.
    required: true
"""

EXAMPLES = r"""
- name: Check the settings of each stage
  ansible.builtin.include_role:
    name: "{{ stage_role }}"
    tasks_from: settings
  loop: "{{ lookup('twinrail_stages', 'settings_roles', wantlist=True) }}"
  loop_control:
    loop_var: stage_role
"""

RETURN = r"""
_raw:
  description: The field of every stage, in stage order.
  type: list
"""

ROOT = Path(__file__).resolve().parent.parent


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        registry = stages.registry(ROOT)
        out = []
        for term in terms:
            if term == "settings_roles":
                out.extend(s["role"] for s in registry if s["settings"])
            elif term == "measured":
                out.extend(s["name"] for s in registry if s["measures"])
            elif term in ("name", "role", "prefix", "play"):
                out.extend(s[term] for s in registry)
            else:
                raise AnsibleError(f"twinrail_stages: unknown field {term!r}; expected name, role, prefix, play, "
                                   f"settings_roles or measured")
        return out
