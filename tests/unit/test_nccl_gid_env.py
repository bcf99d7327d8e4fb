"""The vLLM group's NCCL RoCE GID, from the node's own GID tables.

Each rail's RDMA port is laid out as sysfs shows it (/sys/class/infiniband/
<device>/ports/<n>/{link_layer,gids,gid_attrs}) from real `ibv_devinfo -v`
captures (tests/fixtures/rdma-gids/SOURCES.md), read by rail_state as
rdma_link_facts reads a node, and turned into the engine's environment
(module_utils/engines/vllm/layout.py: serve_env, nccl_gid_env)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import FIXTURES, filter_plugins

from ansible.errors import AnsibleFilterError
from ansible.module_utils.engines.vllm.layout import nccl_gid_env, serve_env
from ansible.module_utils.rails.rdma_link import parse_ibv_devinfo, rail_state

GIDS = FIXTURES / "rdma-gids"
RXE = "ibv_devinfo_v_softroce_rxe0_rxe1_two_devices_roce_v2_ipv4_gid1_wsl_blog.txt"
CX5 = "ibv_devinfo_v_connectx5_rocep0s6_two_link_local_pairs_roce_v2_ipv4_gid5_martins3_blog.txt"
CX6 = "ibv_devinfo_v_d_mlx5_0_connectx6_roce_v2_ipv4_gid3_scaleoutsean_blog.txt"
IB = "ibv_devinfo_v_connectx3_mlx4_1_infiniband_port2_down_gid0_heioy_books.txt"
NO_IPV4 = "ibv_devinfo_v_connectx4lx_connectx5_three_devices_no_gid_type_suffix_two_ports_fe80_only_magnate3_bond_md.txt"


def lay_out(root: Path, capture: str, device: str, interface: str) -> None:
    """The captured device's first listed port as sysfs holds it: its state,
    link layer and GID table (index, GID, type) from the capture; the
    interface up (what the capture does not show, and nccl_gid_env does not read)."""
    info = parse_ibv_devinfo((GIDS / capture).read_text())[device]
    number, port = next(iter(sorted(info["ports"].items())))
    base = root / "class" / "infiniband" / device / "ports" / str(number)
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "state").write_text(f"{port.get('state_code')}: {port.get('state')}\n")
    (base / "phys_state").write_text("5: LinkUp\n")
    (base / "rate").write_text("100 Gb/sec (4X EDR)\n")
    (base / "link_layer").write_text(f"{port['link_layer']}\n")
    for index, gid in port["gids"].items():
        (base / "gids" / str(index)).write_text(gid["gid"] + "\n")
        (base / "gid_attrs" / "types" / str(index)).write_text(gid["type"] + "\n")
        (base / "gid_attrs" / "ndevs" / str(index)).write_text(interface + "\n")
    net = root / "class" / "net" / interface
    net.mkdir(parents=True, exist_ok=True)
    for name, value in (("operstate", "up"), ("carrier", "1"), ("speed", "100000"), ("mtu", "9000")):
        (net / name).write_text(value + "\n")


def links(tmp_path: Path, rails: list[tuple]) -> dict:
    """rdma_link_facts' `rails` for (name, capture, device, interface, address)."""
    out = {}
    for name, capture, device, interface, address in rails:
        lay_out(tmp_path, capture, device, interface)
        out[name] = rail_state(str(tmp_path), {"name": name, "interface": interface, "rdma_device": device,
                                               "address": address})
    return out


def gpu_env(found: dict) -> dict:
    devices = [link["rdma_device"] for _, link in sorted(found.items())]
    return serve_env(interface="eth0", address="192.168.96.110", gpu=True, rdma_devices=devices, kvcache_gib=1,
                     threads_bind="auto", host="node-a", links=found)


