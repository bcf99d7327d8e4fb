# -*- coding: utf-8 -*-
"""twinrail's Jinja filters for the rails and the bandwidth gate: the rails'
drift, probes and problems, the bandwidth plan and its verdicts, the RPC
servers' rails and transports. Plain functions over plain data, so the
stages compute nothing in Jinja loops; unit-tested
(tests/unit/test_filters.py and the tests of what they serve)."""

from __future__ import annotations

import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.rails import collective, rdma_link

DOCUMENTATION = r"""
name: rails
short_description: twinrail's filters for the rails and the bandwidth gate
description:
  - "C(twinrail_bandwidth_plan): One measurement per (worker, rail of the master) among ``active`` rails (every rail when None): who serves, who measures, over which transport, on which port, and the figure required from the rate both ends negotiated (the lower; ``default_rate_gbps`` when neither end knows it)."
  - "C(twinrail_bandwidth_rails): Each planned measurement with its runs: bandwidth results (kind bw) and latency results (kind lat) of the same rail and server, in the order they ran, and the latency bounds the verdict applies."
  - "C(twinrail_bandwidth_clients): ib_perftest's `clients` for every rail between the master and ``worker`` at once (plan order): perftest where both ends have an RDMA device, iperf3 with ``tcp_streams`` streams where not."
  - "C(twinrail_bandwidth_aggregates): Per worker and direction measured with every rail at once (first seen first): its rails, one way or both ways, the required aggregate (both ways: ``bidir_required_gbps``) and the results of each run."
  - "C(twinrail_rails_drifted): Interfaces of the rails that are up but whose MTU, address or own routing table (table_base + the rail's position, from 1) differ from what their files say. ``addresses``: `ip -j address show`; ``routes``: `ip -j route show table all`. A rail set down is not drifted: someone took it out of service, and the gate reports it."
  - "C(twinrail_rail_probes): The rail gate's probes from this node (rdma_link_facts' `peers`): one per rail and peer, peers in name order, the peer's address on the same rail, without prefix lengths. ``peers`` maps each other node to its twinrail_rails."
  - "C(twinrail_rails_routed_directly): The loop items (rails) of ``routes`` (results of `ip -j route get PEER from OWN` looped over rails, the rail under ``loop_var``) whose route leaves by that rail's own interface in ``rails`` (the asking node's): never the management network or a default route."
  - "C(twinrail_rail_problems): What the rdma stage refuses before configuring anything, one sentence per rail: an interface this host lacks, one whose NIC cannot carry the MTU, an RDMA device that does not exist."
  - "C(twinrail_rails_not_answering): The rails whose RPC server the worker's agent does not report as up (the agent not answering, or its entry for that address missing or not ok)."
  - "C(twinrail_collectives_problems): What is wrong with the group's collectives, from every node's collective_gate result ({host: result}): each node's problems, then NCCL versions that differ between nodes (module_utils/rails/collective.py)."
  - "C(twinrail_transport_problems): Each rail of each worker whose RPC server's connections do not use the transport the rail should carry (rpc_transport_facts, looped over the workers), as '<worker> <rail> (<address>): <why>'."
"""


def collectives_problems(outcomes: dict) -> list[str]:
    """What is wrong with the group's collectives, every node's
    collective_gate result read together (module_utils/rails/collective.py)."""
    return collective.group_problems(outcomes)


def _bare(address: str) -> str:
    """198.19.0.1/24 -> 198.19.0.1."""
    return str(address).split("/", 1)[0]


def _rail(rails: list[dict], name: str) -> dict:
    for rail in rails:
        if rail["name"] == name:
            return rail
    raise ValueError(f"no rail named {name!r} among {[r['name'] for r in rails]}")


