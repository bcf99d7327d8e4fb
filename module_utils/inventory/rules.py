# -*- coding: utf-8 -*-
"""Validation of a twinrail inventory, run on the controller before any host
is contacted.

The input is what the preflight play hands to the ``twinrail_inventory``
module: the inventory's groups and, for every host of ``cluster``, its
``twinrail_*`` variables (and ``ansible_host``). The output is a list of
sentences, one per defect, each naming the variable, the host and the
expected form. An empty list means the inventory is sound.

Kept free of Ansible imports so that unit tests and tools can call it alone.
"""

from __future__ import annotations

import ipaddress
import re

from ansible.module_utils.inventory.names import check_names
from ansible.module_utils.inventory.served import is_int, is_number, model_problems, weights_problems

MAX_WORKERS = 7
# Ethernet rails: 1280 (the IPv6 minimum) to 9216 (the largest jumbo frame
# that ConnectX and most switches accept).
MTU_MIN, MTU_MAX = 1280, 9216
RAIL_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,14}$")
# Linux interface names: 1 to 15 bytes, no slash, colon or white space.
IFNAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
RDMA_DEVICE_RE = re.compile(r"^[A-Za-z0-9_]{1,32}$")

# cluster-wide variables: name -> (kind, expected form)
BOOLEANS = ("twinrail_lab", "twinrail_tcp_fallback_allowed")
ABS_PATHS = ("twinrail_weights_root", "twinrail_runtime_root")
CLUSTER_WIDE = BOOLEANS + ABS_PATHS + (
    "twinrail_rail_mtu", "twinrail_rail_link_rate_gbps", "twinrail_bandwidth_min_ratio",
    "twinrail_bandwidth_aggregate_min_gbps", "twinrail_bandwidth_bidir_min_gbps",
    "twinrail_memory_soft_watermark_pct", "twinrail_memory_hard_watermark_pct",
    "twinrail_model", "twinrail_weights", "twinrail_profile", "twinrail_rail_fabric")
# how the rails are cabled: node to node (one worker) or through a switch per rail
RAIL_FABRICS = ("direct", "switch")
# a hardware profile's name (profiles/<name>.yml; the lookup names the known ones)
PROFILE_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
# one weight set: what the weights stage syncs (see check_weights)


def _show(value) -> str:
    if value is None:
        return "nothing (undefined)"
    return f"{value!r} ({type(value).__name__})"


