# -*- coding: utf-8 -*-
"""lookup('twinrail_engine'): the engine this host serves with, chosen in
one place (module_utils/engines/registry.py); lookup('twinrail_engine', 'table'):
its table (roles/inference_service/engines/<engine>.yml)."""

from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleError
from ansible.plugins.loader import lookup_loader
from ansible.plugins.lookup import LookupBase

import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.engines import registry as engines

DOCUMENTATION = r"""
name: twinrail_engine
author: twinrail developers
version_added: "0.1.0"
short_description: The engine a host serves with, and its table
description:
  - Without a term, the engine of this host, chosen once a run by preflight (the fact C(twinrail_engine)), else
    from the inventory's C(inference_service_engine), else its hardware profile's; an engine that is not one of
    the engine folders (C(roles/inference_service/tasks/engines/<name>/) with C(engines/<name>.yml)) is an
    error naming the engines there are.
  - With the term C(table), that engine's table (units, templates, timeouts, runtime, what other stages read).
  - With the term C(problem), the sentence refusing the host's engine, or an empty string.
options:
  _terms:
    description: Nothing, C(table) or C(problem).
    required: false
"""

EXAMPLES = r"""
- name: Name the engine once for the run
  ansible.builtin.set_fact:
    twinrail_engine: "{{ lookup('twinrail_engine') }}"
"""

RETURN = r"""
_raw:
  description: The engine's name, or its table.
  type: raw
"""

ROOT = Path(__file__).resolve().parent.parent


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        host = variables.get("inventory_hostname", "localhost")
        value = variables.get("twinrail_engine")
        if value is None:
            value = variables.get("inference_service_engine")
        if value is None:
            profile = lookup_loader.get("twinrail_profile", loader=self._loader, templar=self._templar)
            value = profile.run(["inference_service_engine"], variables)[0]
        elif self._templar is not None:
            value = self._templar.template(value)
        try:
            name = engines.choose(value, host, ROOT)
            if not terms:
                return [name]
            if list(terms) == ["table"]:
                return [engines.table(name, ROOT)]
            if list(terms) == ["problem"]:
                return [""]
        except engines.EngineError as exc:
            if list(terms) == ["problem"]:
                return [str(exc)]
            raise AnsibleError(str(exc)) from None
        raise AnsibleError(f"twinrail_engine: expected no term, 'table' or 'problem', got {list(terms)}")
