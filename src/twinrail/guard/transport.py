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
side, where ``module_utils/engines/llamacpp/rpc_transport.py`` is a link to this file
(the service stage's gate, rpc_transport_facts)."""

from __future__ import annotations

import re

# Every RDMA line llama.cpp has printed per connection, read as key=value
# pairs whatever their order and company:
#   "RDMA probed: dev=rocep1s0f0 gid=5 RoCEv2 qpn=303 inline=316"  (released)
#   "RDMA probed: dev=rocep101s0 gid=5 qpn=322 inline=316"         (before the GID type)
#   "RDMA(Apple/UC) probed: dev=... port=... gid=..."              (Apple's transport)
#   "RDMA activated: qpn=303->303 mtu=1024 rx_depth=24" (the early branch wrote "->" as an arrow)
#   "RDMA activate failed, staying on TCP"                         (the connection stays on TCP)
_PROBED = re.compile(r"RDMA(?:\([^)]*\))? probed:(?P<rest>.*)$")
_ACTIVATED = re.compile(r"RDMA(?:\([^)]*\))? activated:(?P<rest>.*)$")
_ACTIVATE_FAILED = re.compile(r"RDMA(?:\([^)]*\))? activate failed")
_PAIR = re.compile(r"\b(?P<key>[a-z_]+)=(?P<value>\S+)")
_BANNER = re.compile(r"^\s*transport\s*:\s*(?P<transport>.+?)\s*$")
_ENDPOINT = re.compile(r"^\s*endpoint\s*:\s*(?P<endpoint>\S+)")
# every start banner llama.cpp has printed: "Starting RPC server on H:P"
# (the first), "..., backend memory: N MB", "Starting RPC server" alone,
# then "Starting RPC server vX.Y.Z"; the last two followed by an
# "endpoint :" line
_START = re.compile(r"Starting RPC server(?: v(?P<version>\d+\.\d+\.\d+)| on (?P<endpoint>[^\s,]+)(?:,.*)?)?\s*$")
# what a server prints when it fails: it cannot listen, cannot allocate,
# asserts, crashes, its RDMA completions fail; and systemd's words for its
# process ending badly
FAILURES = tuple(re.compile(pattern) for pattern in (
    r"Failed to create server socket",
    r"Failed to initialize RPC transport",
    r"Failed to set SO_REUSEADDR",
    r"Failed to accept client connection",
    r"Invalid host address",
    r"Cannot resolve host",
    r"CUDA error",
    r"GGML_ASSERT",
    r"Segmentation fault",
    r"terminate called after throwing",
    r"\bAborted\b",
    r"Failed to create backend",
    r"No devices found",
    r"error: unknown device",
    r"RDMA CQ poll timeout",
    r"RDMA(?:\([^)]*\))?.* wc error",
    r"RDMA\([^)]*\) (?:RTR|RTS|poll_cq|post_recv).* failed",
    r"[Mm]ain process exited, code=(?:dumped|killed|exited), status=(?!0/)\S+",
    r"Failed with result '[^']+'",
))


# An allocation the server refuses fails that client's load, and the server
# goes on: such a failure stands until a later client connects.
TRANSIENT = tuple(re.compile(pattern) for pattern in (
    r"Failed to allocate input buffer",
    r"\[\w+\] (?:device: \d+, )?size: \d+ -> failed",
    r"cudaMalloc failed",
    r"failed to allocate .*buffer",
    r"out of memory",
))


def parse_log(text: str) -> dict:
    """The server's start banner and, per client connection, whether RDMA
    was probed and activated (device, GID index, MTU); ``failures``: the
    lines since its newest start that show it failing, as printed, and
    ``started``: whether a start banner is in the log."""
    out = {"endpoint": None, "banner": None, "version": None, "started": False, "connections": [],
           "failures": [], "lines": 0}
    current, transient = None, []
    for line in text.splitlines():
        out["lines"] += bool(line.strip())
        if match := _START.search(line):
            # a new start: what failed before it is history (a restart that works)
            out.update(started=True, failures=[], version=match.group("version") or out["version"])
            transient = []
            out["endpoint"] = match.group("endpoint") or out["endpoint"]
            current = None
        elif any(pattern.search(line) for pattern in FAILURES):
            out["failures"].append(line.strip())
        elif any(pattern.search(line) for pattern in TRANSIENT):
            out["failures"].append(line.strip())
            transient.append(line.strip())
        elif out["banner"] is None and (match := _BANNER.match(line)):
            out["banner"] = match.group("transport")
        elif match := _ENDPOINT.match(line):
            out["endpoint"] = match.group("endpoint")
        elif "Accepted client connection" in line:
            # a client after a refused allocation: the server went on serving
            out["failures"] = [f for f in out["failures"] if f not in transient]
            transient = []
            current = {"rdma": False, "device": None, "gid": None, "mtu": None, "closed": False, "probed": None,
                       "fallback": None}
            out["connections"].append(current)
        elif current is not None and (match := _PROBED.search(line)):
            pairs = dict(_PAIR.findall(match.group("rest")))
            gid = pairs.get("gid")
            current.update(device=pairs.get("dev"), gid=int(gid) if gid and gid.isdigit() else None,
                           probed=line.strip())
        elif current is not None and (match := _ACTIVATED.search(line)):
            mtu = dict(_PAIR.findall(match.group("rest"))).get("mtu", "")
            current.update(rdma=True, mtu=int(mtu) if mtu.isdigit() else None)
        elif current is not None and _ACTIVATE_FAILED.search(line):
            current.update(rdma=False, fallback=line.strip())
        elif current is not None and "Client connection closed" in line:
            current["closed"] = True
    return out


def server_problem(log: dict) -> str | None:
    """Why the RPC server is not serving, from its own log (its words
    quoted); None when the log shows no failure."""
    if log["failures"]:
        shown = "; ".join(log["failures"][-3:])
        return f"the RPC server failed: {shown[-400:]}"
    if not log["started"] and not log["connections"] and log["lines"]:
        # lines, none of them a server's: it never started listening (an empty
        # log says nothing: a long-lived server's may have rotated away)
        return "its log has no start banner ('Starting RPC server ...'): it never started listening"
    return None


def transport_verdict(log: dict, rdma_device: str) -> str | None:
    """None when the newest connection runs over RDMA on the rail's device;
    otherwise why not, in words. A failed server fails first; a device the
    log does not name never passes on an assumption."""
    failed = server_problem(log)
    if failed:
        return failed
    if not log["connections"]:
        return "no client connection in its log yet (the master has not connected)"
    last = log["connections"][-1]
    if not last["rdma"] and last["fallback"]:
        return f"the newest connection runs over TCP: the server said '{last['fallback']}'"
    if not last["rdma"]:
        probed = f"probed {last['device']} but never activated" if last["device"] else "never probed"
        return (f"the newest connection runs over TCP: RDMA {probed} (banner: {log['banner'] or 'none'}; "
                f"the fallback is silent)")
    if not last["device"]:
        return (f"RDMA activated, but its log does not say on which device "
                f"({last['probed'] or 'no RDMA probed line'}): the rail's device {rdma_device} is not proven")
    if rdma_device and last["device"] != rdma_device:
        return f"RDMA activated on {last['device']}, not on the rail's device {rdma_device}"
    return None
