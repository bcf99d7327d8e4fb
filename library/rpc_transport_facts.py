#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Read, from each RPC server's journal, the transport its connections use."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rpc_transport_facts
short_description: Read the transport of each rail's ggml-rpc-server from its journal
description:
  - For each rail of this worker, reads the journal of its unit
    C(twinrail-rpc@<address>.service) since the unit last started (its
    invocation id) and returns the start banner and, per client connection,
    whether RDMA was probed and activated.
  - The banner proves nothing (an RDMA-capable build prints
    C(TCP (RDMA auto-negotiate enabled)) and falls back to TCP per
    connection without a word); a rail with an RDMA device gets a verdict
    only from the newest connection's C(RDMA activated) line on that device.
    A rail without one is expected on TCP.
  - Whatever the transport, a server whose log shows it failing since its
    newest start (it cannot listen or allocate, it asserted or crashed,
    systemd saw its process fail) or that never printed its start banner
    is that rail's problem, quoting its own words. Reads only.
version_added: "0.1.0"
author: twinrail developers
options:
  rails:
    description: This worker's rails (twinrail_rails), each with name, address (with prefix) and rdma_device.
    type: list
    elements: dict
    required: true
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Read the RPC servers' transport
  rpc_transport_facts:
    rails: "{{ twinrail_rails }}"
  register: __transport
"""

RETURN = r"""
rails:
  description: >-
    Per rail, in the order given, its name, address, unit, expected (rdma or tcp), banner, connections, rdma_connections,
    failures (the server's lines since its newest start that show it failing, as printed) and problem (none when the
    server runs and its transport is the expected one; otherwise why not, in words, quoting the server).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engines.llamacpp.rpc_transport import parse_log, server_problem, transport_verdict
from ansible.module_utils.node.unit_journal import journal_problem, since_start


def main() -> None:
    module = AnsibleModule(argument_spec={"rails": {"type": "list", "elements": "dict", "required": True}},
                           supports_check_mode=True)
    out = []
    for rail in module.params["rails"]:
        address = str(rail["address"]).split("/")[0]
        unit = f"twinrail-rpc@{address}.service"
        journal = since_start(module, unit, fallback_lines=500)
        rc, text, err = journal.rc, journal.text, journal.err
        if rc != 0:
            module.fail_json(msg=f"service: cannot read the journal of {unit}: {(err or text).strip()[-300:]}")
        log = parse_log(text)
        device = rail.get("rdma_device") or ""
        # a server that failed (cannot listen, allocate, crashed) fails its rail
        # whatever the transport; an RDMA rail must also prove RDMA on its device
        problem = (journal_problem(text) or (transport_verdict(log, device) if device else server_problem(log)))
        out.append({"name": rail.get("name"), "address": address, "unit": unit,
                    "expected": "rdma" if device else "tcp", "banner": log["banner"],
                    "connections": len(log["connections"]),
                    "rdma_connections": sum(1 for c in log["connections"] if c["rdma"]),
                    "failures": log["failures"],
                    "problem": problem})
    module.exit_json(changed=False, rails=out)


if __name__ == "__main__":
    main()
