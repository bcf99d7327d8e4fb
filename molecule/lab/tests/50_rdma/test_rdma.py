"""Verify the rdma stage on every lab node: addresses, MTU, routing, files,
and full-MTU frames with DF set across each rail."""

from __future__ import annotations

import json
import time

import testinfra
from lab_client import default


def variables(host) -> dict:
    return host.ansible.get_variables()


def test_rails_have_their_address_and_mtu(host):
    links = {l["ifname"]: l for l in json.loads(host.check_output("ip -j address show"))}
    for rail in variables(host)["twinrail_rails"]:
        link = links[rail["interface"]]
        assert link["mtu"] == 9000
        inet = [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"]
                if a["family"] == "inet"]
        assert inet == [rail["address"]]


def test_each_rail_has_its_table_and_source_rule(host):
    rules = json.loads(host.check_output("ip -j rule show"))
    for index, rail in enumerate(variables(host)["twinrail_rails"]):
        own = rail["address"].split("/")[0]
        table = str(101 + index)
        assert any(r.get("src") == own and str(r.get("table")) == table for r in rules), rules
        # a rail that was just cut and mended (shared rail tests) gets its
        # routes back from networkd a moment after its carrier
        for _ in range(50):
            routes = json.loads(host.check_output(f"ip -j route show table {table}"))
            if routes:
                break
            time.sleep(0.1)
        assert [(r["dst"], r["dev"], r.get("prefsrc")) for r in routes] == [
            (rail["address"].rsplit(".", 1)[0] + ".0/24", rail["interface"], own)]


def test_rails_are_persisted_as_networkd_files(host):
    assert host.service("systemd-networkd").is_enabled
    for rail in variables(host)["twinrail_rails"]:
        unit = host.file(f"/etc/systemd/network/20-twinrail-{rail['name']}.network")
        assert unit.exists and unit.mode == 0o640
        assert f"Name={rail['interface']}" in unit.content_string
        assert f"Address={rail['address']}" in unit.content_string
        assert "MTUBytes=9000" in unit.content_string
    modules = host.file(default("rdma_network_modules_file")).content_string
    assert "ib_uverbs" in modules and "rdma_ucm" in modules


def test_rdma_and_gate_tools_are_installed(host):
    for package in ("rdma-core", "ibverbs-utils", "perftest", "infiniband-diags", "iperf3"):
        assert host.package(package).is_installed


def test_full_mtu_frames_cross_every_rail_both_ways(host):
    me = variables(host)["inventory_hostname"]
    for peer in variables(host)["groups"]["cluster"]:
        if peer == me:
            continue
        other = testinfra.get_host(f"ansible://{peer}",
                                   ansible_inventory=host.backend.ansible_inventory)
        for rail in variables(host)["twinrail_rails"]:
            peer_rail = next(r for r in variables(other)["twinrail_rails"]
                             if r["name"] == rail["name"])
            own = rail["address"].split("/")[0]
            cmd = host.run(f"ping -n -q -c 2 -W 1 -M do -s 8972 -I {own} "
                           f"{peer_rail['address'].split('/')[0]}")
            assert cmd.rc == 0, f"{me} -> {peer} over {rail['name']}: {cmd.stdout}"
            # one byte more than the MTU must not pass with DF set
            over = host.run(f"ping -n -q -c 1 -W 1 -M do -s 8973 -I {own} "
                            f"{peer_rail['address'].split('/')[0]}")
            assert over.rc != 0
