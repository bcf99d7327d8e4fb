"""``twinrail-guard transport``: each RPC server's transport, for
node_exporter's textfile collector (run by a timer on every worker).

On hardware an RDMA-capable build falls back to TCP per connection
without a word (transport.py); this reads each rail's RPC server journal
since the unit last started (its invocation) and writes, per rail
address, the newest connection's transport, so the fallback is a metric
and an alert. Written to a temporary file and renamed, as node_exporter
asks, so a scrape never reads half a file."""

from __future__ import annotations

import os
import subprocess
import time

from twinrail.guard.metrics import Exposition
from twinrail.guard.transport import parse_log, server_problem

# failed: the server's log shows it failing since its newest start (it is not serving on any transport)
TRANSPORTS = ("rdma", "tcp", "none", "failed")


def journal_of(unit: str) -> str:
    """The unit's journal since it last started (all of it when systemd
    has no invocation for it)."""
    invocation = subprocess.run(["systemctl", "show", "-p", "InvocationID", "--value", unit],
                                capture_output=True, text=True, check=False).stdout.strip()
    # the unit's own lines, or (+) systemd's about this invocation ("Main process exited ...")
    match = ([f"_SYSTEMD_INVOCATION_ID={invocation}", "+", f"INVOCATION_ID={invocation}"] if invocation
             else ["-u", unit, "-n", "500"])
    return subprocess.run(["journalctl", "--no-pager", "-o", "cat", *match],
                          capture_output=True, text=True, check=False).stdout


def newest_transport(log: dict) -> str:
    """rdma or tcp for the newest client connection, none before the first,
    failed when the server's log shows it failing (never its last transport)."""
    if log["failures"]:
        return "failed"
    if not log["connections"]:
        return "none"
    return "rdma" if log["connections"][-1]["rdma"] else "tcp"


def render(journals: dict[str, str], now: float) -> str:
    """The exposition for {rail address: its RPC server's journal text}."""
    logs = {address: parse_log(text) for address, text in sorted(journals.items())}
    out = Exposition()
    out.family("twinrail_rpc_transport", "gauge",
               "1 for the transport of the RPC server's newest client connection (rdma, tcp; none: no "
               "connection since it started; failed: its log shows it failing)",
               [({"address": a, "transport": t}, newest_transport(log) == t)
                for a, log in logs.items() for t in TRANSPORTS])
    out.family("twinrail_rpc_connections", "gauge", "client connections the RPC server accepted since it started",
               [({"address": a}, len(log["connections"])) for a, log in logs.items()])
    out.family("twinrail_rpc_rdma_connections", "gauge", "of those, the ones that activated RDMA",
               [({"address": a}, sum(1 for c in log["connections"] if c["rdma"])) for a, log in logs.items()])
    out.family("twinrail_rpc_transport_checked_timestamp_seconds", "gauge",
               "when the journals were last read", [({}, round(now, 3))])
    return out.text()


def write_atomic(path: str, text: str) -> None:
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


def run_transport(args) -> None:
    journals = {address: journal_of(f"twinrail-rpc@{address}.service") for address in args.address}
    write_atomic(args.out, render(journals, time.time()))
