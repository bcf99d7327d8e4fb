# -*- coding: utf-8 -*-
"""Documentation shared by twinrail's modules that read a node's rails from sysfs."""


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """The `rails` and `sysfs_root` options and full check mode support."""

    DOCUMENTATION = r"""
options:
  rails:
    description: The node's rails (twinrail_rails).
    type: list
    elements: dict
    required: true
  sysfs_root:
    description: Where sysfs is mounted.
    type: path
    default: /sys
attributes:
  check_mode:
    support: full
"""
