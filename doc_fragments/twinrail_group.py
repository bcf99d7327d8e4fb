# -*- coding: utf-8 -*-
"""Documentation shared by the modules that join every node in one torch.distributed group."""


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """The group's options: the engine's Python, the rendezvous, the ranks."""

    DOCUMENTATION = r"""
options:
  python:
    description: The engine environment's Python (torch with torch.distributed).
    type: path
    required: true
  address:
    description: The rendezvous, the master's rail0 address.
    type: str
    required: true
  port:
    description: The rendezvous port (apart from the engine's own).
    type: int
    required: true
  world_size:
    description: How many nodes join (one rank each).
    type: int
    required: true
  rank:
    description: This node's rank (the master's is 0).
    type: int
    required: true
  timeout:
    description: Seconds the group may take to form.
    type: int
    default: 60
"""
