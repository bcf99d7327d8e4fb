# -*- coding: utf-8 -*-
"""The vLLM group as it serves, read from each node's journal of its
vLLM unit since the unit's last start: which ranks the node runs (rank,
world size, the rendezvous they met at, the pipeline and tensor ranks)
and whether each loaded its weights; and the verdict over every node:
each rank of the world exactly once, rank 0 on the master, every rank met
at the master's rail0 address and loaded its share."""

from __future__ import annotations

import re

# a line's process, as vLLM prefixes it: "(Worker pid=4544)", "(Worker_TP0
# pid=57)", Ray's "(RayWorkerWrapper pid=631, ip=10.244.1.107)"; nested
# prefixes ("(Worker pid=312) (Worker_TP0 pid=312)") name the same process,
# the last is the line's own. Some versions print a rank's lines bare.
_PREFIX = re.compile(r"\((?P<name>[\w.-]+) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\)")
_INIT = re.compile(r"world_size=(\d+) rank=(\d+) local_rank=(\d+) distributed_init_method=(\S+) backend=(\w+)")
_ASSIGNED = re.compile(r"\brank (\d+) in world size (\d+) is assigned as .*?PP rank (\d+), "
                       r"(?:PCP rank \d+, )?TP rank (\d+)")
_LOADED = re.compile(r"Loading weights took ([\d.]+) seconds")


def _pid(line: str) -> int | None:
    found = _PREFIX.findall(line)
    return int(found[-1][1]) if found else None


def read_ranks(text: str) -> list[dict]:
    """The ranks one node's journal shows, in rank order: rank, world size,
    rendezvous (``init``) and backend where vLLM printed them, pipeline and
    tensor ranks, the process (``pid``, where the line names it) and
    ``loaded_s``: how long the rank's weights took. vLLM prints that line
    from every rank in some versions and once a node in others: a rank
    without a line of its own takes its node's (``loaded_by``: rank or
    node)."""
    ranks: dict[int, dict] = {}
    by_pid: dict[int, int] = {}
    loads: list[tuple[int | None, float]] = []
    for line in text.splitlines():
        pid = _pid(line)
        if match := _INIT.search(line):
            rank = int(match[2])
            ranks.setdefault(rank, {"rank": rank}).update(
                world_size=int(match[1]), local_rank=int(match[3]), init=match[4], backend=match[5])
        elif match := _ASSIGNED.search(line):
            rank = int(match[1])
            ranks.setdefault(rank, {"rank": rank}).update(world_size=int(match[2]), pp_rank=int(match[3]),
                                                          tp_rank=int(match[4]))
        elif match := _LOADED.search(line):
            loads.append((pid, float(match[1])))
            continue
        else:
            continue
        if pid is not None:
            ranks[rank]["pid"] = pid
            by_pid[pid] = rank
    for pid, seconds in loads:
        if pid in by_pid:
            ranks[by_pid[pid]].update(loaded_s=seconds, loaded_by="rank")
    node = max((seconds for _, seconds in loads), default=None)
    for rank in ranks.values():
        if "loaded_s" not in rank and node is not None:
            rank.update(loaded_s=node, loaded_by="node")
    return [ranks[rank] for rank in sorted(ranks)]


def group_problems(by_host: dict, master: str, rendezvous: str, tensor: int, pipeline: int) -> list[str]:
    """What is wrong with the group the nodes' journals show (host ->
    read_ranks), each naming the host and rank."""
    world = tensor * pipeline
    problems, seen = [], {}
    for host, ranks in by_host.items():
        if not ranks:
            problems.append(f"{host}: its vLLM shows no rank since it started")
        for rank in ranks:
            where = f"{host}: rank {rank['rank']}"
            if rank["rank"] in seen:
                problems.append(f"{where}: also on {seen[rank['rank']]}")
            seen[rank["rank"]] = host
            if rank.get("world_size") != world:
                problems.append(f"{where}: world size {rank.get('world_size')}, expected {world} "
                                f"(tensor {tensor} x pipeline {pipeline})")
            # vLLM from 0.16 prints where each rank met; older ones do not
            if "init" in rank and rank["init"] != f"tcp://{rendezvous}":
                problems.append(f"{where}: met at {rank.get('init')}, expected tcp://{rendezvous} (the master's rail0)")
            if "loaded_s" not in rank:
                problems.append(f"{where}: loaded no weights")
    missing = sorted(set(range(world)) - set(seen))
    if missing:
        problems.append(f"ranks {', '.join(map(str, missing))} of {world} run on no node")
    if seen.get(0) not in (None, master):
        problems.append(f"rank 0 runs on {seen[0]}, expected the master {master}")
    return problems


def summary(by_host: dict) -> str:
    """One line: each host's ranks with their pipeline/tensor ranks."""
    return "; ".join(f"{host}: " + ", ".join(f"rank {r['rank']} (pipeline {r.get('pp_rank')}, tensor {r.get('tp_rank')}, "
                                             f"weights in {r.get('loaded_s')} s)" for r in ranks)
                     for host, ranks in by_host.items())
