# -*- coding: utf-8 -*-
"""What a ggml-rpc-server's log says about its transport (issue: the seed's
hardware). An RDMA-capable build prints `transport : TCP (RDMA
auto-negotiate enabled)` at start whether or not RDMA is ever used, and
falls back to TCP per connection without a word; the proof is the
per-connection pair `RDMA probed: dev=... gid=...` / `RDMA activated: ...`
after `Accepted client connection`. Pure Python, tested on a real journal
of a GB10 box (tests/fixtures/hardware/).

One source, two users: the guard's zipapp (``twinrail-guard transport``
writes each RPC server's transport for node_exporter) and the Ansible
side, where ``module_utils/rpc_transport.py`` is a link to this file
(the service stage's gate, rpc_transport_facts)."""

from __future__ import annotations

import re

_PROBED = re.compile(r"RDMA probed: dev=(?P<dev>\S+) gid=(?P<gid>\d+) (?P<kind>\S+) qpn=(?P<qpn>\d+)")
_ACTIVATED = re.compile(r"RDMA activated: qpn=(?P<local>\d+)->(?P<remote>\d+) mtu=(?P<mtu>\d+)")
_BANNER = re.compile(r"^\s*transport\s*:\s*(?P<transport>.+?)\s*$")
_ENDPOINT = re.compile(r"^\s*endpoint\s*:\s*(?P<endpoint>\S+)")


def parse_log(text: str) -> dict:
    """The server's start banner and, per client connection, whether RDMA
    was probed and activated (device, GID index, MTU)."""
    out = {"endpoint": None, "banner": None, "connections": []}
    current = None
    for line in text.splitlines():
        if out["banner"] is None and (match := _BANNER.match(line)):
            out["banner"] = match.group("transport")
        elif out["endpoint"] is None and (match := _ENDPOINT.match(line)):
            out["endpoint"] = match.group("endpoint")
        elif "Accepted client connection" in line:
            current = {"rdma": False, "device": None, "gid": None, "mtu": None, "closed": False}
            out["connections"].append(current)
        elif current is not None and (match := _PROBED.search(line)):
            current.update(device=match.group("dev"), gid=int(match.group("gid")))
        elif current is not None and (match := _ACTIVATED.search(line)):
            current.update(rdma=True, mtu=int(match.group("mtu")))
        elif current is not None and "Client connection closed" in line:
            current["closed"] = True
    return out


def transport_verdict(log: dict, rdma_device: str) -> str | None:
    """None when the newest connection runs over RDMA on the rail's device;
    otherwise why not, in words."""
    if not log["connections"]:
        return "no client connection in its log yet (the master has not connected)"
    last = log["connections"][-1]
    if not last["rdma"]:
        probed = f"probed {last['device']} but never activated" if last["device"] else "never probed"
        return (f"the newest connection runs over TCP: RDMA {probed} (banner: {log['banner'] or 'none'}; "
                f"the fallback is silent)")
    if rdma_device and last["device"] and last["device"] != rdma_device:
        return f"RDMA activated on {last['device']}, not on the rail's device {rdma_device}"
    return None