class Validator:
    """Collects every defect of an inventory; call :meth:`run`."""

    def __init__(self, groups: dict, nodes: dict):
        self.groups = groups or {}
        self.nodes = nodes or {}
        self.errors: list[str] = []
        self.cluster_mtu = None

    def err(self, where: str, variable: str, expected: str, got) -> None:
        self.errors.append(f"{where}: {variable}: expected {expected}, got {_show(got)}")

    # -- groups ------------------------------------------------------------

    def check_groups(self) -> tuple[list[str], list[str]]:
        masters = list(self.groups.get("master") or [])
        workers = list(self.groups.get("workers") or [])
        cluster = list(self.groups.get("cluster") or [])
        if len(masters) != 1:
            self.errors.append(
                f"inventory: group 'master': expected exactly one host, got "
                f"{len(masters)} ({', '.join(masters) or 'none'})")
        if not 1 <= len(workers) <= MAX_WORKERS:
            self.errors.append(
                f"inventory: group 'workers': expected 1 to {MAX_WORKERS} hosts, got "
                f"{len(workers)} ({', '.join(workers) or 'none'})")
        for host in set(masters) & set(workers):
            self.errors.append(
                f"{host}: inventory: expected a host in either 'master' or 'workers', "
                f"got it in both")
        for host in cluster:
            if host not in masters and host not in workers:
                self.errors.append(
                    f"{host}: inventory: expected every host of 'cluster' in 'master' or 'workers', "
                    f"got it in neither (no stage would plan anything for it)")
        for host in masters + workers:
            if host not in cluster:
                self.errors.append(
                    f"{host}: inventory: expected every host of 'master' and 'workers' "
                    f"to be in group 'cluster', got it outside")
        return masters, [w for w in workers if w not in masters]

    # -- one node ------------------------------------------------------------

    def check_cluster_vars(self, host: str, hv: dict) -> None:
        if "twinrail_profile" in hv and not (isinstance(hv["twinrail_profile"], str)
                                             and PROFILE_RE.match(hv["twinrail_profile"])):
            self.err(host, "twinrail_profile", "the name of a hardware profile (a file profiles/<name>.yml)",
                     hv["twinrail_profile"])
        for name in BOOLEANS:
            if not isinstance(hv.get(name), bool):
                self.err(host, name, "a boolean (true or false)", hv.get(name))
        for name in ABS_PATHS:
            value = hv.get(name)
            if not isinstance(value, str) or not value.startswith("/"):
                self.err(host, name, "an absolute path", value)
        if "twinrail_rail_fabric" in hv and hv["twinrail_rail_fabric"] not in RAIL_FABRICS:
            self.err(host, "twinrail_rail_fabric", "direct (node to node cables, one worker) or switch (a switch "
                     "per rail)", hv["twinrail_rail_fabric"])
        mtu = hv.get("twinrail_rail_mtu")
        if not is_int(mtu) or not MTU_MIN <= mtu <= MTU_MAX:
            self.err(host, "twinrail_rail_mtu", f"an integer from {MTU_MIN} to {MTU_MAX}", mtu)
        rate = hv.get("twinrail_rail_link_rate_gbps")
        if not is_number(rate) or rate <= 0:
            self.err(host, "twinrail_rail_link_rate_gbps",
                     "a positive number of Gb/s (e.g. 200)", rate)
        ratio = hv.get("twinrail_bandwidth_min_ratio")
        if not is_number(ratio) or not 0 < ratio <= 1:
            self.err(host, "twinrail_bandwidth_min_ratio",
                     "a number above 0 and at most 1 (e.g. 0.9)", ratio)
        aggregate = hv.get("twinrail_bandwidth_aggregate_min_gbps")
        rails = hv.get("twinrail_rails") if isinstance(hv.get("twinrail_rails"), list) else []
        if not is_number(aggregate) or aggregate <= 0:
            self.err(host, "twinrail_bandwidth_aggregate_min_gbps",
                     "a positive number of Gb/s (e.g. 200)", aggregate)
        elif is_number(rate) and rate > 0 and rails and aggregate > len(rails) * rate:
            self.errors.append(
                f"{host}: twinrail_bandwidth_aggregate_min_gbps: expected at most the sum of "
                f"the rails' line rates ({len(rails)} x {rate:g} = {len(rails) * rate:g} Gb/s), "
                f"got {aggregate!r}")
        bidir = hv.get("twinrail_bandwidth_bidir_min_gbps")
        if not is_number(bidir) or bidir <= 0:
            self.err(host, "twinrail_bandwidth_bidir_min_gbps",
                     "a positive number of Gb/s, both directions together (e.g. 200)", bidir)
        elif is_number(rate) and rate > 0 and rails and bidir > 2 * len(rails) * rate:
            self.errors.append(
                f"{host}: twinrail_bandwidth_bidir_min_gbps: expected at most twice the sum of "
                f"the rails' line rates (2 x {len(rails)} x {rate:g} = {2 * len(rails) * rate:g} Gb/s), "
                f"got {bidir!r}")
        soft = hv.get("twinrail_memory_soft_watermark_pct")
        hard = hv.get("twinrail_memory_hard_watermark_pct")
        ok = True
        for name, value in (("twinrail_memory_soft_watermark_pct", soft),
                            ("twinrail_memory_hard_watermark_pct", hard)):
            if not is_number(value) or not 0 < value < 100:
                self.err(host, name, "a percentage above 0 and below 100", value)
                ok = False
        if ok and not soft < hard:
            self.errors.append(
                f"{host}: twinrail_memory_soft_watermark_pct / "
                f"twinrail_memory_hard_watermark_pct: expected soft < hard < 100, "
                f"got soft {soft} and hard {hard}")
        self.check_model(host, hv.get("twinrail_model"))
        if "twinrail_weights" in hv:
            self.check_weights(host, hv["twinrail_weights"])

    def check_weights(self, host: str, sets) -> None:
        """twinrail_weights: the weight sets to sync (inventory_served.py)."""
        for variable, expected, got in weights_problems(sets):
            self.err(host, variable, expected, got)

    def check_model(self, host: str, model) -> None:
        """twinrail_model: the model's figures (inventory_served.py)."""
        for variable, expected, got in model_problems(model):
            self.err(host, variable, expected, got)


    def check_gpus(self, host: str, hv: dict) -> None:
        """A node's GPU settings, where it sets them."""
        count = hv.get("twinrail_gpu_count")
        if count is not None and not (is_int(count) and count >= 1):
            self.err(host, "twinrail_gpu_count", "a whole number of GPUs, 1 or more (or unset)", count)
        width = hv.get("twinrail_gpu_pcie_min_width")
        if width is not None and not (is_int(width) and width in (1, 2, 4, 8, 16, 32)):
            self.err(host, "twinrail_gpu_pcie_min_width", "a PCIe width, one of 1, 2, 4, 8, 16, 32 (or unset)", width)
        mig = hv.get("twinrail_gpu_mig")
        if mig is not None and not isinstance(mig, bool):
            self.err(host, "twinrail_gpu_mig", "a boolean (true or false)", mig)
        share = hv.get("twinrail_gpu_memory_utilization")
        if share is not None and not (is_number(share) and 0 < share <= 1):
            self.err(host, "twinrail_gpu_memory_utilization", "a fraction above 0 and at most 1, such as 0.9", share)

    def check_node(self, host: str, hv: dict) -> list[dict]:
        """Check one node's own variables; return its sound rails."""
        self.check_gpus(host, hv)
        mgmt = hv.get("twinrail_mgmt_address")
        try:
            ipaddress.IPv4Interface(mgmt)
            if "/" not in mgmt:
                raise ValueError
        except (ValueError, TypeError, ipaddress.AddressValueError):
            self.err(host, "twinrail_mgmt_address",
                     "an IPv4 address with its prefix, such as 10.0.0.11/24", mgmt)
        rails = hv.get("twinrail_rails")
        if not isinstance(rails, list) or not rails:
            self.err(host, "twinrail_rails", "a non-empty list of rails "
                     "(name, interface, address, optional rdma_device and mtu)", rails)
            return []
        good = []
        names, ifaces = set(), set()
        for index, rail in enumerate(rails):
            where = f"twinrail_rails[{index}]"
            if not isinstance(rail, dict):
                self.err(host, where, "a mapping with name, interface and address", rail)
                continue
            sound = True
            name = rail.get("name")
            if not isinstance(name, str) or not RAIL_NAME_RE.match(name):
                self.err(host, f"{where}.name",
                         "a short lowercase name such as rail0 (letters, digits, '_')", name)
                sound = False
            elif name in names:
                self.err(host, f"{where}.name", "a rail name unique on the node", name)
                sound = False
            names.add(name)
            iface = rail.get("interface")
            if not isinstance(iface, str) or not IFNAME_RE.match(iface):
                self.err(host, f"{where}.interface",
                         "a Linux interface name of 1 to 15 characters", iface)
                sound = False
            elif iface in ifaces:
                self.err(host, f"{where}.interface", "an interface used by one rail only",
                         iface)
                sound = False
            ifaces.add(iface)
            dev = rail.get("rdma_device", "")
            if dev not in ("", None) and (not isinstance(dev, str)
                                          or not RDMA_DEVICE_RE.match(dev)):
                self.err(host, f"{where}.rdma_device",
                         "an RDMA device name such as mlx5_0, or empty for none", dev)
            mtu = rail.get("mtu")
            if mtu is not None and (not is_int(mtu) or not MTU_MIN <= mtu <= MTU_MAX):
                self.err(host, f"{where}.mtu", f"an integer from {MTU_MIN} to {MTU_MAX}", mtu)
                sound = False
            address = rail.get("address")
            iface_obj = None
            try:
                if not isinstance(address, str) or "/" not in address:
                    raise ValueError
                iface_obj = ipaddress.IPv4Interface(address)
                net = iface_obj.network
                if net.prefixlen < 31 and iface_obj.ip in (net.network_address,
                                                           net.broadcast_address):
                    self.err(host, f"{where}.address", "a host address, not the network "
                             f"or broadcast address of {net}", address)
                    sound = False
                if net.prefixlen == 32:
                    self.err(host, f"{where}.address",
                             "a prefix of /31 or shorter, so the peer fits", address)
                    sound = False
            except (ValueError, ipaddress.AddressValueError):
                self.err(host, f"{where}.address",
                         "an IPv4 address with its prefix, such as 10.10.0.1/30", address)
                sound = False
            if sound:
                good.append({"name": name, "interface": iface, "iface": iface_obj,
                             # without its own MTU a rail has the cluster's
                             "mtu": mtu if mtu is not None else self.cluster_mtu})
        return good

    # -- across nodes -------------------------------------------------------

    def check_rails_across(self, rails_by_host: dict) -> None:
        counts = {h: len(r) for h, r in rails_by_host.items()}
        if len(set(counts.values())) > 1:
            listing = ", ".join(f"{h} has {n}" for h, n in counts.items())
            self.errors.append(f"inventory: twinrail_rails: expected the same number of "
                               f"rails on every node, got {listing}")
            return
        by_name: dict[str, list[tuple[str, dict]]] = {}
        for host, rails in rails_by_host.items():
            for rail in rails:
                by_name.setdefault(rail["name"], []).append((host, rail))
        hosts = list(rails_by_host)
        missing = False
        for name, ends in by_name.items():
            for host in [h for h in hosts if h not in {e[0] for e in ends}]:
                missing = True
                self.errors.append(
                    f"{host}: twinrail_rails: expected a rail named '{name}' as on "
                    f"{ends[0][0]}, got none")
        if missing:
            return
        for name, ends in by_name.items():
            first_host, first = ends[0]
            for host, rail in ends[1:]:
                if rail["iface"].network != first["iface"].network:
                    self.errors.append(
                        f"{host}: twinrail_rails '{name}'.address: expected an address "
                        f"in {first['iface'].network} (the subnet of {first_host}'s end "
                        f"of '{name}'), got {rail['iface'].with_prefixlen}")
                if rail["mtu"] != first["mtu"]:
                    self.errors.append(
                        f"{host}: twinrail_rails '{name}'.mtu: expected the MTU of "
                        f"{first_host}'s end ({first['mtu']}), got {rail['mtu']!r}")
        # each rail on its own subnet, apart from the management networks
        nets = {name: ends[0][1]["iface"].network for name, ends in by_name.items()}
        names = list(nets)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if nets[a].overlaps(nets[b]):
                    self.errors.append(
                        f"inventory: twinrail_rails: expected each rail on its own "
                        f"subnet, got '{a}' ({nets[a]}) overlapping '{b}' ({nets[b]})")
        reported = set()
        for host in rails_by_host:
            try:
                mgmt = ipaddress.IPv4Interface(self.nodes[host].get("twinrail_mgmt_address"))
            except (ValueError, TypeError, ipaddress.AddressValueError):
                continue
            for name, net in nets.items():
                if net.overlaps(mgmt.network) and (name, mgmt.network) not in reported:
                    reported.add((name, mgmt.network))
                    self.errors.append(
                        f"{host}: twinrail_mgmt_address: expected a management network "
                        f"apart from the rails, got {mgmt.network} overlapping rail "
                        f"'{name}' ({net})")

    def check_unique_addresses(self, rails_by_host: dict) -> None:
        seen: dict[str, str] = {}
        for host, hv in self.nodes.items():
            try:
                ip = str(ipaddress.IPv4Interface(hv.get("twinrail_mgmt_address")).ip)
            except (ValueError, TypeError, ipaddress.AddressValueError):
                ip = None
            entries = [("twinrail_mgmt_address", ip)] if ip else []
            entries += [(f"twinrail_rails '{r['name']}'.address", str(r["iface"].ip))
                        for r in rails_by_host.get(host, [])]
            for variable, addr in entries:
                here = f"{host} {variable}"
                if addr in seen:
                    self.errors.append(
                        f"{host}: {variable}: expected an address unique in the cluster, "
                        f"got {addr}, already used by {seen[addr]}")
                else:
                    seen[addr] = here

    def check_fabric(self, fabric, workers: list[str]) -> None:
        """A direct cable joins two ports: one worker. More need a switch on
        each rail (a topology no stage can make: refused before any host is
        touched, scale.yml's growth included)."""
        if fabric == "direct" and len(workers) > 1:
            self.errors.append(
                f"inventory: group 'workers': expected one worker with twinrail_rail_fabric: direct (a rail's "
                f"cable joins two ports), got {len(workers)} ({', '.join(workers)}); more workers need a switch "
                f"on each rail: cable every node's rails to it and set twinrail_rail_fabric: switch")

    def check_consistency(self, ref_host: str, others: list[str]) -> None:
        """Cluster-wide settings must be the same on every node."""
        ref = self.nodes[ref_host]
        for key in CLUSTER_WIDE:
            for host in others:
                value = self.nodes[host].get(key)
                if value != ref.get(key):
                    self.errors.append(
                        f"{host}: {key}: expected the same value as on {ref_host} "
                        f"({ref.get(key)!r}) since it is cluster-wide, got {value!r}")

    def run(self) -> list[str]:
        masters, workers = self.check_groups()
        hosts = [h for h in masters + workers if h in self.nodes]
        for host in masters + workers:
            if host not in self.nodes:
                self.errors.append(f"{host}: inventory: expected its variables, got none "
                                   f"(is it in group 'cluster'?)")
        # cluster-wide settings: checked once, on the master (or the first
        # node), then required to be the same everywhere
        if hosts:
            self.cluster_mtu = self.nodes[hosts[0]].get("twinrail_rail_mtu")
            self.check_cluster_vars(hosts[0], self.nodes[hosts[0]])
            self.check_consistency(hosts[0], hosts[1:])
            if len(masters) == 1:  # a cluster's shape first: its cabling means nothing without it
                self.check_fabric(self.nodes[hosts[0]].get("twinrail_rail_fabric", "direct"), workers)
        rails_by_host = {}
        sound = True
        for host in hosts:
            before = len(self.errors)
            rails_by_host[host] = self.check_node(host, self.nodes[host])
            sound &= len(self.errors) == before
        # comparing rails across nodes only makes sense once each node's own
        # rails are sound; otherwise one typo would be reported three times
        if sound and rails_by_host:
            self.check_rails_across(rails_by_host)
            self.check_unique_addresses(rails_by_host)
        return self.errors


def validate(groups: dict, nodes: dict, names: dict | None = None, settings: set | None = None,
             prefixes: tuple | None = None) -> list[str]:
    """Every defect of the inventory, one sentence each (empty: sound).

    names: {host: every variable name it has}, checked against the known
    ones when given; settings: the stages' setting names; prefixes: the
    stages' setting prefixes (the registry's), required with names."""
    errors = Validator(groups, nodes).run()
    if names is not None:
        if prefixes is None:
            raise ValueError("validate: names given without the stages' prefixes (module_utils/stages/catalogue.py)")
        errors += check_names(names, settings or set(), prefixes)
    return errors
