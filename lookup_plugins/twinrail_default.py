# -*- coding: utf-8 -*-
"""lookup('twinrail_default', NAME): another role's default, read from
that role's defaults/main.yml (module_utils/stages/catalogue.py, role_default), so a
role that needs it (the guard's port in acceptance, bandwidth, monitoring)
never types a copy."""

from __future__ import annotations

from pathlib import Path

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.stages import catalogue as stages

DOCUMENTATION = r"""
name: twinrail_default
author: twinrail developers
version_added: "0.1.0"
short_description: Another role's default, from its defaults file
description:
  - Returns the default of each named setting as the owning role's C(defaults/main.yml) sets it (the role is the
    stage whose prefix the name carries). For a role whose defaults are not loaded in the play, as
    C({{ inference_service_guard_port | default(lookup('twinrail_default', 'inference_service_guard_port')) }}).
options:
  _terms:
    description: Setting names.
    required: true
"""

EXAMPLES = r"""
acceptance_guard_port: "{{ inference_service_guard_port | default(lookup('twinrail_default', 'inference_service_guard_port')) }}"
"""

RETURN = r"""
_raw:
  description: The defaults, in the order asked.
  type: list
"""

ROOT = Path(__file__).resolve().parent.parent


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        try:
            return [stages.role_default(ROOT, term) for term in terms]
        except stages.RegistryError as exc:
            raise AnsibleError(f"twinrail_default: {exc}") from exc
