"""`twinrail init`'s decisions on what the boxes said: the discovery of the
converged lab's two nodes (tests/fixtures/lab/twinrail_init_discover_*,
the program init runs over SSH, captured), and each refusal as that
capture with one thing changed, as the box would report it. Nothing is
written on a refusal; an existing site is left as it is."""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from conftest import FIXTURES, REPO

from twinrail.ctl import main, site

NODES = [("lab-master", "198.18.0.10"), ("lab-worker1", "198.18.0.11")]
FOUND = {name: json.loads((FIXTURES / "lab" / f"twinrail_init_discover_converged_lab_{name[4:]}.json").read_text())
         for name, _ in NODES}
LAB = yaml.safe_load((REPO / "profiles" / "lab.yml").read_text())
SPARK = yaml.safe_load((REPO / "profiles" / "dgx-spark.yml").read_text())
SUBNETS = ["198.19.0.0/24", "198.19.1.0/24"]


def bare_rails(*hosts: str) -> dict:
    """The capture with those boxes' rail ports holding no address yet (a
    fresh box, before the rdma stage)."""
    found = copy.deepcopy(FOUND)
    for host in hosts:
        for entry in found[host]["addresses"]:
            if entry["ifname"].startswith("ens1"):
                entry["addr_info"] = []
    return found


def test_the_lab_found_is_the_lab_inventory():
    """The rails init finds on the lab's boxes are inventory/lab's: names,
    interfaces, addresses (kept: the ports hold them already)."""
    decided = site.plan(NODES, FOUND, LAB, SUBNETS)
    assert decided["problems"] == []
    for name, _ in NODES:
        lab = yaml.safe_load((REPO / "inventory" / "lab" / "host_vars" / f"{name}.yml").read_text())
        got = decided["hosts"][name]
        assert [(r["name"], r["interface"], r["address"]) for r in got["rails"]] == [
            (r["name"], r["interface"], r["address"]) for r in lab["twinrail_rails"]]
        assert got["mgmt_address"] == lab["twinrail_mgmt_address"] and got["management"] == "eth0"


def test_ports_without_an_address_get_one_subnet_per_rail():
    found = bare_rails(*FOUND)
    decided = site.plan(NODES, found, LAB, ["10.100.0.0/30", "10.100.1.0/30"])
    assert [r["address"] for r in decided["hosts"]["lab-master"]["rails"]] == ["10.100.0.1/30", "10.100.1.1/30"]
    assert [r["address"] for r in decided["hosts"]["lab-worker1"]["rails"]] == ["10.100.0.2/30", "10.100.1.2/30"]


def test_refusals_name_the_box_and_the_reason():
    found = copy.deepcopy(FOUND)
    found["lab-worker1"] = {"unreachable": "NoValidConnectionsError: Unable to connect to port 22 on 198.18.0.11"}
    assert site.plan(NODES, found, LAB, SUBNETS)["problems"] == [
        "lab-worker1 (198.18.0.11): unreachable: NoValidConnectionsError: Unable to connect to port 22 on 198.18.0.11"]
    # a cable pulled: the worker's rail1 has no carrier, the rails do not pair up
    found = copy.deepcopy(FOUND)
    next(p for p in found["lab-worker1"]["ports"] if p["name"] == "ens1f1np1")["carrier"] = "0"
    assert site.plan(NODES, found, LAB, SUBNETS)["problems"] == [
        "the rails do not pair up: cabled ports per box lab-master 2, lab-worker1 1"]
    for port in found["lab-worker1"]["ports"]:
        port["carrier"] = "0"
    assert "lab-worker1 (198.18.0.11): no cabled rail: no port with a carrier besides the management one" in \
        site.plan(NODES, found, LAB, SUBNETS)["problems"]
    # the boxes are not what the profile says
    problems = site.plan(NODES, FOUND, SPARK, SUBNETS)["problems"]
    assert "lab-master (198.18.0.10): architecture x86_64, the profile expects aarch64" in problems
    assert ("lab-master (198.18.0.10): no NVIDIA GPU answers nvidia-smi (nvidia-smi is not installed), the profile "
            "expects one") in problems
    assert "lab-worker1 (198.18.0.11): no RDMA device (/sys/class/infiniband is empty), the profile expects one" \
        in problems


def test_init_writes_the_site_and_its_vault_and_refuses_to_write_over_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(site, "discover", lambda host, *a, **k: FOUND[dict((b, a) for a, b in NODES)[host]])
    argv = ["init", "lab2", "--profile", "lab", "--node", "lab-master=198.18.0.10", "--node",
            "lab-worker1=198.18.0.11", "--user", "twinrail", "--rail-subnets", ",".join(SUBNETS),
            "--root", str(tmp_path / "inventory")]
    assert main.main(argv) == 0
    out = capsys.readouterr().out
    assert "lab-master     198.18.0.10     x86_64" in out and "rail1 ens1f1np1 198.19.1.2/24 (no RDMA device)" in out
    assert f"--vault-password-file {tmp_path / 'config' / 'twinrail' / 'lab2' / 'vault-pass'}" in out
    inv = tmp_path / "inventory" / "lab2"
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    assert list(hosts["all"]["children"]["cluster"]["children"]["master"]["hosts"]) == ["lab-master"]
    worker = yaml.safe_load((inv / "host_vars" / "lab-worker1.yml").read_text())
    assert worker["twinrail_mgmt_address"] == "198.18.0.11/24" and len(worker["twinrail_rails"]) == 2
    settings = yaml.safe_load((inv / "group_vars" / "cluster" / "main.yml").read_text())
    assert settings["twinrail_profile"] == "lab"
    # the service and SSH open to the management network the boxes were found on
    assert settings["inference_service_client_networks"] == ["198.18.0.0/24"]
    assert settings["inference_service_admin_networks"] == ["198.18.0.0/24"]
    vault = (inv / "group_vars" / "cluster" / "vault.yml").read_bytes()
    assert vault.startswith(b"$ANSIBLE_VAULT;1.1;AES256")
    # again: nothing changes without --force
    assert main.main(argv) == 2
    assert "exists: nothing was changed (--force writes it again)" in capsys.readouterr().err
    assert (inv / "group_vars" / "cluster" / "vault.yml").read_bytes() == vault
    # a refusal writes nothing
    assert main.main(["init", "lab3", "--profile", "dgx-spark"] + argv[4:]) == 2
    assert "init: nothing was written: lab-master (198.18.0.10): architecture x86_64" in capsys.readouterr().err
    assert not (tmp_path / "inventory" / "lab3").exists()


