"""The cluster as the Ansible inventory describes it, read through
`ansible-inventory -i INV --list` (the stable interface, not Ansible's
Python API): the master and the workers in order, how to reach each node
(address, user, port, key, known hosts, become) and what it should run
(rails, ports, watermarks)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from ..loader import REPO
from ansible.module_utils.engines import registry as engines
from ansible.module_utils.stages import catalogue as stages

# what the commands read beyond the nodes: stages' settings (the
# inventory's value, else the role's default read from its defaults file,
# the one place it lives) and cluster variables the inventory must set
ROLE_SETTINGS = ("inference_service_guard_port", "inference_service_listen_port", "inference_service_proxy_port",
                 "inference_service_rpc_port", "system_backup_record_dir", "monitoring_prometheus_port")
CLUSTER_SETTINGS = ("twinrail_memory_soft_watermark_pct", "twinrail_memory_hard_watermark_pct", "twinrail_rail_mtu")
# the monitoring stage's units: their failure blinds the operators, it does not stop the service
MONITORING_UNITS = {"master": ["prometheus-node-exporter.service", "prometheus.service",
                               "prometheus-alertmanager.service"],
                    "worker": ["prometheus-node-exporter.service", "twinrail-transport.timer"]}


class InventoryError(ValueError):
    """The inventory cannot be read or lacks what the command needs."""


@dataclass
class Rail:
    name: str
    interface: str
    address: str  # without its prefix
    rdma_device: str = ""


@dataclass
class Node:
    name: str
    role: str  # master or worker
    host: str
    user: str
    port: int = 22
    key_file: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    become: bool = False
    rails: list[Rail] = field(default_factory=list)

    def monitoring_units(self) -> list[str]:
        """The monitoring stage's units on this node."""
        return list(MONITORING_UNITS[self.role])

    def units(self, engine: dict) -> list[str]:
        """The units this node runs for the service, in startup order, with
        the engine (its table: module_utils/engines/registry.py)."""
        if self.role == "master":
            return ["twinrail-firewall.service", engine["master_unit"], "twinrail-guard.service", "nginx.service"]
        return (["twinrail-firewall.service"]
                + engines.worker_units(engine, [rail.address for rail in self.rails])
                + ["twinrail-agent.service"])


@dataclass
class Cluster:
    nodes: list[Node]
    settings: dict
    engine: dict = field(default_factory=dict)  # the engine's table (module_utils/engines/registry.py)

    @property
    def master(self) -> Node:
        return self.nodes[0]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise InventoryError(f"no node {name!r} in the inventory; its nodes: {', '.join(n.name for n in self.nodes)}")


def _plain(value, default=None):
    """A variable as written in the inventory: an unrendered Jinja
    expression is of no use outside Ansible, so the default applies."""
    if isinstance(value, str) and "{{" in value:
        return default
    return default if value is None else value


def _known_hosts(common_args: str) -> str:
    for word in shlex.split(common_args or ""):
        match = re.match(r"(?i)UserKnownHostsFile=(\S+)", word)
        if match:
            return match.group(1)
    return "~/.ssh/known_hosts"


def parse(listing: dict) -> Cluster:
    """The cluster from `ansible-inventory --list` output."""
    hostvars = listing.get("_meta", {}).get("hostvars", {})
    masters = listing.get("master", {}).get("hosts", [])
    workers = listing.get("workers", {}).get("hosts", [])
    if len(masters) != 1 or not workers:
        raise InventoryError(f"inventory: expected one host in 'master' and at least one in 'workers', got "
                             f"master {masters} and workers {workers}")
    nodes = []
    for name, role in [(masters[0], "master")] + [(w, "worker") for w in workers]:
        hv = hostvars.get(name, {})
        rails = [Rail(r["name"], r["interface"], str(r["address"]).split("/")[0], r.get("rdma_device") or "")
                 for r in hv.get("twinrail_rails") or []]
        key = _plain(hv.get("ansible_ssh_private_key_file"))
        nodes.append(Node(name=name, role=role, host=_plain(hv.get("ansible_host"), name),
                          user=_plain(hv.get("ansible_user"), os.environ.get("USER", "root")),
                          port=int(_plain(hv.get("ansible_port"), 22)),
                          key_file=os.path.expanduser(key) if key else None,
                          known_hosts=os.path.expanduser(_known_hosts(_plain(hv.get("ansible_ssh_common_args"), ""))),
                          become=bool(_plain(hv.get("ansible_become"), False)), rails=rails))
    first = hostvars.get(masters[0], {})
    settings = {key: _plain(first.get(key), None) for key in ROLE_SETTINGS}
    settings.update({key: stages.role_default(REPO, key) for key, value in settings.items() if value is None})
    # no default anywhere (every site sets them, preflight requires them): None where absent, said by status
    settings.update({key: _plain(first.get(key)) for key in CLUSTER_SETTINGS})
    settings["twinrail_site"] = _plain(first.get("twinrail_site"))
    try:
        engine = engines.of_inventory({k: _plain(first.get(k), None) for k in ("inference_service_engine",
                                                                                 "twinrail_profile")},
                                      masters[0], REPO)
    except engines.EngineError as exc:
        raise InventoryError(str(exc)) from None
    return Cluster(nodes=nodes, settings=settings, engine=engine)


def ansible_command(name: str) -> str:
    """The Ansible program installed beside this Python (the virtualenv's
    bin/, whether or not it is on PATH), else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which(name)
    if not found:
        raise InventoryError(f"{name} not found beside {sys.executable} nor on PATH: install twinrail in the "
                             "project's virtualenv (make venv) and run .venv/bin/twinrail")
    return found


def vault_args(password_file: str | None = None, ask: bool = False) -> list[str]:
    """How the vault's password comes in, as ansible-playbook takes it:
    a password file (or $ANSIBLE_VAULT_PASSWORD_FILE, which Ansible reads
    itself), or a prompt."""
    if password_file:
        return ["--vault-password-file", os.path.expanduser(password_file)]
    return ["--ask-vault-pass"] if ask else []


def site_name(inventory: str) -> str:
    """The site an inventory describes: the name of its directory
    (inventory/<site>/, or the directory of an inventory file)."""
    path = os.path.abspath(os.path.expanduser(inventory))
    return os.path.basename(path if os.path.isdir(path) else os.path.dirname(path))


def load(inventory: str, vault: list[str] | None = None) -> Cluster:
    """Run ansible-inventory on the inventory and parse what it lists."""
    argv = [ansible_command("ansible-inventory"), "-i", inventory, "--list"] + list(vault or [])
    # the prompt of --ask-vault-pass reads the terminal: stdin stays the caller's
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300,
                          check=False)
    if proc.returncode != 0:
        error = proc.stderr.strip()[-500:]
        if "no vault secrets" in error:
            error += (" (the inventory holds vault-encrypted values: give --vault-password-file FILE, "
                      "--ask-vault-pass or $ANSIBLE_VAULT_PASSWORD_FILE)")
        raise InventoryError(f"inventory {inventory}: ansible-inventory failed: {error}")
    return parse(json.loads(proc.stdout))
