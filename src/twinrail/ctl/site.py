"""A site's beginning: `twinrail init` (find what the boxes are, write
inventory/<site>/) and `twinrail secrets` (the site's vault).

init reaches each box over SSH with the CLI's host-key policy (the key
must be known: probe.connections), runs one read-only discovery program
there (DISCOVER: architecture, memory, GPU, network ports with their
RDMA device, PCI function, link and addresses) and decides on the
controller (plan): which ports are cabled, how they pair into rails
across the boxes, which addresses they get (those already there, else one
subnet per rail). It refuses, naming the box and the reason, a box that
cannot be reached, has no cabled rail or is not what the profile says,
and rails that do not pair up; it writes nothing then. On an existing
site it changes nothing without --force.

secrets writes group_vars/cluster/vault.yml, encrypted with
ansible-vault's own library: a generated operator password (the proxy's
account) and one API key for OpenAI clients. The vault's password is
read from --vault-password-file, which is made (random, mode 0600) when
it does not exist; the API key is also written to a file of mode 0600
beside it, for `twinrail bench --key-file` and the first completion."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets as random
import stat
from pathlib import Path

import yaml

from .. import loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.gpu import facts as gpu_facts
from .inventory import InventoryError

VAULT_FILE = Path("group_vars") / "cluster" / "vault.yml"
# what the example inventory and `init` reference from the vault
VAULT_VARIABLES = ("vault_inference_service_operator_password", "vault_inference_service_api_key")
API_KEY_NAME = "first-client"


def config_dir(site: str) -> Path:
    """Where the site's vault password and API key live on the controller,
    outside the repository (~/.config/twinrail/<site>/)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "twinrail" / site


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def vault_password(path: Path) -> tuple[bytes, bool]:
    """The vault's password from its file, made (random, 0600) when absent;
    (password, made)."""
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise InventoryError(f"secrets: {path}: the vault password file is readable by others (mode "
                                 f"{mode:o}); chmod 600 it")
        password = path.read_text(encoding="utf-8").strip()
        if not password:
            raise InventoryError(f"secrets: {path}: the vault password file is empty")
        return password.encode(), False
    password = random.token_urlsafe(32)
    _write_private(path, password + "\n")
    return password.encode(), True


def write_secrets(site_dir: Path, password_file: Path, key_file: Path, force: bool = False) -> dict:
    """The site's vault: a generated operator password and API key,
    encrypted with ansible-vault's library; the key also in key_file."""
    from ansible.parsing.vault import VaultLib, VaultSecret  # pylint: disable=import-outside-toplevel

    vault = site_dir / VAULT_FILE
    if vault.exists() and not force:
        raise InventoryError(f"secrets: {vault} exists: nothing was changed (--force replaces its secrets, and "
                             "every client then needs the new API key)")
    password, made = vault_password(password_file)
    values = {"vault_inference_service_operator_password": random.token_urlsafe(24),
              "vault_inference_service_api_key": "tr-" + random.token_urlsafe(36)}
    plain = "---\n# made by `twinrail secrets`; edit with ansible-vault edit\n" + yaml.safe_dump(values, sort_keys=True)
    secret = VaultLib([("default", VaultSecret(password))]).encrypt(plain)
    vault.parent.mkdir(parents=True, exist_ok=True)
    vault.write_bytes(secret)
    _write_private(key_file, values["vault_inference_service_api_key"] + "\n")
    return {"vault": str(vault), "password_file": str(password_file), "password_made": made,
            "key_file": str(key_file), "api_key_name": API_KEY_NAME}


# --------------------------------------------------------------------------
# discovery: one program, run on each box, reads only