def test_two_roce_rails_at_the_same_index_give_nccl_that_index(tmp_path):
    found = links(tmp_path, [("rail0", RXE, "rxe_0", "eth0", "192.168.96.110/24"),
                             ("rail1", RXE, "rxe_1", "eth1", "192.168.96.111/24")])
    assert [found[r]["gid_index"] for r in ("rail0", "rail1")] == [1, 1]
    env = gpu_env(found)
    assert env["NCCL_IB_HCA"] == "=rxe_0,rxe_1" and env["NCCL_IB_GID_INDEX"] == "1"
    assert "NCCL_IB_ROCE_VERSION_NUM" not in env


def test_the_roce_v2_gid_of_the_address_not_its_v1_twin_nor_a_link_local_one(tmp_path):
    # GID 4 holds 10.0.3.1 as RoCE v1, 5 as RoCE v2; 0-3 are two link-local pairs
    found = links(tmp_path, [("rail0", CX5, "rocep0s6", "ens6", "10.0.3.1/24")])
    assert gpu_env(found)["NCCL_IB_GID_INDEX"] == "5"


def test_rails_whose_indexes_differ_let_nccl_choose_each_devices_roce_v2_ipv4_gid(tmp_path):
    found = links(tmp_path, [("rail0", CX5, "rocep0s6", "ens6", "10.0.3.1/24"),
                             ("rail1", CX6, "mlx5_0", "ens1f0", "192.168.1.11/24")])
    assert [found[r]["gid_index"] for r in ("rail0", "rail1")] == [5, 3]
    env = gpu_env(found)
    assert "NCCL_IB_GID_INDEX" not in env
    assert env["NCCL_IB_ROCE_VERSION_NUM"] == "2" and env["NCCL_IB_ADDR_FAMILY"] == "AF_INET"


def test_an_infiniband_port_needs_no_gid(tmp_path):
    found = links(tmp_path, [("rail0", IB, "mlx4_1", "ib1", "10.1.0.1/24")])
    assert found["rail0"]["port"]["link_layer"] == "InfiniBand"
    assert nccl_gid_env("node-a", found) == {}


def test_a_roce_rail_whose_table_lacks_its_address_is_refused_naming_node_rail_and_device(tmp_path):
    # mlx5_0's table holds link-local GIDs only: the interface has no IPv4 address
    found = links(tmp_path, [("rail0", RXE, "rxe_0", "eth0", "192.168.96.110/24"),
                             ("rail1", NO_IPV4, "mlx5_0", "ens2f0", "198.19.1.1/24")])
    with pytest.raises(ValueError) as caught:
        gpu_env(found)
    assert str(caught.value) == (
        "node-a: rail1 (mlx5_0): no RoCE v2 GID holds its address 198.19.1.1 (the port's GID table, "
        "/sys/class/infiniband/mlx5_0/ports/1/gids): give ens2f0 the rail's address, or run the rdma stage on "
        "this node")
    # through the filter the service stage calls, as the error Ansible prints
    with pytest.raises(AnsibleFilterError, match="twinrail_vllm_serve_env: node-a: rail1 \\(mlx5_0\\)"):
        filter_plugins().serve_env({"interface": "eth0", "address": "192.168.96.110", "gpu": True,
                                    "rdma_devices": ["rxe_0", "mlx5_0"], "kvcache_gib": 1, "threads_bind": "auto",
                                    "host": "node-a", "links": found})


def test_without_gpus_or_rdma_devices_no_nccl_gid_is_asked(tmp_path):
    cpu = serve_env(interface="eth0", address="10.0.0.1", gpu=False, rdma_devices=["rxe_0"], kvcache_gib=1,
                    threads_bind="auto", host="node-a", links={})
    assert not [k for k in cpu if k.startswith("NCCL_")]
    tcp = serve_env(interface="eth0", address="10.0.0.1", gpu=True, rdma_devices=[""], kvcache_gib=1,
                    threads_bind="auto", host="node-a", links={})
    assert tcp["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_GID_INDEX" not in tcp
