"""The lab's topology, read from the inventory (nodes, management
addresses, rails and their ends), the names it gives the containers,
networks and switches, and how the lab runs a command (argv, never a
shell; a failure is a LabError the operator can act on). tools/lab.py
brings the lab up from it; lab_image.py makes its nodes' image and
lab_cables.py lays its rails."""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# the lab belongs to the machine, not to a checkout (inventory/lab says why)
STATE_DIR = Path.home() / ".local" / "state" / "twinrail-lab"
LABEL = "twinrail.lab"


class LabError(Exception):
    """An error the operator can act on; printed without a traceback."""


def run(argv: list[str], *, check: bool = True, capture: bool = True,
        input_bytes: bytes | None = None) -> subprocess.CompletedProcess:
    """Run argv (never a shell string) with a C locale."""
    env = dict(os.environ, LC_ALL="C.UTF-8")
    proc = subprocess.run(argv, capture_output=capture, input=input_bytes,
                          env=env, check=False)
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip() if capture else ""
        raise LabError(f"command failed ({proc.returncode}): {' '.join(argv)}\n{err}")
    return proc


def out(argv: list[str]) -> str:
    return run(argv).stdout.decode().strip()


def log(msg: str) -> None:
    print(f"lab: {msg}", flush=True)


@dataclass
class Rail:
    name: str
    # (node, interface) for every node on the rail, master first
    ends: list[tuple[str, str]] = field(default_factory=list)
    # the largest MTU an end uses (a switch must carry it on every port)
    mtu: int = 1500

    @property
    def direct(self) -> bool:
        """Two ends: a direct cable (veth pair). More: a switch."""
        return len(self.ends) == 2


@dataclass
class Node:
    name: str
    role: str  # master | worker
    address: str  # management IPv4 address, no prefix
    publish: list[str] = field(default_factory=list)
    memory_mb: int = 0  # the container's memory limit (its cgroup's), 0: none
    shm_mb: int = 0  # the size of its /dev/shm, 0: Docker's (64 MiB)


@dataclass
class Topology:
    lab: str
    mgmt_subnet: str
    nodes: list[Node]
    rails: list[Rail]
    # the service proxy's first account (inference_service_users), for `service`
    service_user: str = ""

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise LabError(f"no node '{name}' in the lab inventory; nodes: "
                       f"{', '.join(n.name for n in self.nodes)}")

    def rail(self, name: str) -> Rail:
        for rail in self.rails:
            if rail.name == name:
                return rail
        raise LabError(f"no rail '{name}' in the lab inventory; rails: "
                       f"{', '.join(r.name for r in self.rails)}")


def _group_hosts(inv: dict, group: str) -> list[str]:
    """Hosts of a group and of its children, in inventory order."""
    found: list[str] = []
    entry = inv.get(group, {})
    for host in entry.get("hosts", []):
        if host not in found:
            found.append(host)
    for child in entry.get("children", []):
        for host in _group_hosts(inv, child):
            if host not in found:
                found.append(host)
    return found


