# -*- coding: utf-8 -*-
"""The group's collectives measured before any model loads: one rank a
node joins a torch.distributed group in the engine's own environment (NCCL
on GPU nodes, with NCCL_DEBUG=INFO; gloo on CPU nodes, the lab's case),
and sweeps an all_reduce and an all_gather over a few sizes. Figures as
nccl-tests gives them (NVIDIA's PERFORMANCE.md): algbw = bytes / time,
bus bandwidth = algbw x 2(n-1)/n for all_reduce, x (n-1)/n for all_gather
(bytes the whole gathered buffer), each the slowest rank's time.

SCRIPT runs in the engine's Python (torch is there, not in Ansible's) and
prints NCCL's own log lines, then one JSON line. ``verdict`` reads both:
NCCL's transport and devices (nccl_log), values each rank must see, and
the bus bandwidth against ``required`` (a share of what the bandwidth stage
measured on the same rails). Each sentence names the node."""

from __future__ import annotations

import json

from ansible.module_utils.engines.vllm.handshake import cause
from ansible.module_utils.rails import nccl_log

SCRIPT = r"""
import datetime, json, sys, time
import torch
import torch.distributed as dist
cfg = json.loads(sys.argv[1])
world, rank, backend = cfg["world"], cfg["rank"], cfg["backend"]
started = time.monotonic()
if backend == "nccl":
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    sync = torch.cuda.synchronize
else:
    device = torch.device("cpu")
    sync = lambda: None
dist.init_process_group(backend, init_method=f"tcp://{cfg['address']}:{cfg['port']}", world_size=world, rank=rank,
                        timeout=datetime.timedelta(seconds=cfg["timeout"]))
joined = time.monotonic() - started


def slowest(seconds):
    t = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def all_reduce(size):
    x = torch.full((size // 4,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(x)
    sync()
    right = bool(torch.all(x == world * (world + 1) / 2).item())
    def op():
        dist.all_reduce(x)
    return op, right


def all_gather(size):
    per = size // 4 // world
    mine = torch.full((per,), float(rank + 1), dtype=torch.float32, device=device)
    out = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(out, mine)
    sync()
    right = all(bool(torch.all(t == j + 1).item()) for j, t in enumerate(out))
    def op():
        dist.all_gather(out, mine)
    return op, right


rows = []
for name, make in (("all_reduce", all_reduce), ("all_gather", all_gather)):
    for size in cfg["sizes"]:
        op, right = make(size)
        for _ in range(cfg["warmup"]):
            op()
        sync()
        dist.barrier()
        begun = time.monotonic()
        for _ in range(cfg["iterations"]):
            op()
        sync()
        took = slowest((time.monotonic() - begun) / cfg["iterations"])
        rows.append({"op": name, "size": size, "time_us": round(took * 1e6, 1), "correct": right})
nccl = None
if backend == "nccl":
    v = torch.cuda.nccl.version()
    nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
dist.destroy_process_group()
print(json.dumps({"rank": rank, "world_size": world, "backend": backend, "torch": torch.__version__, "nccl": nccl,
                  "joined_s": round(joined, 3), "rows": rows}), flush=True)
"""

