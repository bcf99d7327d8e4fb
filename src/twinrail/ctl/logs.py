"""`twinrail logs`: the journals of the service's units across nodes,
interleaved by time with the node named (journalctl -o json on each node,
merged on the controller), or followed (-f) as they come."""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timezone

from .inventory import Cluster, InventoryError, Node

# the short names an operator types, and the units they stand for
ALIASES = {"rpc": "twinrail-rpc@*", "llama": "twinrail-llama.service", "vllm": "twinrail-vllm.service",
           "guard": "twinrail-guard.service",
           "agent": "twinrail-agent.service", "proxy": "nginx.service", "nginx": "nginx.service",
           "firewall": "twinrail-firewall.service"}


def unit_pattern(unit: str | None) -> list[str]:
    """journalctl -u arguments for a short name, a unit name, or every unit of the service."""
    if unit is None:
        return sorted(set(ALIASES.values()))
    if unit in ALIASES:
        return [ALIASES[unit]]
    if unit.startswith(("twinrail-", "nginx")):
        return [unit]
    raise InventoryError(f"unknown unit {unit!r}; the service's units: {', '.join(sorted(ALIASES))} "
                         "(or a unit name such as twinrail-rpc@198.19.0.2.service)")


def command(node: Node, units: list[str], since: str | None, follow: bool, lines: int) -> str:
    argv = ["journalctl", "--no-pager", "-o", "json", "--output-fields=MESSAGE,_SYSTEMD_UNIT,PRIORITY"]
    for unit in units:
        argv += ["-u", unit]
    argv += ["--since", since] if since else ["-n", str(lines)]
    if follow:
        argv.append("-f")
    return ("sudo -n " if node.become else "") + " ".join(shlex.quote(a) for a in argv)


def entries(node_name: str, text: str) -> list[dict]:
    """The journal's JSON lines as (time, node, unit, message) entries."""
    out = []
    for line in text.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        message = data.get("MESSAGE")
        if isinstance(message, list):  # journald gives non-UTF-8 messages as byte lists
            message = bytes(message).decode(errors="replace")
        out.append({"time": int(data.get("__REALTIME_TIMESTAMP", 0)), "node": node_name,
                    "unit": data.get("_SYSTEMD_UNIT", ""), "message": message or ""})
    return out


def interleave(per_node: dict[str, list[dict]]) -> list[dict]:
    """Every node's entries in one list, by time (ties in node order)."""
    merged = [e for name in per_node for e in per_node[name]]
    return sorted(merged, key=lambda e: (e["time"], e["node"]))


def line(entry: dict) -> str:
    stamp = datetime.fromtimestamp(entry["time"] / 1e6, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return f"{stamp} {entry['node']} {entry['unit']}: {entry['message']}"


def pick(cluster: Cluster, node: str | None) -> list[Node]:
    return cluster.nodes if node in (None, "all") else [cluster.node(node)]