def topology_from_inventory(inv: dict) -> Topology:
    """Build the lab topology from ``ansible-inventory --list`` output.

    Raises LabError naming the variable and host when the inventory cannot
    describe a lab (the preflight stage validates the rest).
    """
    hostvars = inv.get("_meta", {}).get("hostvars", {})
    masters = _group_hosts(inv, "master")
    workers = _group_hosts(inv, "workers")
    if len(masters) != 1:
        raise LabError(f"group 'master' must have exactly one host, has {masters}")
    if not workers:
        raise LabError("group 'workers' must have at least one host")
    any_vars = hostvars.get(masters[0], {})
    lab = any_vars.get("twinrail_lab_name")
    subnet = any_vars.get("twinrail_lab_mgmt_subnet")
    if not lab or not subnet:
        raise LabError("twinrail_lab_name and twinrail_lab_mgmt_subnet must be set "
                       "(inventory/lab/group_vars/all/lab.yml)")
    nodes: list[Node] = []
    rails: dict[str, Rail] = {}
    for name in masters + workers:
        hv = hostvars.get(name, {})
        mgmt = hv.get("twinrail_mgmt_address")
        try:
            addr = str(ipaddress.ip_interface(mgmt).ip)
        except ValueError as exc:
            raise LabError(f"{name}: twinrail_mgmt_address: expected address/prefix "
                           f"such as 198.18.0.10/24, got {mgmt!r}") from exc
        memory = hv.get("twinrail_lab_memory_mb", 0)
        if not isinstance(memory, int) or isinstance(memory, bool) or memory < 0 or 0 < memory < 1024:
            raise LabError(f"{name}: twinrail_lab_memory_mb: expected a whole number of MiB, at least 1024 "
                           f"(0 for no limit), got {memory!r}")
        shm = hv.get("twinrail_lab_shm_mb", 0)
        if not isinstance(shm, int) or isinstance(shm, bool) or shm < 0:
            raise LabError(f"{name}: twinrail_lab_shm_mb: expected a whole number of MiB (0 for Docker's 64 MiB), "
                           f"got {shm!r}")
        nodes.append(Node(name=name, role="master" if name in masters else "worker",
                          address=addr, publish=list(hv.get("twinrail_lab_publish", [])),
                          memory_mb=memory, shm_mb=shm))
        for item in hv.get("twinrail_rails") or []:
            rail = rails.setdefault(item["name"], Rail(item["name"]))
            rail.ends.append((name, item["interface"]))
            mtu = item.get("mtu") or hv.get("twinrail_rail_mtu") or 1500
            try:
                rail.mtu = max(rail.mtu, int(mtu))
            except (TypeError, ValueError) as exc:
                raise LabError(f"{name}: twinrail_rails[{item['name']}].mtu / twinrail_rail_mtu: expected a "
                               f"whole number such as 9000, got {mtu!r}") from exc
    users = any_vars.get("inference_service_users") or []
    user = users[0].get("name", "") if users and isinstance(users[0], dict) else ""
    return Topology(lab=lab, mgmt_subnet=subnet, nodes=nodes, rails=list(rails.values()), service_user=user)


def load_topology(inventory: Path) -> Topology:
    exe = shutil.which("ansible-inventory") or str(Path(sys.executable).parent / "ansible-inventory")
    if not Path(exe).exists():
        raise LabError("ansible-inventory is not installed for this Python: run `make venv` "
                       "and use .venv/bin/python tools/lab.py (or `make lab-up`)")
    proc = run([exe, "-i", str(inventory), "--list"])
    return topology_from_inventory(json.loads(proc.stdout))


def container_name(topo: Topology, node: str) -> str:
    return f"{topo.lab}-{node}"


def network_name(topo: Topology) -> str:
    return f"{topo.lab}-mgmt"


SWITCH_NS_PREFIX = "twinrail-sw-"


def switch_netns(topo: Topology, rail: str) -> str:
    """The namespace that holds a rail's switch (more than two nodes)."""
    return f"{SWITCH_NS_PREFIX}{topo.lab}-{rail}"


def switch_port(node: str) -> str:
    """Interface name of a node's port in a rail switch (15 characters max)."""
    return ("p-" + node)[:15]


def container_state(name: str) -> dict | None:
    proc = run(["docker", "inspect", name], check=False)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout)[0]


def container_pid(topo: Topology, node: str) -> int:
    state = container_state(container_name(topo, node))
    if not state or not state["State"]["Running"]:
        raise LabError(f"node '{node}' is not running: `tools/lab.py up` first")
    return int(state["State"]["Pid"])


# The container's first process holds the node's boot until the lab says the
# hardware is there (its cables laid, its net sysctls writable): then it
# becomes systemd. /run is a fresh tmpfs at every container start, so a
# power cut takes the flag away with everything else.
POWER_GOOD = "/run/twinrail-lab-power-good"


def powered_on(topo: Topology, node: str) -> bool:
    return run(["docker", "exec", container_name(topo, node), "test", "-e", POWER_GOOD],
               check=False).returncode == 0