def test_subnets_too_small_malformed_or_colliding_and_a_host_name_are_refused():
    found = bare_rails(*FOUND)
    assert site.plan(NODES, found, LAB, ["10.100.0.0/31", "10.100.1.0/30"])["problems"] == [
        "--rail-subnets: 10.100.0.0/31 holds 0 host addresses, 2 nodes need one each"]
    assert site.plan(NODES, found, LAB, ["10.100.0/24", "10.100.1.0/24"])["problems"][0].startswith(
        "--rail-subnets: expected networks like 192.168.100.0/24, got '10.100.0/24'")
    # lab-worker1 named first (the master) with bare ports: it would be given .1, which lab-master holds
    half = bare_rails("lab-worker1")
    assert site.plan(NODES[::-1], half, LAB, ["198.19.0.0/24", "198.19.1.0/24"])["problems"][0].startswith(
        "the rails' addresses collide: 198.19.0.1, 198.19.1.1 on more than one port")
    # reached by a name the box does not hold
    named = [("lab-master", "lab-master.example"), ("lab-worker1", "198.18.0.11")]
    assert site.plan(named, FOUND, LAB, SUBNETS)["problems"] == [
        "lab-master (lab-master.example): no port of the box holds lab-master.example, the address it was reached "
        "on (a host name or a translated address?): give --node the management address the box holds"]


def test_the_vault_password_file_is_taken_before_or_after_init(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(site, "discover", lambda host, *a, **k: FOUND[dict((b, a) for a, b in NODES)[host]])
    password = tmp_path / "mine"
    password.write_text("a password of mine\n")
    password.chmod(0o600)
    argv = ["init", "lab2", "--profile", "lab", "--node", "lab-master=198.18.0.10", "--node",
            "lab-worker1=198.18.0.11", "--user", "twinrail", "--rail-subnets", ",".join(SUBNETS),
            "--root", str(tmp_path / "inventory")]
    assert main.main(["--vault-password-file", str(password)] + argv) == 0
    assert f"password   {password} (mode 0600" in capsys.readouterr().out
    assert not (tmp_path / "config" / "twinrail" / "lab2" / "vault-pass").exists()
    # a password file others may read is refused, and nothing of the site is written
    password.chmod(0o644)
    assert main.main(["--vault-password-file", str(password)] + argv[:1] + ["lab3"] + argv[2:]) == 2
    assert "readable by others (mode 644); chmod 600 it" in capsys.readouterr().err
    assert not any((tmp_path / "inventory" / "lab3").glob("**/*.yml"))


def test_the_lab_quick_start_is_inits_command_for_inventory_lab(tmp_path, monkeypatch, capsys):
    """docs/development.md's block, which `make molecule` runs on the fresh
    lab (tools/lab_quickstart.py), is a `twinrail init` the CLI accepts for
    inventory/lab's nodes and addresses, and copies the lab's settings
    beside what it writes: the block and the inventory cannot drift apart."""
    import shlex
    import sys

    sys.path.insert(0, str(REPO / "tools"))
    import lab_quickstart  # pylint: disable=import-outside-toplevel

    block = lab_quickstart.block((REPO / "docs" / "development.md").read_text())
    commands = [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]
    commands = [c for c in commands if c]
    assert [c[0] for c in commands] == [".venv/bin/twinrail", "cp"], commands
    init = commands[0][1:]
    lab_hosts = {name: yaml.safe_load((REPO / "inventory" / "lab" / "host_vars" / f"{name}.yml").read_text())
                 for name, _ in NODES}
    nodes = [arg.split("=", 1) for prev, arg in zip(init, init[1:]) if prev == "--node"]
    assert nodes == [[name, lab_hosts[name]["ansible_host"]] for name, _ in NODES]
    assert init[:2] == ["init", lab_quickstart.SITE]
    # what the CLI makes of it, on the lab's captured boxes with bare rails
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    bare = bare_rails("lab-master", "lab-worker1")
    monkeypatch.setattr(site, "discover", lambda host, *a, **k: bare[dict((b, a) for a, b in NODES)[host]])
    assert main.main(init + ["--root", str(tmp_path / "inventory")]) == 0, capsys.readouterr().err
    for name, _ in NODES:
        written = yaml.safe_load((tmp_path / "inventory" / "labsite" / "host_vars" / f"{name}.yml").read_text())
        assert [r["address"] for r in written["twinrail_rails"]] == [
            r["address"] for r in lab_hosts[name]["twinrail_rails"]]
    copied = commands[1][1:]
    assert copied[-1] == "inventory/labsite/group_vars/cluster/"
    assert sorted(copied[:-1]) == sorted(f"inventory/lab/group_vars/cluster/{p.name}" for p in
                                         (REPO / "inventory" / "lab" / "group_vars" / "cluster").glob("*.yml"))
