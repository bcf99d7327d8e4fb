"""Link-state parsers on the real captures in tests/fixtures/perftest/,
the sysfs reader on a sysfs tree built the way the kernel lays it out, and
the rail gate."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES

from ansible.module_utils.rails import rdma_link
from ansible.module_utils.rails.rdma_link import (ParseError, gid_to_ipv4, parse_ibstat, parse_ibv_devinfo,
                       parse_rate, parse_rdma_link, rail_gate, rail_state, select_gid)

PERFTEST = FIXTURES / "perftest"
CX5 = (PERFTEST / "ibv_devinfo_ibstat_roce_cx5_100g_kubeansible.txt").read_text()


def test_ibv_devinfo_of_a_roce_cx5():
    dev = parse_ibv_devinfo(CX5)
    # the command asked for mlx5_18 but the output names mlx5_0 (as published)
    assert list(dev) == ["mlx5_0"]
    info = dev["mlx5_0"]
    assert info["fw_ver"] == "16.23.1020"
    assert info["vendor_part_id"] == "4119"
    port = info["ports"][1]
    assert (port["state"], port["state_code"]) == ("PORT_ACTIVE", 4)
    assert port["max_mtu"] == 4096 and port["active_mtu"] == 1024
    assert port["link_layer"] == "Ethernet"


def test_ibstat_of_the_same_port():
    cas = parse_ibstat(CX5)
    port = cas["mlx5_0"]["ports"][1]
    assert cas["mlx5_0"]["ca_type"] == "MT4119"
    assert port["state"] == "Active"
    assert port["physical_state"] == "LinkUp"
    assert port["rate"] == 100.0
    assert port["link_layer"] == "Ethernet"


def test_rdma_link_of_an_infiniband_port():
    text = (PERFTEST / "rdma_link_show_ib_cx5_spiderpool.txt").read_text()
    links = parse_rdma_link(text)
    assert links == [{"device": "mlx5_0", "port": 1, "subnet_prefix": "fe80:0000:0000:0000",
                      "lid": "2", "sm_lid": "2", "lmc": "0", "state": "ACTIVE",
                      "physical_state": "LINK_UP"}]
    # the same capture's ibstat fragment has no CA line: not a whole ibstat
    with pytest.raises(ParseError):
        parse_ibstat(text)


def test_parsers_refuse_other_tools_output():
    iperf = (PERFTEST / "iperf3_tcp_client_json_1stream_wan_71mbps_cloudpilot.json").read_text()
    for parser in (parse_ibv_devinfo, parse_ibstat, parse_rdma_link):
        with pytest.raises(ParseError):
            parser(iperf)


def build_sysfs(root: Path, *, ifname="ens1f0np0", dev="mlx5_0", state="4: ACTIVE",
                phys="5: LinkUp", rate="200 Gb/sec (4X HDR)", carrier="1",
                operstate="up", speed="200000"):
    net = root / "class" / "net" / ifname
    net.mkdir(parents=True)
    for name, value in (("operstate", operstate), ("carrier", carrier), ("speed", speed),
                        ("mtu", "9000")):
        (net / name).write_text(value + "\n")
    if dev:
        port = root / "class" / "infiniband" / dev / "ports" / "1"
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (port / sub).mkdir(parents=True)
        for name, value in (("state", state), ("phys_state", phys), ("rate", rate),
                            ("link_layer", "Ethernet")):
            (port / name).write_text(value + "\n")
        gids = [("fe80:0000:0000:0000:9a03:9bff:fe00:0001", "IB/RoCE v1"),
                ("fe80:0000:0000:0000:9a03:9bff:fe00:0001", "RoCE v2"),
                ("0000:0000:0000:0000:0000:ffff:0a64:0001", "IB/RoCE v1"),
                ("0000:0000:0000:0000:0000:ffff:0a64:0001", "RoCE v2"),
                ("0000:0000:0000:0000:0000:0000:0000:0000", "")]
        for index, (gid, kind) in enumerate(gids):
            (port / "gids" / str(index)).write_text(gid + "\n")
            (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
            (port / "gid_attrs" / "ndevs" / str(index)).write_text(ifname + "\n")
    return root


RAIL = {"name": "rail0", "interface": "ens1f0np0", "rdma_device": "mlx5_0",
        "address": "10.100.0.1/30"}


def test_sysfs_port_rate_and_roce_v2_gid(tmp_path):
    state = rail_state(str(build_sysfs(tmp_path)), RAIL)
    assert state["up"] and state["problem"] is None
    assert state["rate_gbps"] == 200.0
    assert state["port"]["state"] == "ACTIVE"
    assert state["port"]["physical_state"] == "LinkUp"
    assert len(state["port"]["gids"]) == 4  # the all-zero GID is not one
    assert state["gid_index"] == 3  # RoCE v2 and ::ffff:10.100.0.1


def test_degraded_port_is_reported_with_its_rate(tmp_path):
    state = rail_state(str(build_sysfs(tmp_path, rate="100 Gb/sec (2X HDR)")), RAIL)
    assert state["up"] and state["rate_gbps"] == 100.0


def test_port_down(tmp_path):
    root = build_sysfs(tmp_path, state="1: DOWN", phys="3: Disabled", carrier="0",
                       operstate="down", speed="-1")
    state = rail_state(str(root), RAIL)
    assert not state["up"]
    assert state["problem"] == "mlx5_0 port 1 is DOWN / Disabled"


def test_missing_interface_and_device(tmp_path):
    root = build_sysfs(tmp_path, dev=None)
    assert rail_state(str(root), dict(RAIL, interface="ens9"))["problem"] == \
        "interface ens9 does not exist"
    assert rail_state(str(root), RAIL)["problem"] == "RDMA device mlx5_0 does not exist"


def test_rail_without_rdma_device_uses_the_netdev_speed(tmp_path):
    root = build_sysfs(tmp_path, dev=None, speed="10000")
    state = rail_state(str(root), dict(RAIL, rdma_device=""))
    assert state["up"] and state["rate_gbps"] == 10.0 and state["port"] is None


def test_gid_helpers():
    assert gid_to_ipv4("0000:0000:0000:0000:0000:ffff:c612:0001") == "198.18.0.1"
    assert gid_to_ipv4("fe80:0000:0000:0000:9a03:9bff:fe00:0001") is None
    assert select_gid({1: {"type": "IB/RoCE v1", "ipv4": "10.0.0.1"}}, "10.0.0.1") is None
    assert parse_rate("100 Gb/sec (4X EDR)") == 100.0 and parse_rate("") is None


def up(rate=200.0):
    return {"interface": "ens1f1np1", "up": True, "rate_gbps": rate, "problem": None}


def down():
    return {"interface": "ens1f1np1", "up": False, "rate_gbps": None,
            "problem": "ens1f1np1 link down, no carrier"}


def test_gate_names_the_rail_and_both_hosts():
    links = {"node-a": {"rail0": up(), "rail1": down()},
             "node-b": {"rail0": up(), "rail1": dict(down(), problem="ens1f1np1 link "
                                                                     "lowerlayerdown, no carrier")}}
    result = rail_gate(links, 200, allow_single_rail=False)
    assert not result["passed"] and result["failed_rails"] == ["rail1"]
    assert result["failures"] == [
        "rail1: node-a ens1f1np1: ens1f1np1 link down, no carrier; node-b ens1f1np1: "
        "ens1f1np1 link lowerlayerdown, no carrier"]
    single = rail_gate(links, 200, allow_single_rail=True)
    assert single["passed"] and single["degraded"] and single["healthy"] == ["rail0"]


def test_gate_catches_the_degraded_cable_rate():
    links = {"node-a": {"rail1": up()}, "node-b": {"rail1": up(rate=100.0)}}
    result = rail_gate(links, 200, allow_single_rail=False)
    assert result["failures"] == [
        "rail1: node-b negotiated 100 Gb/s, expected 200: check cable and port"]


def test_gate_catches_an_mtu_black_hole():
    links = {"a": {"rail0": up()}, "b": {"rail0": up()}}
    result = rail_gate(links, 200, False, pings={"a": {"rail0": {"b": False}},
                                                  "b": {"rail0": {"a": True}}})
    assert result["failures"] == ["rail0: a cannot reach b over it at full MTU (ping with "
                                  "DF set)"]
    assert rail_gate(links, 200, False, pings={"a": {"rail0": {"b": True}}})["passed"]


def test_gate_never_passes_without_any_healthy_rail():
    links = {"a": {"rail0": down()}, "b": {"rail0": down()}}
    assert not rail_gate(links, 200, allow_single_rail=True)["passed"]


def test_pcie_ceiling_of_a_gen5_x4_connectx7_function_from_lspci():
    """LnkCap and LnkSta of a ConnectX-7 function in a GB10 box (real
    capture): Gen5 x4, about 115 Gb/s through PCIe; the same box's
    ib_write_bw measured 108.32 Gb/s (the other capture), under it."""
    text = (FIXTURES / "hardware" / "lspci_cx7_lnkcap_lnksta_grep_gen5_x4_hp_zgx_stondo_blog_partial.txt").read_text()
    cap, sta = [line for line in text.splitlines() if line.strip().startswith(("LnkCap:", "LnkSta:"))]
    assert rdma_link.parse_pcie_link(sta) == {"gts": 32.0, "width": 4, "generation": 5}
    assert rdma_link.parse_pcie_link(cap) == {"gts": 32.0, "width": 4, "generation": 5}
    ceiling = rdma_link.pcie_ceiling_gbps(sta)
    assert 112 < ceiling < 118
    measured = (FIXTURES / "hardware" / "ib_write_bw_dgx_spark_single_fn_108g_D10_client_thinkoffapp.txt").read_text()
    assert "108.32" in measured and 108.32 < ceiling
    # a veth has no PCIe link; an untrained one no width
    assert rdma_link.parse_pcie_link(None) is None and rdma_link.pcie_ceiling_gbps("Speed 32GT/s, Width x0") is None


def test_a_pcie_link_trained_below_its_capability_fails_the_rail_naming_host_and_device(tmp_path):
    """The real LnkCap/LnkSta of a Spark's ConnectX-7 function (Gen5 x4 on
    both: nothing to say), then the sysfs of a function that trained at x2
    of its x4 (the kernel's own value forms): the rail fails, naming the
    host, the interface and both links."""
    text = (FIXTURES / "hardware" / "lspci_cx7_lnkcap_lnksta_grep_gen5_x4_hp_zgx_stondo_blog_partial.txt").read_text()
    cap, sta = [line for line in text.splitlines() if line.strip().startswith(("LnkCap:", "LnkSta:"))]
    assert rdma_link.pcie_downgrade(sta, cap) is None
    assert rdma_link.pcie_downgrade(None, cap) is None
    root = build_sysfs(tmp_path)
    device = root / "class" / "net" / "ens1f0np0" / "device"
    device.mkdir()
    for name, value in (("current_link_speed", "32.0 GT/s PCIe"), ("current_link_width", "2"),
                        ("max_link_speed", "32.0 GT/s PCIe"), ("max_link_width", "4")):
        (device / name).write_text(value + "\n")
    state = rail_state(str(root), RAIL)
    assert state["up"] and state["pcie_gbps"] == rdma_link.pcie_ceiling_gbps("Speed 32GT/s, Width x2")
    assert state["pcie_problem"] == ("PCIe link trained at Gen5 x2 (32 GT/s), below the Gen5 x4 (32 GT/s) it is "
                                     "capable of: reseat the card or check the slot")
    result = rail_gate({"spark-a": {"rail0": state}}, 200, False)
    assert not result["passed"] and result["failures"] == [
        "rail0: spark-a ens1f0np0: PCIe link trained at Gen5 x2 (32 GT/s), below the Gen5 x4 (32 GT/s) it is capable of: "
        "reseat the card or check the slot"]
    (device / "current_link_width").write_text("4\n")
    assert rail_state(str(root), RAIL)["pcie_problem"] is None


# ------------------------------------------------------------ the gate's probes

LAB = FIXTURES / "lab"
PROBES = [{"rail": "rail0", "interface": "ens1f0np0", "own": "198.19.0.1", "peer": "lab-worker1",
           "address": "198.19.0.2", "mtu": 9000},
          {"rail": "rail1", "interface": "ens1f1np1", "own": "198.19.1.1", "peer": "lab-worker1",
           "address": "198.19.1.2", "mtu": 9000}]


def runner(routes: dict, pings: dict, seen: list):
    """A node whose `ip -j route get` answers with the lab's real captures."""
    def run(argv):
        seen.append(argv)
        if argv[:4] == ["ip", "-j", "route", "get"]:
            name = routes.get(argv[4])
            return (0, (LAB / name).read_text(), "") if name else (2, "", "RTNETLINK answers: Network is unreachable")
        return pings.get(argv[-1], 1), "", ""
    return run


def test_a_probe_passes_when_the_ping_passed_through_the_rails_own_interface():
    assert rdma_link.route_dev((LAB / "ip_j_route_get_rail1_peer_lab_master.json").read_text()) == "ens1f1np1"
    seen: list = []
    routes = {"198.19.0.2": "ip_j_route_get_rail0_peer_lab_master.json",
              "198.19.1.2": "ip_j_route_get_rail1_peer_lab_master.json"}
    run = runner(routes, {"198.19.0.2": 0, "198.19.1.2": 0}, seen)
    assert rdma_link.probe_peers(PROBES, run, 3) == {"rail0": {"lab-worker1": True}, "rail1": {"lab-worker1": True}}
    pings = [argv for argv in seen if argv[0] == "ping"]
    assert sorted(p[-1] for p in pings) == ["198.19.0.2", "198.19.1.2"]
    assert all(p[p.index("-s") + 1] == "8972" and p[p.index("-M") + 1] == "do" and p[p.index("-c") + 1] == "3"
               for p in pings)


def test_a_failed_ping_a_missing_route_or_a_route_through_another_rail_fails_the_probe():
    routes = {"198.19.0.2": "ip_j_route_get_rail0_peer_lab_master.json"}
    assert rdma_link.probe_peers(PROBES, runner(routes, {"198.19.0.2": 1, "198.19.1.2": 0}, []), 3) == {
        "rail0": {"lab-worker1": False}, "rail1": {"lab-worker1": False}}
    # rail1's peer routed through rail0's interface: the ping passes, the rail does not carry it
    routes = {"198.19.0.2": "ip_j_route_get_rail0_peer_lab_master.json",
              "198.19.1.2": "ip_j_route_get_rail0_peer_lab_master.json"}
    assert rdma_link.probe_peers(PROBES, runner(routes, {"198.19.0.2": 0, "198.19.1.2": 0}, []), 3)["rail1"] == {
        "lab-worker1": False}
    assert rdma_link.probe_peers([], runner({}, {}, []), 3) == {}