def bandwidth_plan(master: str, workers: list[str], rails: dict, links: dict, active=None, *,
                   default_rate_gbps: float, min_ratio: float, perftest_port_base: int,
                   iperf3_port_base: int) -> list[dict]:
    """One measurement per (worker, rail of the master) among ``active`` rails
    (every rail when None): who serves, who measures, over which transport, on
    which port, and the figure required from the rate both ends negotiated
    (the lower; ``default_rate_gbps`` when neither end knows it).

    ``rails``: host -> twinrail_rails; ``links``: host -> rdma_link_facts' rails."""
    if active is None:
        active = [rail["name"] for rail in rails[master]]
    plan = []
    # by name: the caller's list may come from a set (intersect), and the
    # ports follow the order
    for w, worker in enumerate(sorted(workers)):
        for i, rail in enumerate(rails[master]):
            if rail["name"] not in active:
                continue
            peer = _rail(rails[worker], rail["name"])
            ours, theirs = links[master][rail["name"]], links[worker][rail["name"]]
            rates = [r for r in (ours.get("rate_gbps"), theirs.get("rate_gbps")) if r]
            link = min(rates) if rates else default_rate_gbps
            # a NIC behind a narrower PCIe link than its port cannot fill the port
            ceilings = [c for c in (ours.get("pcie_gbps"), theirs.get("pcie_gbps")) if c]
            pcie = min(ceilings) if ceilings else None
            rate = min(link, pcie) if pcie else link
            basis = (f"{float(min_ratio):g} x the {pcie:g} Gb/s PCIe ceiling (the link runs at {link:g} Gb/s)"
                     if pcie and pcie < link else f"{float(min_ratio):g} x the {link:g} Gb/s link rate")
            client_device, server_device = rail.get("rdma_device") or "", peer.get("rdma_device") or ""
            rdma = bool(client_device and server_device)
            plan.append({
                "rail": rail["name"], "client": master, "server": worker,
                "transport": "rdma" if rdma else "tcp",
                "client_address": _bare(rail["address"]), "server_address": _bare(peer["address"]),
                "client_device": client_device, "server_device": server_device,
                "client_gid": ours.get("gid_index"), "server_gid": theirs.get("gid_index"),
                "port": int(perftest_port_base if rdma else iperf3_port_base) + 10 * w + i,
                "rate_gbps": rate, "link_gbps": link, "pcie_gbps": pcie,
                "required_gbps": round(rate * float(min_ratio), 3), "required_basis": basis,
                # what tells a rail slow for its own reasons from a ConnectX-7's stale state
                "client_mtu": (ours.get("netdev") or {}).get("mtu"), "server_mtu": (theirs.get("netdev") or {}).get("mtu"),
                "client_pcie_problem": ours.get("pcie_problem"), "server_pcie_problem": theirs.get("pcie_problem"),
            })
    return plan


def bandwidth_rails(plan: list[dict], results: list[dict], max_typical_us: float, max_p999_us: float) -> list[dict]:
    """Each planned measurement with its runs: bandwidth results (kind bw)
    and latency results (kind lat) of the same rail and server, in the order
    they ran, and the latency bounds the verdict applies."""
    out = []
    for item in plan:
        mine = [r for r in results if r["rail"] == item["rail"] and r["server"] == item["server"]]
        out.append(dict(item, runs=[r["result"] for r in mine if r["kind"] == "bw"],
                        latency=[r["result"] for r in mine if r["kind"] == "lat"],
                        max_typical_us=float(max_typical_us), max_p999_us=float(max_p999_us)))
    return out


def bandwidth_clients(plan: list[dict], worker: str, bidirectional: bool, tcp_streams: int,
                      message_size: int) -> list[dict]:
    """ib_perftest's `clients` for every rail between the master and
    ``worker`` at once (plan order): perftest where both ends have an RDMA
    device, iperf3 with ``tcp_streams`` streams where not."""
    way = "<->" if bidirectional else "->"
    clients = []
    for item in plan:
        if item["server"] != worker:
            continue
        rdma = item["transport"] == "rdma"
        clients.append({
            "test": "ib_write_bw" if rdma else "iperf3", "server": item["server_address"],
            "device": (item["client_device"] or None) if rdma else None,
            "gid_index": item["client_gid"] if rdma else None,
            "port": item["port"], "bind_address": item["client_address"],
            "qps": 1 if rdma else int(tcp_streams), "size": int(message_size) if rdma else None,
            "label": (f"{item['rail']} {item['client']} {way} {item['server']} "
                      f"(all rails{', both ways' if bidirectional else ''})"),
        })
    return clients


def bandwidth_aggregates(aggregates: list[dict], plan: list[dict], master: str, required_gbps: float,
                         bidir_required_gbps: float | None = None) -> list[dict]:
    """Per worker and direction measured with every rail at once (first seen
    first): its rails, one way or both ways, the required aggregate (both
    ways: ``bidir_required_gbps``) and the results of each run."""
    out = []
    for worker, both in dict.fromkeys((a["server"], bool(a.get("bidirectional"))) for a in aggregates):
        out.append({"client": master, "server": worker,
                    "rails": [p["rail"] for p in plan if p["server"] == worker],
                    "bidirectional": both,
                    "required_gbps": float(bidir_required_gbps if both else required_gbps),
                    "runs": [a["results"] for a in aggregates
                             if a["server"] == worker and bool(a.get("bidirectional")) == both]})
    return out


def rails_drifted(rails: list[dict], addresses: list[dict], routes: list[dict], default_mtu: int,
                  table_base: int) -> list[str]:
    """Interfaces of the rails that are up but whose MTU, address or own
    routing table (table_base + the rail's position, from 1) differ from what
    their files say. ``addresses``: `ip -j address show`; ``routes``:
    `ip -j route show table all`. A rail set down is not drifted: someone
    took it out of service, and the gate reports it."""
    live = {link["ifname"]: link for link in addresses}
    drifted = []
    for index, rail in enumerate(rails, start=1):
        link = live.get(rail["interface"], {})
        inet = [a.get("local") for a in link.get("addr_info", []) if a.get("family") == "inet"]
        table = str(table_base + index)
        routed = [r for r in routes if str(r.get("table", "")) == table and r.get("dev") == rail["interface"]]
        if "UP" in link.get("flags", []) and (
                link.get("mtu", 0) != rail.get("mtu", default_mtu) or _bare(rail["address"]) not in inet
                or not routed):
            drifted.append(rail["interface"])
    return drifted


