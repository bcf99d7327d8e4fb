#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The vLLM engine's ranks on a node, from its unit's journal."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_rank_facts
short_description: Read which vLLM ranks a node runs, from its unit's journal since the unit started
description:
  - Reads the journal of the node's vLLM unit since its last start (its
    invocation, as the service's other journal readers do) and returns
    each rank it shows (rank, world size, the rendezvous it met at, its
    pipeline and tensor ranks, how long its weights took to load).
  - Changes nothing; runs in check mode too.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  unit:
    description: The vLLM unit.
    type: str
    default: twinrail-vllm.service
"""

EXAMPLES = r"""
- name: Read this node's ranks
  vllm_rank_facts:
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
ranks:
  description: The ranks, each with pid, rank, world_size, init (the rendezvous), backend, pp_rank, tp_rank, loaded_s.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.node.unit_journal import since_start
from ansible.module_utils.engines.vllm.ranks import read_ranks


def main() -> None:
    module = AnsibleModule(
        argument_spec={"unit": {"type": "str", "default": "twinrail-vllm.service"},
                       "host": {"type": "str", "required": True}},
        supports_check_mode=True,
    )
    unit, host = module.params["unit"], module.params["host"]
    journal = since_start(module, unit)
    if not journal.invocation:
        module.fail_json(msg=f"service: {host}: {unit} has not started (no invocation)")
    if journal.rc != 0:
        module.fail_json(msg=f"service: {host}: the journal of {unit}: {(journal.err or journal.text).strip()[-300:]}")
    module.exit_json(changed=False, ranks=read_ranks(journal.text), invocation=journal.invocation)


if __name__ == "__main__":
    main()
