"""tools/lab.py: the topology it reads from the inventory (lab_topology.py),
its image's tag (lab_image.py), and its errors.

The lab's inventory is read through the real `ansible-inventory --list`;
the machinery that makes containers and cables is exercised for real by
the molecule scenarios.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest

import lab
import lab_image
import lab_topology

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(name="inv", scope="module")
def fixture_inv() -> dict:
    out = subprocess.run(["ansible-inventory", "-i", str(REPO / "inventory" / "lab"),
                          "--list"], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_lab_inventory_makes_two_nodes_and_two_direct_cables(inv):
    topo = lab_topology.topology_from_inventory(inv)
    assert topo.lab == "twinrail"
    assert [(n.name, n.role, n.address) for n in topo.nodes] == [
        ("lab-master", "master", "198.18.0.10"), ("lab-worker1", "worker", "198.18.0.11")]
    assert [(r.name, r.direct, r.ends) for r in topo.rails] == [
        ("rail0", True, [("lab-master", "ens1f0np0"), ("lab-worker1", "ens1f0np0")]),
        ("rail1", True, [("lab-master", "ens1f1np1"), ("lab-worker1", "ens1f1np1")])]
    assert topo.node("lab-master").publish == ["127.0.0.1:8443:443"]
    assert [n.memory_mb for n in topo.nodes] == [4096, 4096]
    assert lab_topology.container_name(topo, "lab-master") == "twinrail-lab-master"


def test_more_workers_need_a_switch_per_rail(inv):
    inv = copy.deepcopy(inv)
    hv = inv["_meta"]["hostvars"]
    hv["lab-worker2"] = copy.deepcopy(hv["lab-worker1"])
    hv["lab-worker2"]["twinrail_mgmt_address"] = "198.18.0.12/24"
    inv["workers"]["hosts"].append("lab-worker2")
    topo = lab_topology.topology_from_inventory(inv)
    assert [n.name for n in topo.nodes] == ["lab-master", "lab-worker1", "lab-worker2"]
    assert all(not r.direct and len(r.ends) == 3 for r in topo.rails)
    assert lab_topology.switch_netns(topo, "rail0") == "twinrail-sw-twinrail-rail0"
    assert len(lab_topology.switch_port("a-very-long-node-name")) <= 15


def test_bad_management_address_names_host_and_variable(inv):
    inv = copy.deepcopy(inv)
    inv["_meta"]["hostvars"]["lab-worker1"]["twinrail_mgmt_address"] = "198.18.0.300/24"
    with pytest.raises(lab_topology.LabError, match="lab-worker1: twinrail_mgmt_address: expected "
                                           "address/prefix"):
        lab_topology.topology_from_inventory(inv)


def test_unknown_rail_and_node_are_named(inv):
    topo = lab_topology.topology_from_inventory(inv)
    with pytest.raises(lab_topology.LabError, match="no rail 'rail9'.*rails: rail0, rail1"):
        topo.rail("rail9")
    with pytest.raises(lab_topology.LabError, match="no node 'nope'"):
        topo.node("nope")


def test_image_tag_follows_the_recipe(tmp_path, monkeypatch):
    """Editing the recipe changes the tag, so `up` rebuilds the image."""
    before = lab_image.image_tag()
    for name in ("packages.txt", "recipe.sh"):
        (tmp_path / name).write_bytes((lab_image.IMAGE_DIR / name).read_bytes())
    monkeypatch.setattr(lab_image, "IMAGE_DIR", tmp_path)
    assert lab_image.image_tag() == before
    with (tmp_path / "packages.txt").open("a") as handle:
        handle.write("htop\n")
    assert lab_image.image_tag() != before
    assert "htop" in lab_image.image_packages()


@pytest.mark.parametrize("memory", ["4g", 512, -1, True])
def test_bad_memory_limit_names_host_and_variable(inv, memory):
    inv = copy.deepcopy(inv)
    inv["_meta"]["hostvars"]["lab-worker1"]["twinrail_lab_memory_mb"] = memory
    with pytest.raises(lab_topology.LabError, match=r"lab-worker1: twinrail_lab_memory_mb: expected a whole number of MiB"):
        lab_topology.topology_from_inventory(inv)


@pytest.mark.parametrize("shm", ["1g", -1, True])
def test_bad_shm_size_names_host_and_variable(inv, shm):
    inv = copy.deepcopy(inv)
    inv["_meta"]["hostvars"]["lab-master"]["twinrail_lab_shm_mb"] = shm
    with pytest.raises(lab_topology.LabError, match=r"lab-master: twinrail_lab_shm_mb: expected a whole number of MiB"):
        lab_topology.topology_from_inventory(inv)


def test_the_vllm_lab_gives_its_nodes_a_host_sized_shm(inv):
    inv = copy.deepcopy(inv)
    assert {n.shm_mb for n in lab_topology.topology_from_inventory(inv).nodes} == {0}
    for host in ("lab-master", "lab-worker1"):
        inv["_meta"]["hostvars"][host]["twinrail_lab_shm_mb"] = 1024
    assert {n.shm_mb for n in lab_topology.topology_from_inventory(inv).nodes} == {1024}


def test_testinfra_reaches_the_nodes_with_the_labs_own_key_and_known_hosts():
    """testinfra builds its ssh command from ansible-inventory's untemplated
    variables: a Jinja expression there became a key file named "{{ ... }}",
    which worked only while Ansible's ControlMaster sockets lived."""
    from testinfra.utils.ansible_runner import AnsibleRunner

    runner = AnsibleRunner(str(REPO / "inventory" / "lab"))
    for name in ("lab-master", "lab-worker1"):
        backend = runner.get_host(name).backend
        assert Path(backend.ssh_identity_file).expanduser() == lab_topology.STATE_DIR / "ssh" / "id_ed25519", name
        assert "{{" not in backend.ssh_extra_args, (name, backend.ssh_extra_args)
        known = [a.split("=", 1)[1] for a in backend.ssh_extra_args.split() if a.startswith("UserKnownHostsFile=")]
        assert [Path(k).expanduser() for k in known] == [lab_topology.STATE_DIR / "known_hosts"], name


