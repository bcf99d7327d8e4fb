"""The lab's rails: a veth pair between two nodes' network namespaces for
a direct cable, a switch (a namespace of the lab's own holding a bridge,
a veth per node) for a rail with more ends; laid again where missing,
left alone where in place, cut and mended by setting a link down and up."""

from __future__ import annotations

import json

from lab_topology import (LabError, Rail, Topology, container_name, container_pid, log, out, powered_on, run,
                          switch_netns, switch_port)

def ns_argv(pid: int | None, netns: str | None = None) -> list[str]:
    """Prefix that runs a command in a container's or a named namespace."""
    if netns:
        return ["ip", "netns", "exec", netns]
    return ["nsenter", "--target", str(pid), "--net"]


def link_info(prefix: list[str], ifname: str) -> dict | None:
    proc = run(prefix + ["ip", "-j", "-d", "link", "show", "dev", ifname], check=False)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout)[0]


def is_veth_pair(a: dict | None, b: dict | None) -> bool:
    """True when a and b are the two ends of one veth, in different namespaces."""
    if not a or not b:
        return False
    kinds = {x.get("linkinfo", {}).get("info_kind") for x in (a, b)}
    return (kinds == {"veth"} and a.get("link_index") == b["ifindex"]
            and b.get("link_index") == a["ifindex"]
            and "link_netnsid" in a and "link_netnsid" in b)


def ensure_direct_rail(topo: Topology, rail: Rail) -> None:
    (node_a, if_a), (node_b, if_b) = rail.ends
    pid_a, pid_b = container_pid(topo, node_a), container_pid(topo, node_b)
    a, b = link_info(ns_argv(pid_a), if_a), link_info(ns_argv(pid_b), if_b)
    if is_veth_pair(a, b):
        return
    for pid, ifname, info in ((pid_a, if_a, a), (pid_b, if_b, b)):
        if info is not None:
            run(ns_argv(pid) + ["ip", "link", "delete", "dev", ifname])
    log(f"{rail.name}: cable {node_a}:{if_a} <-> {node_b}:{if_b}")
    run(["ip", "link", "add", if_a, "netns", str(pid_a), "type", "veth",
         "peer", "name", if_b, "netns", str(pid_b)])
    for pid, node, ifname in ((pid_a, node_a, if_a), (pid_b, node_b, if_b)):
        run(ns_argv(pid) + ["ip", "link", "set", "dev", ifname, "up"])
        plugged(topo, node, ifname)


def plugged(topo: Topology, node: str, ifname: str) -> None:
    """A link that appeared on a node that is up: what udev does for a new
    network device (systemd's 99-systemd.rules), which the lab masks: its
    per-interface sysctls from sysctl.d. A node that boots later applies
    them itself, with every other sysctl."""
    if powered_on(topo, node):
        run(["docker", "exec", container_name(topo, node), "/lib/systemd/systemd-sysctl",
             f"--prefix=/net/ipv4/conf/{ifname}", f"--prefix=/net/ipv4/neigh/{ifname}",
             f"--prefix=/net/ipv6/conf/{ifname}", f"--prefix=/net/ipv6/neigh/{ifname}"], check=False)


def ensure_switched_rail(topo: Topology, rail: Rail) -> None:
    ns = switch_netns(topo, rail.name)
    if ns not in out(["ip", "netns", "list"]).split():
        log(f"{rail.name}: switch namespace {ns}")
        run(["ip", "netns", "add", ns])
    sw = ns_argv(None, ns)
    if link_info(sw, "br0") is None:
        run(sw + ["ip", "link", "add", "br0", "type", "bridge"])
    for node, ifname in rail.ends:
        pid = container_pid(topo, node)
        port = switch_port(node)
        mine, theirs = link_info(ns_argv(pid), ifname), link_info(sw, port)
        if is_veth_pair(mine, theirs) and theirs.get("master") == "br0":
            if theirs.get("mtu") != rail.mtu:  # a switch carries the rails' MTU on every port
                run(sw + ["ip", "link", "set", "dev", port, "mtu", str(rail.mtu)])
            continue
        if mine is not None:
            run(ns_argv(pid) + ["ip", "link", "delete", "dev", ifname])
        if theirs is not None:
            run(sw + ["ip", "link", "delete", "dev", port])
        log(f"{rail.name}: cable {node}:{ifname} <-> switch port {port}")
        run(["ip", "link", "add", ifname, "netns", str(pid), "type", "veth",
             "peer", "name", port, "netns", ns])
        run(sw + ["ip", "link", "set", "dev", port, "mtu", str(rail.mtu), "master", "br0", "up"])
        run(ns_argv(pid) + ["ip", "link", "set", "dev", ifname, "up"])
        plugged(topo, node, ifname)
    # set, not left to follow the ports: an explicit MTU stays when one is replugged
    run(sw + ["ip", "link", "set", "dev", "br0", "mtu", str(rail.mtu), "up"])


def ensure_rails(topo: Topology) -> None:
    for rail in topo.rails:
        if rail.direct:
            ensure_direct_rail(topo, rail)
        else:
            ensure_switched_rail(topo, rail)


def set_rail(topo: Topology, rail_name: str, node: str | None, up: bool) -> None:
    rail = topo.rail(rail_name)
    ends = [e for e in rail.ends if node is None or e[0] == node]
    if node is None:
        ends = ends[:1]  # the master's end: pulling the plug on one side
    if not ends:
        raise LabError(f"node '{node}' is not on rail '{rail_name}'")
    for end_node, ifname in ends:
        run(ns_argv(container_pid(topo, end_node)) +
            ["ip", "link", "set", "dev", ifname, "up" if up else "down"])
        log(f"{rail_name}: {end_node}:{ifname} link {'up' if up else 'down'}")


def check_cables(topo: Topology, nodes: list[str] | None = None) -> None:
    """Every end of every rail (of these nodes) exists: an error otherwise."""
    missing = []
    for rail in topo.rails:
        for node, ifname in rail.ends:
            if nodes is not None and node not in nodes:
                continue
            if link_info(ns_argv(container_pid(topo, node)), ifname) is None:
                missing.append(f"{rail.name} ({node}:{ifname})")
    if missing:
        raise LabError("cable not laid: " + ", ".join(missing))
