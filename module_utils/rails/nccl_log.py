# -*- coding: utf-8 -*-
"""What NCCL did, read from its own words: ``NCCL_DEBUG=INFO`` logs (the
version, the settings it took from the environment, the network it chose
and every device or interface it uses, the transport of each channel,
its warnings and errors) and nccl-tests' tables (bus bandwidth by size,
the average, wrong values). The verdict names the node and what it saw
when NCCL runs on sockets, on one rail of two, on another interface, or
slower than a share of what the bandwidth stage measured on the same
rails. Pure Python, tested on real captures (tests/fixtures/nccl/)."""

from __future__ import annotations

import re

# "spark-fb97:23491:23491 [0] NCCL INFO <message>" (host:pid:tid [device])
# (mpirun may put its own "<date>[1,0]<stdout>:" before it)
_LINE = re.compile(r"(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] "
                   r"(?:(?P<where>\S+:\d+) )?NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
_VERSION = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+\S*)")
_ENV = re.compile(r"^(?P<name>NCCL_[A-Z0-9_]+) set (?:by environment )?to (?P<value>\S+)")
# "NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:192.168.100.16<0>"
_IB_USING = re.compile(r"^NET/IB ?: Using (?P<devices>.*?)(?: \[RO\])?; OOB (?P<oob>[^:\s]+):(?P<oob_addr>[^<\s]+)")
_IB_DEVICE = re.compile(r"\[\d+\](?P<device>[^:\s]+):(?P<port>\d+)/(?P<link>RoCE|IB)")
# "NET/Socket : Using [0]eth0:10.128.0.14<0> [1]eth1:...<0>"
_SOCKET_USING = re.compile(r"^NET/Socket ?: Using (?P<interfaces>.*)$")
_SOCKET_IF = re.compile(r"\[\d+\](?P<interface>[^:\s]+):(?P<address>[^<\s]+)<\d+>")
_NETWORK = re.compile(r"^Using network (?P<network>\w+)")
_CHANNEL = re.compile(r"^Channel (?P<channel>\d+)(?:/\d+)? : (?P<src>\d+)\[\S+?\] -> (?P<dst>\d+)\[\S+?\] "
                      r"(?:\[(?P<dir>send|receive)\] )?via (?P<via>\S+)")
# what ends a communicator or a job, in any line (torch's words around NCCL's too)
_ERRORS = re.compile(r"(ncclSystemError|ncclInternalError|ncclRemoteError|ncclUnhandledCudaError|ncclInvalidUsage"
                     r"|ncclInvalidArgument|Watchdog caught collective operation timeout[^\n]*"
                     r"|remote process exited or there was a network error|NCCL WARN [^\n]*)")
# nccl-tests: "  1073741824     134217728     float    none      -1   191408    5.61    2.80       0 ..."
_ROW = re.compile(r"^\s*(?P<size>\d+)\s+(?P<count>\d+)\s+(?P<type>\w+)\s+(?P<redop>\w+)\s+(?P<root>-?\d+)\s+"
                  r"(?P<time>[\d.]+)\s+(?P<algbw>[\d.]+)\s+(?P<busbw>[\d.]+)\s+(?P<wrong>\S+)"
                  r"(?:\s+(?P<time2>[\d.]+)\s+(?P<algbw2>[\d.]+)\s+(?P<busbw2>[\d.]+)\s+(?P<wrong2>\S+))?\s*$")
_AVG = re.compile(r"^# Avg bus bandwidth\s*:\s*(?P<avg>[\d.]+)")
_BOUNDS = re.compile(r"^# Out of bounds values\s*:\s*(?P<count>\d+)\s+(?P<verdict>\w+)")
_TEST = re.compile(r"^# Collective test starting: (?P<test>\w+)")


def parse_debug(text: str) -> dict:
    """An NCCL_DEBUG=INFO log, by host (the line's own prefix): version,
    env (NCCL_* it says it took), network (IB, Socket), ib_devices
    ("rocep1s0f1:1/RoCE"), oob (the bootstrap interface), socket_interfaces,
    channel transports (via: "NET/IB/0", "NET/Socket/1", "P2P/IPC"),
    init_complete; and the errors seen anywhere in the text."""
    hosts: dict[str, dict] = {}
    for raw in text.splitlines():
        match = _LINE.search(raw.strip())
        if not match:
            continue
        host = hosts.setdefault(match["host"], {"version": None, "env": {}, "network": None, "ib_devices": [],
                                                 "oob": None, "socket_interfaces": [], "vias": [],
                                                 "init_complete": False, "warnings": [], "ib_none": False})
        msg = match["msg"].strip()
        if match["level"] == "WARN":
            host["warnings"].append(msg)
        if found := _VERSION.search(msg):
            host["version"] = found["version"]
        elif found := _ENV.match(msg):
            host["env"][found["name"]] = found["value"]
        elif found := _IB_USING.match(msg):
            host["ib_devices"] = [f"{d['device']}:{d['port']}/{d['link']}" for d in _IB_DEVICE.finditer(found["devices"])]
            host["oob"] = found["oob"]
        elif found := _SOCKET_USING.match(msg):
            host["socket_interfaces"] = [i["interface"] for i in _SOCKET_IF.finditer(found["interfaces"])]
        elif found := _NETWORK.match(msg):
            host["network"] = found["network"]
        elif found := _CHANNEL.match(msg):
            if found["via"] not in host["vias"]:
                host["vias"].append(found["via"])
        elif msg.startswith("NET/IB") and "No device found" in msg:
            host["ib_none"] = True
        elif "Init COMPLETE" in msg:
            host["init_complete"] = True
    # a version printed without a host prefix (torch's NCCL, nccl-tests' banner) holds for every host
    bare = next((found["version"] for line in text.splitlines() if not _LINE.search(line.strip())
                 and (found := _VERSION.search(line))), None)
    for host in hosts.values():
        host["version"] = host["version"] or bare
    errors = []
    for line in text.splitlines():
        for found in _ERRORS.finditer(line):
            said = found.group(0).strip()
            if said not in errors and not said.startswith("NCCL WARN"):
                errors.append(said)
    return {"hosts": hosts, "errors": errors}