DISCOVER = r'''
import glob, json, os, platform, shutil, subprocess
def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None
def link(path):
    return os.path.basename(os.readlink(path)) if os.path.islink(path) else None
out = {"machine": platform.machine(), "kernel": platform.release(), "memtotal_kib": None, "ports": [],
       "rdma": {}, "gpu_table": None, "addresses": []}
for line in (read("/proc/meminfo") or "").splitlines():
    if line.startswith("MemTotal:"):
        out["memtotal_kib"] = int(line.split()[1])
for base in sorted(glob.glob("/sys/class/infiniband/*")):
    dev = os.path.basename(base)
    nets = sorted(os.listdir(base + "/device/net")) if os.path.isdir(base + "/device/net") else []
    out["rdma"][dev] = {"netdevs": nets, "state": read(base + "/ports/1/state"), "rate": read(base + "/ports/1/rate"),
                        "pci": link(base + "/device")}
for base in sorted(glob.glob("/sys/class/net/*")):
    name = os.path.basename(base)
    if name == "lo":
        continue
    kind = None
    uevent = read(base + "/uevent") or ""
    for line in uevent.splitlines():
        if line.startswith("DEVTYPE="):
            kind = line.split("=", 1)[1]
    out["ports"].append({"name": name, "operstate": read(base + "/operstate"), "carrier": read(base + "/carrier"),
                         "speed": read(base + "/speed"), "mtu": read(base + "/mtu"), "pci": link(base + "/device"),
                         "virtual": os.path.realpath(base).startswith("/sys/devices/virtual/"), "kind": kind,
                         "driver": link(base + "/device/driver")})
ip = shutil.which("ip")
if ip:
    res = subprocess.run([ip, "-j", "address", "show"], capture_output=True, text=True)
    out["addresses"] = json.loads(res.stdout or "[]") if res.returncode == 0 else []
smi = shutil.which("nvidia-smi")
if smi:
    res = subprocess.run([smi], capture_output=True, text=True)
    out["gpu_table"] = res.stdout if res.returncode == 0 else "nvidia-smi exited %d: %s" % (res.returncode, (res.stderr or res.stdout).strip())
print(json.dumps(out))
'''


def discover(host: str, user: str, port: int, key_file: str | None, known_hosts: str, timeout: float) -> dict:
    """Run DISCOVER on one box; its JSON, or {'unreachable': why}."""
    import base64  # pylint: disable=import-outside-toplevel

    from .inventory import Cluster, Node  # pylint: disable=import-outside-toplevel
    from .probe import connections  # pylint: disable=import-outside-toplevel

    node = Node(name=host, role="worker", host=host, user=user, port=port, key_file=key_file,
                known_hosts=known_hosts)
    (conn,) = connections(Cluster(nodes=[node], settings={}), [node], timeout)
    payload = base64.b64encode(DISCOVER.encode()).decode()
    try:
        result = conn.run(f"echo {payload} | base64 -d | python3 -", hide=True, warn=True, timeout=120)
    except Exception as exc:  # pylint: disable=broad-except  # an unreachable box is said, with its reason
        return {"unreachable": f"{type(exc).__name__}: {exc}".strip()}
    finally:
        conn.close()
    if result.exited != 0:
        return {"unreachable": f"the discovery exited {result.exited}: {result.stderr.strip()[-300:]}"}
    try:
        return json.loads(result.stdout)
    except ValueError:
        return {"unreachable": f"the discovery printed no JSON: {result.stdout[-200:]!r}"}


# --------------------------------------------------------------------------
# the plan: from what every box said to the site's inventory


def _addresses(found: dict) -> dict:
    """{ifname: [ipv4/prefix, ...]} from `ip -j address show`."""
    out = {}
    for entry in found.get("addresses") or []:
        out[entry.get("ifname")] = [f"{a['local']}/{a['prefixlen']}" for a in entry.get("addr_info", [])
                                    if a.get("family") == "inet"]
    return out


def management_interface(found: dict, host: str) -> str | None:
    """The port that carries the address the controller reached the box on."""
    for ifname, addresses in _addresses(found).items():
        if any(a.split("/")[0] == host for a in addresses):
            return ifname
    return None


