# -*- coding: utf-8 -*-
"""lookup('twinrail_profile', NAME): a setting of the hardware profile the
inventory names (`twinrail_profile`, default x86-connectx), read from the
project's profiles/<profile>.yml. Roles use it in their defaults, so the
inventory still overrides any single setting."""

from __future__ import annotations

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
# the profiles' reader, under the names the tests use
from ansible.module_utils.inventory.profiles import DEFAULT, PROFILES, load, names, setting  # noqa: F401  pylint: disable=unused-import

DOCUMENTATION = r"""
name: twinrail_profile
author: twinrail developers
version_added: "0.1.0"
short_description: A setting of the inventory's hardware profile
description:
  - Returns the named settings (C(settings) of profiles/<twinrail_profile>.yml,
    or the whole C(expect) block for the term C(expect)) of the profile the
    host's C(twinrail_profile) names, C(x86-connectx) when it names none.
options:
  _terms:
    description: Setting names.
    required: true
"""

EXAMPLES = r"""
runtime_build_isa_flags: "{{ lookup('twinrail_profile', 'runtime_build_isa_flags') }}"
"""

RETURN = r"""
_raw:
  description: The settings' values, in the order asked.
  type: list
"""



class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        host = variables.get("inventory_hostname", "localhost")
        profile = variables.get("twinrail_profile", DEFAULT)
        if self._templar is not None:
            profile = self._templar.template(profile)
        try:
            return [setting(profile, term) for term in terms]
        except ValueError as err:
            raise AnsibleError(f"twinrail_profile: {host}: {err}") from None
