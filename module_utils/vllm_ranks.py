# -*- coding: utf-8 -*-
"""The vLLM group as it serves, read from each node's journal of its
vLLM unit since the unit's last start: which ranks the node runs (rank,
world size, the rendezvous they met at, the pipeline and tensor ranks)
and whether each loaded its weights; and the verdict over every node:
each rank of the world exactly once, rank 0 on the master, every rank met
at the master's rail0 address and loaded its share."""

from __future__ import annotations

import re

_INIT = re.compile(r"\(\S+ pid=(\d+)\).*world_size=(\d+) rank=(\d+) local_rank=(\d+) "
                   r"distributed_init_method=(\S+) backend=(\w+)")
_ASSIGNED = re.compile(r"\(\S+ pid=(\d+)\).*rank (\d+) in world size (\d+) is assigned as .*?PP rank (\d+), "
                       r"(?:PCP rank \d+, )?TP rank (\d+)")
_LOADED = re.compile(r"\(\S+ pid=(\d+)\).*Loading weights took ([\d.]+) seconds")


def read_ranks(text: str) -> list[dict]:
    """The ranks one node's journal shows, by process, in rank order."""
    ranks: dict[int, dict] = {}
    for line in text.splitlines():
        if match := _INIT.search(line):
            pid = int(match[1])
            ranks.setdefault(pid, {"pid": pid}).update(
                world_size=int(match[2]), rank=int(match[3]), local_rank=int(match[4]), init=match[5],
                backend=match[6])
        elif match := _ASSIGNED.search(line):
            ranks.setdefault(int(match[1]), {"pid": int(match[1])}).update(pp_rank=int(match[4]),
                                                                          tp_rank=int(match[5]))
        elif match := _LOADED.search(line):
            ranks.setdefault(int(match[1]), {"pid": int(match[1])})["loaded_s"] = float(match[2])
    return sorted((r for r in ranks.values() if "rank" in r), key=lambda r: r["rank"])


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
            if rank.get("init") != f"tcp://{rendezvous}":
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