def cabled_ports(found: dict, host: str, rdma: bool) -> list[dict]:
    """The box's ports a cable joins, sorted by name: with RDMA, each RDMA
    device's netdev whose port is ACTIVE and link up; without, every port
    with a carrier that is not the management one, a bridge or a
    container's (docker, veth of the host's own)."""
    mgmt = management_interface(found, host)
    ports = {p["name"]: p for p in found.get("ports") or []}
    out = []
    if rdma:
        for device, info in sorted((found.get("rdma") or {}).items()):
            for netdev in info.get("netdevs") or []:
                port = ports.get(netdev)
                if port and netdev != mgmt and "ACTIVE" in (info.get("state") or "") and port.get("carrier") == "1":
                    out.append({"interface": netdev, "rdma_device": device, "pci": info.get("pci") or port.get("pci")})
    else:
        for name, port in sorted(ports.items()):
            if name == mgmt or port.get("carrier") != "1" or port.get("kind") in ("bridge", "vlan", "bond"):
                continue
            if port.get("virtual") and not name.startswith(("ens", "enp", "eth")):
                continue  # docker0, br-*, virbr*: not a cable
            if name.startswith("eth") and port.get("virtual"):
                continue  # a container's management veth
            out.append({"interface": name, "rdma_device": "", "pci": port.get("pci")})
    return sorted(out, key=lambda p: p["interface"])


def plan(nodes: list[tuple[str, str]], found: dict, profile: dict, subnets: list[str]) -> dict:
    """The site from what each box said (found: by node name; nodes: name
    and management address, the master first): per node its rails (name,
    interface, rdma_device, address), or the reasons it is refused, each
    naming the node."""
    problems = []
    expect = profile.get("expect") or {}
    rdma = bool(expect.get("rdma"))
    rails_by_host = {}
    for name, address in nodes:
        host = f"{name} ({address})"
        box = found[name]
        if "unreachable" in box:
            problems.append(f"{host}: unreachable: {box['unreachable']}")
            continue
        if expect.get("architecture") and box.get("machine") != expect["architecture"]:
            problems.append(f"{host}: architecture {box.get('machine')}, the profile expects {expect['architecture']}")
        if expect.get("gpu") and not gpu_facts.has_table(box.get("gpu_table") or ""):
            problems.append(f"{host}: no NVIDIA GPU answers nvidia-smi "
                            f"({(box.get('gpu_table') or 'nvidia-smi is not installed')[:200]}), the profile expects one")
        if rdma and not box.get("rdma"):
            problems.append(f"{host}: no RDMA device (/sys/class/infiniband is empty), the profile expects one")
        if management_interface(box, address) is None:
            problems.append(f"{host}: no port of the box holds {address}, the address it was reached on (a host "
                            "name or a translated address?): give --node the management address the box holds")
            continue
        ports = cabled_ports(box, address, rdma)
        if not ports:
            wanted = "RDMA port ACTIVE with its link up" if rdma else "port with a carrier"
            problems.append(f"{host}: no cabled rail: no {wanted} besides the management one")
        rails_by_host[name] = ports
    counts = {name: len(ports) for name, ports in rails_by_host.items() if ports}
    if len(set(counts.values())) > 1:
        problems.append("the rails do not pair up: cabled ports per box "
                        + ", ".join(f"{h} {n}" for h, n in counts.items()))
    if problems:
        return {"problems": problems, "hosts": {}}
    count = next(iter(counts.values()))
    if len(subnets) < count:
        return {"problems": [f"{count} rails need {count} rail subnets, got {len(subnets)} (--rail-subnets)"], "hosts": {}}
    networks = []
    for text in subnets[:count]:
        try:
            network = ipaddress.ip_network(text.strip())
        except ValueError as exc:
            return {"problems": [f"--rail-subnets: expected networks like 192.168.100.0/24, got {text!r} ({exc})"],
                    "hosts": {}}
        if network.num_addresses - 2 < len(nodes):
            return {"problems": [f"--rail-subnets: {network} holds {max(network.num_addresses - 2, 0)} host "
                                 f"addresses, {len(nodes)} nodes need one each"], "hosts": {}}
        networks.append(network)
    out = {}
    for index, (host, address) in enumerate(nodes):
        existing = _addresses(found[host])
        rails = []
        for number, port in enumerate(rails_by_host[host]):
            kept = existing.get(port["interface"], [])
            network = networks[number]
            rails.append({"name": f"rail{number}", "interface": port["interface"], "rdma_device": port["rdma_device"],
                          "address": kept[0] if kept else f"{network[index + 1]}/{network.prefixlen}"})
        out[host] = {"rails": rails, "machine": found[host].get("machine"),
                     "memtotal_gib": round((found[host].get("memtotal_kib") or 0) / 2**20, 1),
                     "management": management_interface(found[host], address),
                     "mgmt_address": next((a for a in sum(existing.values(), []) if a.split("/")[0] == address),
                                          None)}
    subnets_used = [{str(ipaddress.ip_interface(out[h]["rails"][r]["address"]).network) for h, _ in nodes}
                    for r in range(count)]
    taken = [out[h]["rails"][r]["address"].split("/")[0] for h, _ in nodes for r in range(count)]
    twice = sorted({a for a in taken if taken.count(a) > 1})
    if twice:
        return {"problems": [f"the rails' addresses collide: {', '.join(twice)} on more than one port (an address "
                             "already on a box is one --rail-subnets would give): choose other --rail-subnets"],
                "hosts": {}}
    for number, nets in enumerate(subnets_used):
        if len(nets) > 1:
            return {"problems": [f"rail{number}: its ends are on different subnets ({', '.join(sorted(nets))}): the "
                                 "addresses already there do not pair up"], "hosts": {}}
    return {"problems": [], "hosts": out}


