# -*- coding: utf-8 -*-
"""Link state of RDMA ports and rail interfaces: parsers and sysfs readers.

Sources, in the order the rdma stage trusts them:
- sysfs: /sys/class/infiniband/<dev>/ports/<n>/{state,phys_state,rate,
  link_layer,gids/<i>,gid_attrs/types/<i>,gid_attrs/ndevs/<i>} and
  /sys/class/net/<if>/{operstate,carrier,speed,mtu};
- `ibv_devinfo -v` (active MTU, which sysfs does not show);
- `ibstat` and `rdma link show` (what operators paste into tickets).

Every parser skips lines that are not its tool's (shell prompts, indentation
from documents) and returns plain dicts. No Ansible import.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

IB_MTU = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}


class ParseError(ValueError):
    """The text is not the tool's output."""


# --------------------------------------------------------------------------
# ibv_devinfo [-v]

_DEVINFO_KV = re.compile(r"^\s*([A-Za-z_ ]+?):\s+(.*?)\s*$")
_DEVINFO_GID = re.compile(r"^\s*GID\[\s*(\d+)\]:\s+(\S+?)(?:,\s*(.+?))?\s*$")
_CODE = re.compile(r"^(\S+)\s+\((\d+)\)$")


def _with_code(value: str):
    """'PORT_ACTIVE (4)' -> ('PORT_ACTIVE', 4); '4096 (5)' -> ('4096', 5)."""
    match = _CODE.match(value)
    if match:
        return match.group(1), int(match.group(2))
    return value, None


def parse_ibv_devinfo(text: str) -> dict:
    """{hca_id: {field: value, ..., 'ports': {n: {field: value, 'gids': {...}}}}}"""
    devices: dict = {}
    device = port = None
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if stripped.startswith("hca_id:"):
            name = stripped.split(":", 1)[1].strip()
            device = devices.setdefault(name, {"ports": {}})
            port = None
            continue
        if device is None or not stripped:
            continue
        gid = _DEVINFO_GID.match(line)
        if gid and port is not None:
            port["gids"][int(gid.group(1))] = {"gid": gid.group(2),
                                               "type": (gid.group(3) or "").strip()}
            continue
        match = _DEVINFO_KV.match(line)
        if not match:
            continue
        key, value = match.group(1).strip().replace(" ", "_"), match.group(2)
        if key == "port":
            port = device["ports"].setdefault(int(value), {"gids": {}})
            continue
        target = port if port is not None else device
        if key in ("state", "phys_state"):
            target[key], target[f"{key}_code"] = _with_code(value)
        elif key in ("max_mtu", "active_mtu"):
            mtu, code = _with_code(value)
            target[key] = int(mtu) if mtu.isdigit() else IB_MTU.get(code)
        elif key == "link_layer":
            target[key] = value
        elif value:
            target[key] = value
    if not devices:
        raise ParseError(f"no 'hca_id:' line: ibv_devinfo listed no device: {said(text)}")
    return devices


