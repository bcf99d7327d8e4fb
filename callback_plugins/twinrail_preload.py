# -*- coding: utf-8 -*-
"""Load the Jinja filters and tests once, in the controller's main process.

Ansible forks a worker per task and host. A worker that templates a filter
asks the filter loader for it, and a loader that has not listed its plugins
yet imports every filter file there is (ansible's own, the collections',
twinrail's with the module_utils they import) before it answers: in every
worker, about 0.1 s of the controller's CPU each time, because the main
process never templates a filter and so never fills the list its forks would
inherit. This callback fills it in the main process at the start of each
play (a no-op once it is full), so the workers inherit it. Measured on the
2-node lab: the no-op site.yml from 94 s to 70 s, the controller's CPU
time halved (docs/benchmarks.md).
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: twinrail_preload
type: aggregate
short_description: Load the Jinja filters and tests once in the controller's main process
description:
  - At the start of each play, lists the filter and test plugins in the main process, so the workers Ansible forks
    for each task inherit them instead of importing every filter file again.
  - Prints nothing and changes no result. Loaded whenever it is on the callback path (no need to enable it).
author: twinrail developers
"""

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import filter_loader, test_loader


def preload() -> int:
    """List the filters and tests (importing their files once); how many."""
    return len(list(filter_loader.all())) + len(list(test_loader.all()))


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "twinrail_preload"
    CALLBACK_NEEDS_ENABLED = False

    def v2_playbook_on_play_start(self, play):
        preload()
