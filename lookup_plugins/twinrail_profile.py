# -*- coding: utf-8 -*-
"""lookup('twinrail_profile', NAME): a setting of the hardware profile the
inventory names (`twinrail_profile`, default x86-connectx), read from the
project's profiles/<profile>.yml. Roles use it in their defaults, so the
inventory still overrides any single setting."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

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

PROFILES = Path(__file__).resolve().parent.parent / "profiles"
DEFAULT = "x86-connectx"


def names(root: Path = PROFILES) -> list[str]:
    return sorted(p.stem for p in root.glob("*.yml"))


@lru_cache(maxsize=None)
def load(name: str, root: Path = PROFILES) -> dict:
    """The profile `name`, checked: an `expect` block (architecture, gpu,
    rdma) and a `settings` mapping."""
    path = root / f"{name}.yml"
    if not isinstance(name, str) or not path.is_file() or "/" in name:
        raise ValueError(f"unknown profile {name!r}; expected one of {', '.join(names(root))} (profiles/<name>.yml)")
    data = yaml.safe_load(path.read_text())
    expect = data.get("expect") if isinstance(data, dict) else None
    if (not isinstance(expect, dict) or set(expect) != {"architecture", "gpu", "rdma"}
            or not isinstance(data.get("settings"), dict)):
        raise ValueError(f"profile {name!r} ({path}): expected `expect: {{architecture, gpu, rdma}}` and `settings:`")
    return data


def setting(profile: str, term: str, root: Path = PROFILES):
    data = load(profile, root)
    if term == "expect":
        return dict(data["expect"])
    if term not in data["settings"]:
        raise ValueError(f"profile {profile!r} has no setting {term!r}; it sets {', '.join(sorted(data['settings']))}")
    return data["settings"][term]


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