OPS = ("all_reduce", "all_gather")
# the options of a module that joins every node in one group, one rank a
# node (collective_gate, vllm_handshake; doc fragment twinrail_group)
GROUP_OPTIONS = {
    "python": {"type": "path", "required": True},
    "address": {"type": "str", "required": True},
    "port": {"type": "int", "required": True},
    "world_size": {"type": "int", "required": True},
    "rank": {"type": "int", "required": True},
    "timeout": {"type": "int", "default": 60},
    "host": {"type": "str", "required": True},
}


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' bus bandwidth factor: 2(n-1)/n for all_reduce, (n-1)/n
    for all_gather."""
    if op == "all_reduce":
        return 2 * (world - 1) / world
    if op == "all_gather":
        return (world - 1) / world
    raise ValueError(f"op: expected one of {', '.join(OPS)}, got {op!r}")


def figures(rows: list[dict], world: int) -> list[dict]:
    """Each row with its algbw and busbw in GB/s (10^9 bytes/s)."""
    out = []
    for row in rows:
        seconds = row["time_us"] / 1e6
        algbw = row["size"] / seconds / 1e9 if seconds > 0 else 0.0
        out.append(dict(row, algbw=round(algbw, 3), busbw=round(algbw * bus_factor(row["op"], world), 3)))
    return out


def peaks(rows: list[dict]) -> dict:
    """The best bus bandwidth of each operation, with its size: what the
    links carry once a message is large enough (nccl-tests' plateau)."""
    out = {}
    for row in rows:
        if "busbw" in row and (row["op"] not in out or row["busbw"] > out[row["op"]]["busbw"]):
            out[row["op"]] = {"busbw": row["busbw"], "size": row["size"]}
    return out


def rails_used(backend: str, rails: list[dict]) -> list[dict]:
    """The rails the group's data crosses: NCCL on RDMA every rail with an
    RDMA device (NCCL_IB_HCA names each), else rail0 alone (NCCL's or
    gloo's socket interface)."""
    if backend == "nccl":
        rdma = [r for r in rails if r.get("rdma_device")]
        if rdma:
            return rdma
    return rails[:1]


def required(report: dict | None, rails: list[str], share: float) -> dict:
    """The bus bandwidth the group must reach (GB/s): ``share`` of what the
    bandwidth stage measured on the rails it crosses (each rail its
    slowest measured pair, summed; Gb/s / 8), with the basis in words.
    None when no kept report measured every one of those rails."""
    if not 0 < share <= 1:
        raise ValueError(f"share: expected a fraction in (0, 1], got {share!r}")
    if not report or not report.get("rails"):
        return {"gbytes": None, "basis": "no bandwidth report is kept, so the bus bandwidth is not judged"}
    measured = {}
    for row in report["rails"]:
        value = row.get("bw_average_gbps")
        if value is not None and row.get("rail") in rails:
            measured[row["rail"]] = min(value, measured.get(row["rail"], value))
    missing = [r for r in rails if r not in measured]
    if missing:
        return {"gbytes": None, "basis": f"the kept bandwidth report ({report.get('run')}) measured no "
                                         f"{', '.join(missing)}, so the bus bandwidth is not judged"}
    total = sum(measured[r] for r in rails)
    parts = " + ".join(f"{r} {measured[r]:.1f}" for r in rails)
    return {"gbytes": round(share * total / 8, 3),
            "basis": f"{share:g} x ({parts}) Gb/s measured by the bandwidth stage ({report.get('run')}) / 8"}


def transport_problems(text: str, *, host: str, devices: list[str], interface: str) -> tuple[list[str], dict]:
    """What NCCL's INFO lines in ``text`` say is wrong (sockets, a rail's
    device unused, another device, the bootstrap off rail0, its warnings
    and errors), each naming the node; and what it said it used."""
    debug = nccl_log.parse_debug(text)
    seen = nccl_log.problems(debug, None, devices=devices, interface=interface)
    used = {name: {"network": h["network"], "ib_devices": h["ib_devices"], "socket_interfaces": h["socket_interfaces"],
                   "version": h["version"]} for name, h in debug["hosts"].items()}
    return [f"collectives: {host}: {p}" for p in seen], used


def bandwidth_problems(rows: list[dict], need: dict, *, host: str) -> list[str]:
    """The operations whose best bus bandwidth is under what is required."""
    if need.get("gbytes") is None:
        return []
    best = peaks(rows)
    return [f"collectives: {host}: {op} reached {best[op]['busbw']:g} GB/s bus bandwidth at most "
            f"({best[op]['size'] >> 20} MiB), required {need['gbytes']:g} GB/s ({need['basis']})"
            for op in sorted(best) if best[op]["busbw"] < need["gbytes"]]


def verdict(stdout: str, rc: int, stderr: str, *, host: str, backend: str, world: int, devices: list[str],
            interface: str, need: dict) -> dict:
    """ok, problems (each naming the host), the figures of the sweep and
    what NCCL said it used."""
    text = stdout + "\n" + stderr
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith("{")), None)
    if rc != 0 or line is None:
        said = [f"NCCL failed: {e}" for e in nccl_log.parse_debug(text)["errors"]] if backend == "nccl" else []
        return {"ok": False, "problems": [f"collectives: {host}: the {backend} group failed (exit {rc}): "
                                          f"{cause(stderr)}" + (f"; {'; '.join(said)}" if said else "")]}
    result = json.loads(line)
    rows = figures(result["rows"], world)
    problems = [f"collectives: {host}: wrong values after {r['op']} of {r['size']} bytes"
                for r in rows if not r["correct"]]
    used = None
    if backend == "nccl":
        seen, used = transport_problems(text, host=host, devices=devices, interface=interface)
        problems += seen
    problems += bandwidth_problems(rows, need, host=host)
    return {"ok": not problems, "problems": problems, "rows": rows, "peaks": peaks(rows),
            "joined_s": result["joined_s"], "nccl": result.get("nccl"), "torch": result.get("torch"), "used": used}


def group_problems(outcomes: dict) -> list[str]:
    """What is wrong across the group, from every node's outcome ({host:
    collective_gate's result}): each node's own problems, then NCCL
    versions that differ between nodes (torch's NCCL, or NCCL's own
    banner), which NCCL does not always refuse and which can hang or
    corrupt the first collective."""
    out = [p for host in sorted(outcomes) for p in (outcomes[host] or {}).get("problems") or []]
    versions = {}
    for host, outcome in sorted(outcomes.items()):
        said = {(u or {}).get("version") for u in ((outcome or {}).get("used") or {}).values()} - {None}
        said |= {outcome["nccl"]} if (outcome or {}).get("nccl") else set()
        if said:
            versions[host] = ", ".join(sorted(said))
    if len(set(versions.values())) > 1:
        out.append("collectives: NCCL versions differ across the group: "
                   + "; ".join(f"{host} {v}" for host, v in versions.items())
                   + " (every node must load the lock's NCCL)")
    return out


def summary(host: str, backend: str, outcome: dict, need: dict) -> str:
    """One line of what the sweep reached, for the run's output."""
    best = outcome.get("peaks") or {}
    said = ", ".join(f"{op} {best[op]['busbw']:g} GB/s at {best[op]['size'] >> 20} MiB" for op in OPS if op in best)
    over = f" (required {need['gbytes']:g} GB/s)" if need.get("gbytes") is not None else f" ({need.get('basis')})"
    return f"collectives: {host}: {backend}: {said}{over}"
