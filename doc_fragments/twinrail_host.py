# -*- coding: utf-8 -*-
"""Documentation shared by twinrail's modules that name the host in their messages."""


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """The `host` option and full check mode support."""

    DOCUMENTATION = r"""
options:
  host:
    description: The inventory name of the host the module runs for, for the messages.
    type: str
    required: true
attributes:
  check_mode:
    support: full
"""