class _IndentedDumper(yaml.SafeDumper):
    """Lists indented under their key, as yamllint's default asks (an
    operator may lint their inventory with the project's settings)."""

    def increase_indent(self, flow=False, indentless=False):
        return super().increase_indent(flow, False)


def write_site(site_dir: Path, example: Path, profile_name: str, nodes: list[tuple[str, str]], decided: dict,
               connection: dict) -> list[str]:
    """inventory/<site>/ from the example's cluster settings and what was
    found: hosts.yml, group_vars/cluster/main.yml, host_vars/<node>.yml.
    Returns the files written."""
    (site_dir / "host_vars").mkdir(parents=True, exist_ok=True)
    (site_dir / "group_vars" / "cluster").mkdir(parents=True, exist_ok=True)
    names = [name for name, _ in nodes]
    hosts = {"all": {"children": {"cluster": {"children": {
        "master": {"hosts": {names[0]: None}},
        "workers": {"hosts": {name: None for name in names[1:]}}}}}}}
    written = []

    def put(path: Path, head: str, data) -> None:
        path.write_text("---\n" + head + yaml.dump(data, Dumper=_IndentedDumper, sort_keys=False,
                                                     default_flow_style=False))
        written.append(str(path))

    put(site_dir / "hosts.yml", "# made by `twinrail init`: the first node is the master\n", hosts)
    settings = (example / "group_vars" / "cluster" / "main.yml").read_text()
    settings = settings.replace("twinrail_profile: dgx-spark", f"twinrail_profile: {profile_name}", 1)
    # who may reach the service and SSH: the management network the boxes
    # were found on (the controller reached them there), not the example's
    managed = sorted({str(ipaddress.ip_interface(decided["hosts"][name]["mgmt_address"]).network)
                      for name, _ in nodes})
    for key in ("inference_service_client_networks", "inference_service_admin_networks"):
        settings = re.sub(rf"^{key}: .*$", f"{key}: [{', '.join(managed)}]", settings, count=1, flags=re.M)
    main = site_dir / "group_vars" / "cluster" / "main.yml"
    main.write_text("# made by `twinrail init` from inventory/example's settings: set the model, its weights\n"
                    "# and the networks below for this site, then run site.yml.\n" + settings)
    written.append(str(main))
    for name, address in nodes:
        found = decided["hosts"][name]
        mgmt = found["mgmt_address"]
        data = {"ansible_host": address, "ansible_user": connection["user"]}
        if connection.get("port", 22) != 22:
            data["ansible_port"] = connection["port"]
        if connection.get("key_file"):
            data["ansible_ssh_private_key_file"] = connection["key_file"]
        if connection.get("known_hosts"):
            data["ansible_ssh_common_args"] = f"-o UserKnownHostsFile={connection['known_hosts']}"
        data["twinrail_mgmt_address"] = mgmt
        data["twinrail_rails"] = found["rails"]
        put(site_dir / "host_vars" / f"{name}.yml",
            f"# found by `twinrail init`: {found['machine']}, {found['memtotal_gib']} GiB, management on "
            f"{found['management']}\n", data)
    return written
