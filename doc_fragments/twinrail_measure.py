# -*- coding: utf-8 -*-
"""Documentation shared by the modules that decide whether a stage measures."""


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """The `mode` and `asked` options and full check mode support."""

    DOCUMENTATION = r"""
options:
  mode:
    description: C(auto) measures when something changed, C(always) every run.
    type: str
    choices: [auto, always]
    default: auto
  asked:
    description: The run asked for this stage alone (C(--tags <stage>)).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
"""