def test_service_names_the_url_the_account_and_the_password_file_never_the_password(inv, capsys):
    topo = lab_topology.topology_from_inventory(inv)
    assert topo.service_user == "operator"
    assert lab.cmd_service(topo) == 0
    out = capsys.readouterr().out
    password = lab_topology.STATE_DIR / "service-password"
    assert "https://127.0.0.1:8443/" in out and f"password in {password}" in out
    assert f'curl -sk -u operator:"$(cat {password})" https://127.0.0.1:8443/v1/models' in out
    if password.exists():
        assert password.read_text().strip() not in out


def test_the_three_node_lab_is_switched_and_its_switches_carry_the_rails_mtu():
    out = subprocess.run(["ansible-inventory", "-i", str(REPO / "inventory" / "lab3"), "--list"],
                         capture_output=True, text=True, check=True).stdout
    topo = lab_topology.topology_from_inventory(json.loads(out))
    assert [(n.name, n.address) for n in topo.nodes] == [
        ("lab-master", "198.18.0.10"), ("lab-worker1", "198.18.0.11"), ("lab-worker2", "198.18.0.12")]
    assert all(not r.direct for r in topo.rails)
    # twinrail_rail_mtu (the lab's group_vars) on every port of the bridge, not the bridge's default 1500
    assert [(r.name, r.mtu) for r in topo.rails] == [("rail0", 9000), ("rail1", 9000)]


def test_a_rail_mtu_that_is_not_a_number_names_host_and_variable(inv):
    inv = copy.deepcopy(inv)
    inv["_meta"]["hostvars"]["lab-worker1"]["twinrail_rails"][1]["mtu"] = "jumbo"
    with pytest.raises(lab_topology.LabError, match=r"lab-worker1: twinrail_rails\[rail1\].mtu / twinrail_rail_mtu: "
                                           r"expected a whole number"):
        lab_topology.topology_from_inventory(inv)
