"""The RPC servers seen from the process table and the kernel's socket table
(no packet sent: a probe would sit in the RPC server's one-client backlog)."""

from __future__ import annotations

import os
import socket
import struct

from twinrail.guard.memory import _read

def _processes(proc: str = "/proc", with_cgroup: bool = False):
    """Every process: pid, argv, state (R S D T Z ...) and, asked, the lines
    of its cgroup file; a process gone while read is left out."""
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            groups = _read(os.path.join(proc, entry, "cgroup")).splitlines() if with_cgroup else []
            with open(os.path.join(proc, entry, "cmdline"), "rb") as handle:
                argv = [a.decode(errors="replace") for a in handle.read().split(b"\0") if a]
            stat = _read(os.path.join(proc, entry, "stat"))
        except OSError:
            continue
        yield {"pid": int(entry), "argv": argv, "state": stat.rpartition(")")[2].split()[0]}, groups


def find_processes(name: str, proc: str = "/proc") -> list[dict]:
    """Processes whose program is ``name``: pid, argv, state (R S D T Z ...)."""
    return [process for process, _ in _processes(proc) if process["argv"]
            and os.path.basename(process["argv"][0]) == name]


def unit_processes(unit: str, proc: str = "/proc") -> list[dict]:
    """The processes in a systemd unit's control group (cgroup v1 or v2),
    oldest (lowest pid) first: pid, argv, state. A program that renames
    itself (vLLM's processes set their titles) is still found."""
    found = [process for process, groups in _processes(proc, with_cgroup=True)
             if any(line.rpartition(":")[2].rstrip("/").endswith("/" + unit) for line in groups)]
    return sorted(found, key=lambda p: p["pid"])


# the vLLM engine's unit on every node (roles/inference_service)
VLLM_UNIT = "twinrail-vllm.service"


def vllm_state(address: str, proc: str = "/proc") -> dict:
    """A node's vLLM (headless on a worker): running, stopped (a paused
    process stops the whole group's collectives), or gone. Its main process
    is the launcher (bin/twinrail-vllm): once it is gone the rest are being
    stopped by systemd (up to the unit's stop timeout), not serving."""
    processes = unit_processes(VLLM_UNIT, proc)
    if not processes:
        return {"address": address, "ok": False, "problem": f"vLLM ({VLLM_UNIT}) not running"}
    main = next((p for p in processes if any(a.endswith("/twinrail-vllm") for a in p["argv"][:2])), None)
    if main is None:
        return {"address": address, "ok": False,
                "problem": f"vLLM ({VLLM_UNIT}): its main process is gone, {len(processes)} left stopping "
                           f"(pid {', '.join(str(p['pid']) for p in processes)})"}
    stopped = [p for p in processes if p["state"] not in ("R", "S", "D")]
    if stopped:
        return {"address": address, "pid": main["pid"], "ok": False,
                "problem": f"vLLM ({VLLM_UNIT}) has {len(stopped)} of {len(processes)} processes "
                           f"{'stopped' if stopped[0]['state'] in ('T', 't') else 'in state ' + stopped[0]['state']} "
                           f"(pid {', '.join(str(p['pid']) for p in stopped)})"}
    return {"address": address, "pid": main["pid"], "state": main["state"], "ok": True}


def listening(address: str, port: int, proc: str = "/proc") -> bool:
    """Whether a TCP socket listens on address:port (or on 0.0.0.0:port), from
    the kernel's socket table: no packet sent."""
    wanted = {f"{struct.unpack('=I', socket.inet_aton(a))[0]:08X}:{port:04X}" for a in (address, "0.0.0.0")}
    try:
        lines = _read(os.path.join(proc, "net", "tcp")).splitlines()[1:]
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[1] in wanted and fields[3] == "0A":  # TCP_LISTEN
            return True
    return False


def rpc_server_state(address: str, port: int, proc: str = "/proc") -> dict:
    """The ggml-rpc-server bound to ``address``: running, stopped, gone, or
    not listening."""
    for process in find_processes("ggml-rpc-server", proc):
        argv = process["argv"]
        if "-H" in argv and argv.index("-H") + 1 < len(argv) and argv[argv.index("-H") + 1] == address:
            break
    else:
        return {"address": address, "ok": False, "problem": "ggml-rpc-server not running"}
    state = process["state"]
    if state not in ("R", "S", "D"):
        return {"address": address, "pid": process["pid"], "state": state, "ok": False,
                "problem": f"ggml-rpc-server (pid {process['pid']}) is "
                           f"{'stopped' if state in ('T', 't') else 'in state ' + state}"}
    # looked up, not connected to: the RPC server takes one client at a
    # time and leaves other connections in its backlog, which probes would fill
    if not listening(address, port, proc):
        return {"address": address, "pid": process["pid"], "state": state, "ok": False,
                "problem": f"ggml-rpc-server (pid {process['pid']}) does not listen on {address}:{port}"}
    return {"address": address, "pid": process["pid"], "state": state, "ok": True}