def parse_tests(text: str) -> dict:
    """nccl-tests' output: test name, rows (size bytes, out-of-place and
    in-place time us, algbw and busbw GB/s, wrong values), the average bus
    bandwidth it printed, the out-of-bounds count and verdict."""
    test, rows, avg, bounds = None, [], None, None
    for line in text.splitlines():
        if found := _TEST.match(line):
            test = found["test"]
        elif found := _ROW.match(line):
            row = {"size": int(found["size"]), "count": int(found["count"]), "type": found["type"],
                   "time_us": float(found["time"]), "algbw": float(found["algbw"]), "busbw": float(found["busbw"]),
                   "wrong": found["wrong"]}
            if found["busbw2"]:
                row.update(in_place_time_us=float(found["time2"]), in_place_busbw=float(found["busbw2"]),
                           in_place_wrong=found["wrong2"])
            rows.append(row)
        elif found := _AVG.match(line):
            avg = float(found["avg"])
        elif found := _BOUNDS.match(line):
            bounds = {"count": int(found["count"]), "verdict": found["verdict"]}
    return {"test": test, "rows": rows, "avg_busbw": avg, "out_of_bounds": bounds}


def problems(debug: dict, tests: dict | None, *, devices: list[str], interface: str,
             min_busbw: float | None = None) -> list[str]:
    """What is wrong with the group NCCL formed, one sentence each naming
    the host: ``devices`` the RDMA devices of every rail (NCCL_IB_HCA),
    ``interface`` the rail0 interface (NCCL_SOCKET_IFNAME), ``min_busbw``
    the bus bandwidth required (GB/s), where known."""
    out = []
    if not debug["hosts"]:
        out.append("NCCL printed no INFO line (NCCL_DEBUG=INFO not in effect?): nothing to tell what it used")
    for name, host in sorted(debug["hosts"].items()):
        where = f"{name} (NCCL {host['version'] or 'of unknown version'})"
        network = host["network"] or ("Socket" if host["socket_interfaces"] or host["ib_none"]
                                      else "IB" if host["ib_devices"] else None)
        # the network names its plugin: "IB", "IBext_v8" or another RDMA plugin's name, "Socket"
        if host["ib_none"]:
            out.append(f"{where}: NCCL found no RDMA device (NET/IB : No device found): it falls back to sockets")
        elif network == "Socket" or any(v.startswith("NET/Socket") for v in host["vias"]):
            out.append(f"{where}: NCCL moves the data over sockets "
                       f"({', '.join(host['socket_interfaces']) or 'NET/Socket'}), not RDMA on "
                       f"{', '.join(devices)}")
        elif network is None:
            out.append(f"{where}: its log does not say which network NCCL chose")
        else:
            used = [d.split(":", 1)[0] for d in host["ib_devices"]]
            missing = [d for d in devices if d not in used]
            if missing:
                carried = len(devices) - len(missing)
                out.append(f"{where}: NCCL uses {', '.join(used) or 'no RDMA device'}, not "
                           f"{', '.join(missing)}: {carried} of the {len(devices)} rails' devices carry the group")
            extra = [d for d in used if d not in devices]
            if extra:
                out.append(f"{where}: NCCL uses {', '.join(extra)}, which is no rail's device")
        if host["oob"] and host["oob"] != interface:
            out.append(f"{where}: NCCL's bootstrap runs on {host['oob']}, not on rail0's {interface}")
        out += [f"{where}: NCCL warned: {warning}" for warning in host["warnings"][:3]]
    out += [f"NCCL failed: {error}" for error in debug["errors"]]
    if tests is not None:
        if not tests["rows"]:
            out.append(f"{tests['test'] or 'nccl-tests'} printed no result row")
        wrong = [r for r in tests["rows"] if r["wrong"] not in ("0", "N/A") or r.get("in_place_wrong", "0") not in ("0", "N/A")]
        if wrong or (tests["out_of_bounds"] and tests["out_of_bounds"]["count"]):
            out.append(f"{tests['test'] or 'nccl-tests'}: wrong values (out of bounds: "
                       f"{tests['out_of_bounds']['count'] if tests['out_of_bounds'] else 'not printed'})")
        if min_busbw is not None and tests["avg_busbw"] is not None and tests["avg_busbw"] < min_busbw:
            out.append(f"{tests['test'] or 'nccl-tests'}: average bus bandwidth {tests['avg_busbw']:g} GB/s, required "
                       f"{min_busbw:g} GB/s")
    return out


def conf_settings(text: str) -> list[str]:
    """The NCCL_* settings an NCCL configuration file (/etc/nccl.conf,
    ~/.nccl.conf: KEY=VALUE lines, # comments) or /etc/environment makes,
    as "NAME=value" in file order; anything else is not NCCL's."""
    out = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("export "):
            line = line[len("export "):].strip()
        name, sep, value = line.partition("=")
        if sep and re.fullmatch(r"NCCL_[A-Z0-9_]+", name.strip()):
            out.append(f"{name.strip()}={value.strip().strip(chr(34)).strip(chr(39))}")
    return out