def said(text: str, limit: int = 300) -> str:
    """What a tool printed, on one line, for a message that quotes it."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " / ".join(lines)[-limit:] or "it printed nothing"


# --------------------------------------------------------------------------
# ibstat

def parse_ibstat(text: str) -> dict:
    """{ca: {'ca_type': ..., 'ports': {n: {'state', 'physical_state', 'rate', 'link_layer'}}}}"""
    cas: dict = {}
    ca = port = None
    for raw in text.splitlines():
        stripped = raw.strip()
        match = re.match(r"^CA '([^']+)'$", stripped)
        if match:
            ca = cas.setdefault(match.group(1), {"ports": {}})
            port = None
            continue
        if ca is None or ":" not in stripped:
            continue
        match = re.match(r"^Port (\d+):$", stripped)
        if match:
            port = ca["ports"].setdefault(int(match.group(1)), {})
            continue
        key, _, value = stripped.partition(":")
        key, value = key.strip().lower().replace(" ", "_"), value.strip()
        target = port if port is not None else ca
        if key == "rate":
            target[key] = float(value)
        elif key in ("base_lid", "sm_lid", "lmc", "number_of_ports"):
            target[key] = int(value)
        else:
            target[key] = value
    if not cas:
        raise ParseError(f"no \"CA '...'\" line: ibstat listed no device: {said(text)}")
    return cas


# --------------------------------------------------------------------------
# rdma link show

def parse_rdma_link(text: str) -> list[dict]:
    """One dict per `link DEV/PORT key value ...` line."""
    links = []
    for raw in text.splitlines():
        words = raw.split()
        if len(words) < 2 or words[0] != "link" or "/" not in words[1]:
            continue
        dev, _, port = words[1].partition("/")
        entry = {"device": dev, "port": int(port)}
        rest = words[2:]
        for key, value in zip(rest[0::2], rest[1::2]):
            entry[key] = value
        links.append(entry)
    if not links:
        raise ParseError("no 'link DEV/PORT' line: not `rdma link show` output")
    return links


# --------------------------------------------------------------------------
# sysfs

def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return None


def parse_rate(value: str | None) -> float | None:
    """'200 Gb/sec (4X HDR)' -> 200.0"""
    if not value:
        return None
    match = re.match(r"^\s*([\d.]+)\s*Gb/sec", value)
    return float(match.group(1)) if match else None


def _state(value: str | None):
    """'4: ACTIVE' -> ('ACTIVE', 4)"""
    if not value or ":" not in value:
        return value, None
    code, _, name = value.partition(":")
    return name.strip(), int(code)


def gid_to_ipv4(gid: str) -> str | None:
    """An IPv4-mapped RoCE v2 GID (::ffff:a.b.c.d) -> 'a.b.c.d'."""
    try:
        addr = ipaddress.IPv6Address(gid)
    except ValueError:
        return None
    return str(addr.ipv4_mapped) if addr.ipv4_mapped else None


def read_ib_port(root: str, device: str, port: int) -> dict | None:
    base = os.path.join(root, "class", "infiniband", device, "ports", str(port))
    if not os.path.isdir(base):
        return None
    state, state_code = _state(_read(os.path.join(base, "state")))
    phys, phys_code = _state(_read(os.path.join(base, "phys_state")))
    gids = {}
    gid_dir = os.path.join(base, "gids")
    for name in sorted(os.listdir(gid_dir), key=int) if os.path.isdir(gid_dir) else []:
        value = _read(os.path.join(gid_dir, name))
        if not value or set(value.replace(":", "")) == {"0"}:
            continue
        gids[int(name)] = {
            "gid": value,
            "type": _read(os.path.join(base, "gid_attrs", "types", name)) or "",
            "netdev": _read(os.path.join(base, "gid_attrs", "ndevs", name)) or "",
            "ipv4": gid_to_ipv4(value),
        }
    return {"device": device, "port": port, "state": state, "state_code": state_code,
            "physical_state": phys, "physical_state_code": phys_code,
            "rate_gbps": parse_rate(_read(os.path.join(base, "rate"))),
            "link_layer": _read(os.path.join(base, "link_layer")), "gids": gids}


# A PCIe link's lanes carry GT/s each; Gen1 and Gen2 lose 2 bits in 10 to
# their 8b/10b encoding, Gen3 and later 2 in 130 (128b/130b); every transfer
# then pays a TLP header and framing (about 24 bytes) per max payload (256
# bytes on the ConnectX-7 hosts of the field reports). What is left is the
# most a NIC behind that link can move, whatever its port negotiated: a DGX
# Spark's ConnectX-7 port is two PCIe Gen5 x4 functions, 200 Gb/s each on
# the wire and about 115 Gb/s through PCIe (measured: 108 Gb/s, seed and
# tests/fixtures/hardware).
PCIE_TLP_EFFICIENCY = 256 / (256 + 24)
PCIE_GENERATION = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def parse_pcie_link(text: str | None) -> dict | None:
    """Speed and width of a PCIe link, from lspci's LnkSta/LnkCap ("Speed
    32GT/s, Width x4") or from the form read_netdev keeps (sysfs's
    current_link_speed, "32.0 GT/s PCIe", and " x" + current_link_width).
    None when the width is missing or x0 (a veth, a link not trained). A
    speed lspci cannot name ("Speed unknown": an lspci older than the
    link's generation) keeps the width, with ``gts`` None."""
    if not text:
        return None
    speed = re.search(r"(\d+(?:\.\d+)?)\s*GT/s", text)
    width = re.search(r"(?:Width\s+)?\bx(\d+)\b", text)
    if not width or int(width.group(1)) == 0 or (not speed and "unknown" not in text.lower()):
        return None
    gts = float(speed.group(1)) if speed else None
    return {"gts": gts, "width": int(width.group(1)), "generation": PCIE_GENERATION.get(gts)}


def pcie_ceiling_gbps(text: str | None) -> float | None:
    """The most a device behind this PCIe link can move, in Gb/s: lanes x
    GT/s, less the encoding and the TLP overhead (PCIE_TLP_EFFICIENCY)."""
    link = parse_pcie_link(text)
    if link is None or link["gts"] is None:
        return None
    encoding = 8 / 10 if link["gts"] <= 5.0 else 128 / 130
    return round(link["gts"] * link["width"] * encoding * PCIE_TLP_EFFICIENCY, 1)


def ib_ports(root: str, device: str) -> list[int]:
    base = os.path.join(root, "class", "infiniband", device, "ports")
    if not os.path.isdir(base):
        return []
    return sorted(int(p) for p in os.listdir(base) if p.isdigit())


def read_netdev(root: str, ifname: str) -> dict | None:
    base = os.path.join(root, "class", "net", ifname)
    if not os.path.isdir(base):
        return None
    carrier = _read(os.path.join(base, "carrier"))
    speed = _read(os.path.join(base, "speed"))
    try:
        speed_mbps = int(speed) if speed is not None else None
    except ValueError:
        speed_mbps = None
    if speed_mbps is not None and speed_mbps < 0:
        speed_mbps = None  # -1: unknown (link down)
    device = os.path.join(base, "device")
    driver = os.path.join(device, "driver")
    pci_speed = _read(os.path.join(device, "current_link_speed"))
    pci_width = _read(os.path.join(device, "current_link_width"))
    max_speed = _read(os.path.join(device, "max_link_speed"))
    max_width = _read(os.path.join(device, "max_link_width"))
    return {"interface": ifname, "operstate": _read(os.path.join(base, "operstate")),
            "carrier": carrier == "1",
            "speed_gbps": speed_mbps / 1000 if speed_mbps else None,
            "mtu": int(_read(os.path.join(base, "mtu")) or 0),
            # what a baseline is valid for: the driver bound to the NIC and
            # the PCIe link it trained to (none on a veth)
            "driver": os.path.basename(os.readlink(driver)) if os.path.islink(driver) else None,
            "pci_link": f"{pci_speed} x{pci_width}" if pci_speed and pci_width else None,
            "pci_link_max": f"{max_speed} x{max_width}" if max_speed and max_width else None}


def select_gid(gids: dict, ipv4: str, gid_type: str = "RoCE v2") -> int | None:
    """Index of the GID of that type whose address is the rail's IPv4 address."""
    for index, gid in sorted(gids.items()):
        if gid.get("type") == gid_type and gid.get("ipv4") == ipv4:
            return index
    return None


def pcie_downgrade(current: str | None, capable: str | None) -> str | None:
    """The sentence for a PCIe link trained below what both ends can do (a
    lower speed or fewer lanes: a badly seated card, a riser, a BIOS
    setting), as NVIDIA's connect-two-sparks check reads it (sysfs
    current_link_* against max_link_*, or lspci LnkSta against LnkCap);
    None when it trained fully or either side is unknown (a veth)."""
    cur, cap = parse_pcie_link(current), parse_pcie_link(capable)
    if not cur or not cap:
        return None
    # a speed lspci cannot name is not compared; the lanes still are
    slower = cur["gts"] is not None and cap["gts"] is not None and cur["gts"] < cap["gts"]
    if not slower and cur["width"] >= cap["width"]:
        return None

    def show(link: dict) -> str:
        gen = f"Gen{link['generation']} " if link["generation"] else ""
        return f"{gen}x{link['width']} ({link['gts']:g} GT/s)" if link["gts"] else f"x{link['width']} (speed unknown)"
    return f"PCIe link trained at {show(cur)}, below the {show(cap)} it is capable of: reseat the card or check the slot"


def rail_state(root: str, rail: dict) -> dict:
    """What the rdma stage gates on, for one rail of this node."""
    net = read_netdev(root, rail["interface"])
    state = {"name": rail["name"], "interface": rail["interface"], "address": rail.get("address"),
             "rdma_device": rail.get("rdma_device") or "", "present": net is not None,
             "netdev": net, "port": None, "gid_index": None}
    if net is None:
        state.update(up=False, rate_gbps=None, pcie_gbps=None,
                     problem=f"interface {rail['interface']} does not exist")
        return state
    state["rate_gbps"] = net["speed_gbps"]
    # the bandwidth gate holds a rail to the lower of this and its link rate
    state["pcie_gbps"] = pcie_ceiling_gbps(net["pci_link"])
    state["pcie_problem"] = pcie_downgrade(net["pci_link"], net.get("pci_link_max"))
    up = net["operstate"] == "up" and net["carrier"]
    problem = None if up else (f"{rail['interface']} link {net['operstate']}"
                               f"{'' if net['carrier'] else ', no carrier'}")
    if state["rdma_device"]:
        ports = ib_ports(root, state["rdma_device"])
        if not ports:
            state.update(up=False, problem=f"RDMA device {state['rdma_device']} does not exist")
            return state
        port = read_ib_port(root, state["rdma_device"], ports[0])
        port["fw_ver"] = _read(os.path.join(root, "class", "infiniband", state["rdma_device"], "fw_ver"))
        state["port"] = port
        state["rate_gbps"] = port["rate_gbps"]
        if port["state"] != "ACTIVE" or port["physical_state"] != "LinkUp":
            up = False
            problem = (f"{state['rdma_device']} port {port['port']} is {port['state']} / "
                       f"{port['physical_state']}")
        address = rail.get("address", "").split("/")[0]
        state["gid_index"] = select_gid(port["gids"], address) if address else None
    state["up"] = up
    state["problem"] = problem
    return state


# --------------------------------------------------------------------------
# the gate, across nodes

def rail_gate(links: dict, expected_rate_gbps: float, allow_single_rail: bool,
              pings: dict | None = None) -> dict:
    """Judge every rail on every node.

    links: {host: {rail name: rail_state(...)}}
    pings: {host: {rail name: {peer host: bool reachable at full MTU}}}
    A rail is healthy when every end is up at the expected rate and every
    end reaches every other. Returns healthy and failed rails, one sentence
    per failed rail naming the rail, each host with its state, what was
    measured and what was required; `passed` follows allow_single_rail.
    """
    rails: dict[str, list[str]] = {}
    for host, states in links.items():
        for name in states:
            rails.setdefault(name, [])
    for name in rails:
        for host, states in links.items():
            st = states.get(name)
            if st is None:
                rails[name].append(f"{host} has no such rail")
            elif not st["up"]:
                rails[name].append(f"{host} {st['interface']}: {st['problem']}")
            elif st.get("rate_gbps") is not None and st["rate_gbps"] < expected_rate_gbps:
                rails[name].append(
                    f"{host} negotiated {st['rate_gbps']:g} Gb/s, expected "
                    f"{expected_rate_gbps:g}: check cable and port")
            elif st.get("rate_gbps") is None:
                rails[name].append(f"{host} {st['interface']} reports no link rate")
            if st is not None and (st.get("port") or {}).get("devinfo_problem"):
                rails[name].append(f"{host} {st['rdma_device']}: {st['port']['devinfo_problem']}")
            if st is not None and st.get("pcie_problem"):
                rails[name].append(f"{host} {st['interface']}: {st['pcie_problem']}")
        for host, by_rail in (pings or {}).items():
            for peer, ok in sorted(by_rail.get(name, {}).items()):
                if not ok:
                    rails[name].append(f"{host} cannot reach {peer} over it at full MTU "
                                       f"(ping with DF set)")
    failed = {name: problems for name, problems in rails.items() if problems}
    healthy = sorted(name for name in rails if name not in failed)
    failures = [f"{name}: " + "; ".join(problems) for name, problems in sorted(failed.items())]
    passed = not failed or (allow_single_rail and bool(healthy))
    return {"healthy": healthy, "failed_rails": sorted(failed), "failures": failures,
            "passed": passed, "degraded": bool(failed) and passed}


def route_dev(ip_route_get_json: str) -> str:
    """The interface `ip -j route get PEER from OWN` leaves by ('' when there is none)."""
    found = json.loads(ip_route_get_json or "[]")
    return found[0].get("dev", "") if found else ""


def probe_peers(probes: list[dict], run, ping_count: int) -> dict:
    """rail -> peer -> whether a full-MTU ping (DF set) from the rail's own
    address reached the peer's address on that rail and the route to it left
    by the rail's interface. Each probe is {rail, interface, own, peer,
    address, mtu}; `run(argv) -> (rc, stdout, stderr)` runs a command. The
    peers are probed at once (one thread each), so a node with seven peers
    waits for one ping's time, not seven."""

    def one(probe: dict) -> tuple[dict, bool]:
        rc, out, _ = run(["ip", "-j", "route", "get", probe["address"], "from", probe["own"]])
        dev = route_dev(out) if rc == 0 else ""
        ping_rc, _, _ = run(["ping", "-n", "-q", "-c", str(ping_count), "-i", "0.2", "-W", "1", "-M", "do",
                             "-s", str(int(probe["mtu"]) - 28), "-I", probe["own"], probe["address"]])
        return probe, ping_rc == 0 and dev == probe["interface"]

    out: dict = {}
    with ThreadPoolExecutor(max_workers=max(1, min(len(probes), 16))) as pool:
        for probe, reached in pool.map(one, probes):
            out.setdefault(probe["rail"], {})[probe["peer"]] = reached
    return out
