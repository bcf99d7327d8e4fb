"""The lab's rails seen from the nodes: point-to-point veth cables.

Each rail interface is a veth whose peer sits in another network namespace
(link_netnsid) and is not held by a bridge; from the master, each rail's
peer index is the worker's interface index and the other way round; and a
cut on the master's end drops the carrier on the worker's end: a cable,
checked from both ends.
"""

from __future__ import annotations

import json
import os
import sys
import time

import testinfra

# the cross-node checks run once, from the master
testinfra_hosts = ["ansible://master"]

LAB = [sys.executable, os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"],
                                    "tools", "lab.py")]


def links(host) -> dict:
    out = host.check_output("ip -j -d link show")
    return {link["ifname"]: link for link in json.loads(out)}


def facts(host) -> dict:
    return host.ansible.get_variables()


def peer_hosts(host):
    inventory = host.backend.ansible_inventory
    for worker in facts(host)["groups"]["workers"]:
        yield worker, testinfra.get_host(f"ansible://{worker}", ansible_inventory=inventory)


def interface_of(host, rail_name: str) -> str:
    return next(r["interface"] for r in facts(host)["twinrail_rails"]
                if r["name"] == rail_name)


def test_every_rail_is_a_veth_to_another_namespace(host):
    for _, node in [("master", host), *peer_hosts(host)]:
        found = links(node)
        for rail in facts(node)["twinrail_rails"]:
            link = found.get(rail["interface"])
            assert link is not None, f"{rail['name']}: {rail['interface']} missing"
            assert link["linkinfo"]["info_kind"] == "veth"
            assert "link_netnsid" in link, f"{rail['interface']}: peer in the same namespace"
            assert "master" not in link, f"{rail['interface']}: held by {link.get('master')}"
            assert not link.get("addr_info"), "the lab leaves addresses to the rdma stage"


def test_rails_join_master_and_worker(host):
    mine = links(host)
    for worker, other in peer_hosts(host):
        theirs = links(other)
        for rail in facts(host)["twinrail_rails"]:
            a = mine[rail["interface"]]
            b = theirs[interface_of(other, rail["name"])]
            assert a["link_index"] == b["ifindex"] and b["link_index"] == a["ifindex"], \
                f"{rail['name']}: the master's and {worker}'s ends are not one veth"


def wait_carrier(node, ifname: str, want: bool) -> bool:
    """Whether the link has a carrier (LOWER_UP), waiting up to 5 s for `want`."""
    carrier = not want
    for _ in range(50):
        flags = links(node)[ifname]["flags"]
        carrier = "LOWER_UP" in flags and "NO-CARRIER" not in flags
        if carrier == want:
            break
        time.sleep(0.1)
    return carrier


def test_cutting_a_rail_drops_the_peer_carrier(host):
    local = testinfra.get_host("local://")
    worker, other = next(peer_hosts(host))
    for rail in facts(host)["twinrail_rails"]:
        theirs = interface_of(other, rail["name"])
        assert wait_carrier(other, theirs, True), f"{worker}:{theirs} has no carrier"
        local.check_output(" ".join(LAB + ["cut", rail["name"]]))
        try:
            assert not wait_carrier(other, theirs, False), \
                f"{rail['name']}: {worker}:{theirs} kept its carrier after the cut"
        finally:
            local.check_output(" ".join(LAB + ["mend", rail["name"]]))
        assert wait_carrier(other, theirs, True), f"{worker}:{theirs}: no carrier after mend"
