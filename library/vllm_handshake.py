#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The vLLM engine's handshake gate (one rank a node, over rail0)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_handshake
short_description: Join every node in one gloo group over rail0 before vLLM loads a model
description:
  - Runs a short script in the vLLM environment's Python on each node at once
    (the play's hosts run the task together). The ranks meet at the master's
    rail0 address, sum a value, move 4 MiB through an all_reduce and gather
    every rank's identity (host, environment id, vllm and torch versions,
    model revision).
  - Fails naming the host, its rank, the rail and the rendezvous when the
    group does not form, the sums are wrong, or any rank's versions differ.
  - Changes nothing; runs in check mode too (it loads nothing).
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
  - twinrail_group
options:
  interface:
    description: The rail interface gloo binds to (GLOO_SOCKET_IFNAME).
    type: str
    required: true
  rail:
    description: The rail's name, for the messages.
    type: str
    default: rail0
  identity:
    description: What must be equal on every rank (env_id, model_revision) besides the versions the script reads.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Handshake over rail0
  vllm_handshake:
    python: /opt/twinrail/vllm/current/bin/python
    address: 198.19.0.1
    port: "{{ inference_service_vllm_handshake_port }}"
    world_size: 2
    rank: 1
    interface: ens1f0np0
    identity: {env_id: 4f1c2a9b7d3e, model_revision: smollm2-bf16-1}
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
result:
  description: This rank's figures (joined_s, all_reduce_4mib_s) and every rank's identity.
  returned: when the group formed
  type: dict
msg:
  description: The verdict, naming host, rank, rail and rendezvous.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engines.vllm.handshake import SCRIPT, verdict
from ansible.module_utils.rails.collective import GROUP_OPTIONS


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **GROUP_OPTIONS,
            "interface": {"type": "str", "required": True},
            "rail": {"type": "str", "default": "rail0"},
            "identity": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    identity = dict(p["identity"], host=p["host"])
    argv = [p["python"], "-c", SCRIPT, p["address"], str(p["port"]), str(p["world_size"]), str(p["rank"]),
            str(p["timeout"]), module.jsonify(identity)]
    rc, out, err = module.run_command(argv, environ_update={"GLOO_SOCKET_IFNAME": p["interface"], "LC_ALL": "C"})
    outcome = verdict(out, rc, err, host=p["host"], rank=p["rank"], world=p["world_size"],
                      rail=f"{p['rail']} ({p['interface']})", rendezvous=f"{p['address']}:{p['port']}",
                      timeout=p["timeout"])
    if not outcome["ok"]:
        module.fail_json(changed=False, **{k: v for k, v in outcome.items() if k != "ok"})
    module.exit_json(changed=False, msg=outcome["msg"], result=outcome["result"])


if __name__ == "__main__":
    main()