def rail_probes(rails: list[dict], peers: dict, default_mtu: int) -> list[dict]:
    """The rail gate's probes from this node (rdma_link_facts' `peers`): one
    per rail and peer, peers in name order, the peer's address on the same
    rail, without prefix lengths. ``peers`` maps each other node to its
    twinrail_rails."""
    probes = []
    for rail in rails:
        for peer in sorted(peers):
            theirs = _rail(peers[peer], rail["name"])
            probes.append({"rail": rail["name"], "interface": rail["interface"],
                           "own": _bare(rail["address"]), "peer": peer, "address": _bare(theirs["address"]),
                           "mtu": int(rail.get("mtu") or default_mtu)})
    return probes


def rails_routed_directly(routes: list[dict], rails: list[dict], loop_var: str) -> list[dict]:
    """The loop items (rails) of ``routes`` (results of `ip -j route get PEER
    from OWN` looped over rails, the rail under ``loop_var``) whose route
    leaves by that rail's own interface in ``rails`` (the asking node's):
    never the management network or a default route."""
    direct = []
    for result in routes:
        item = result[loop_var]
        mine = _rail(rails, item["name"])
        if result.get("rc") == 0 and rdma_link.route_dev(result.get("stdout")) == mine["interface"]:
            direct.append(item)
    return direct


def rail_problems(rails: list[dict], links: list[dict], devices: list[str], default_mtu: int) -> list[str]:
    """What the rdma stage refuses before configuring anything, one sentence
    per rail: an interface this host lacks, one whose NIC cannot carry the
    MTU, an RDMA device that does not exist.

    ``links``: ``ip -j -d link show``; ``devices``: /sys/class/infiniband's names."""
    by_name = {link["ifname"]: link for link in links or []}
    out = []
    for rail in rails or []:
        mtu = int(rail.get("mtu", default_mtu))
        link = by_name.get(rail["interface"])
        if link is None:
            has = ", ".join(name for name in by_name if name != "lo")
            out.append(f"{rail['name']}: interface {rail['interface']} does not exist (has: {has})")
        elif "max_mtu" in link and int(link["max_mtu"]) < mtu:
            out.append(f"{rail['name']}: {rail['interface']} carries at most MTU {link['max_mtu']}, "
                       f"twinrail_rail_mtu asks for {mtu}")
        device = rail.get("rdma_device") or ""
        if device and device not in (devices or []):
            out.append(f"{rail['name']}: RDMA device {device} does not exist (has: {', '.join(devices or []) or 'none'})")
    return out


def rails_not_answering(results: list[dict], loop_var: str) -> list[dict]:
    """The rails whose RPC server the worker's agent does not report as up
    (the agent not answering, or its entry for that address missing or not ok)."""
    out = []
    for result in results or []:
        if "skipped" in result:
            continue
        rail = result[loop_var]
        address = _bare(rail["address"])
        rpc = ((result.get("json") or {}).get("rpc") or []) if result.get("status", 0) == 200 else []
        if len([e for e in rpc if e.get("address") == address and e.get("ok")]) != 1:
            out.append(rail)
    return out


def transport_problems(results: list[dict], loop_var: str) -> list[str]:
    """Each rail of each worker whose RPC server's connections do not use
    the transport the rail should carry (rpc_transport_facts, looped over
    the workers), as '<worker> <rail> (<address>): <why>'."""
    out = []
    for result in results or []:
        if "skipped" in result:
            continue
        for rail in result.get("rails") or []:
            if rail.get("problem"):
                out.append(f"{result[loop_var]} {rail['name']} ({rail['address']}, expected "
                           f"{rail['expected'].upper()}): {rail['problem']}")
    return out


class FilterModule:  # pylint: disable=too-few-public-methods
    """twinrail's filters for the rails and the bandwidth gate."""

    def filters(self):
        return {
            "twinrail_bandwidth_plan": bandwidth_plan,
            "twinrail_bandwidth_rails": bandwidth_rails,
            "twinrail_bandwidth_clients": bandwidth_clients,
            "twinrail_bandwidth_aggregates": bandwidth_aggregates,
            "twinrail_rails_drifted": rails_drifted,
            "twinrail_rail_probes": rail_probes,
            "twinrail_rails_routed_directly": rails_routed_directly,
            "twinrail_rail_problems": rail_problems,
            "twinrail_rails_not_answering": rails_not_answering,
            "twinrail_transport_problems": transport_problems,
            "twinrail_collectives_problems": collectives_problems,
        }
