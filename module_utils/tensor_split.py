# -*- coding: utf-8 -*-
"""Where the layers go: the split the memory plan assumes, given to
llama-server explicitly, and the check that it holds after the load.

The memory plan (memory_plan.py) gives every node (weights + KV) / nodes.
Left to itself, llama.cpp splits the layers over its devices by each
device's free memory, and every worker runs one ggml-rpc-server per rail,
each a device reporting the whole node's free memory: on the seed's two
GB10 boxes (the master's GPU one device, the worker's two rail servers two
more) the worker would get about two thirds, past its hard watermark.

llama.cpp (src/llama.cpp, llama_model_load_from_file_impl) lists the RPC
servers first, in --rpc order, then the local GPU; the CPU is no device:
with ``-ngl N`` the first ``layers + 1 - N`` layers stay on the CPU, the
others (the output layer counted as one) are split over the devices by
the ``--tensor-split`` proportions (src/llama-model.cpp, load_tensors). So:

- a master with a GPU the runtime uses holds its share there: ``-ngl`` all,
  one proportion per RPC server (each worker's share divided among its
  rails) and the master's last;
- a master without one (a CPU build) holds its share on its CPU: its
  layers are the first ``round(layers x share)``, ``-ngl`` the rest, and
  the proportions name the RPC servers only.

After the load, llama-server's log names each device's buffers
("model buffer size", "KV buffer size"); ``measured_shares`` adds them up
per node and ``split_problems`` compares them with the plan. A CPU master
loading with mmap reports a ``CPU_Mapped`` buffer: the file's mapped range,
which may be more than its layers (the lab's 135M model maps all its
92 MiB), so its measured share errs high; the lab's KV cache, placed per
layer, keeps it within the bound there. Pure Python, the parser tested on
real logs (tests/fixtures/hardware/ and lab/)."""

from __future__ import annotations

import re

MIB = 1 << 20

# "load_tensors: RPC0[198.19.0.2:50052] model buffer size = 12.34 MiB",
# "llama_kv_cache:        CPU KV buffer size =   384.00 MiB"; the older
# naming is RPC[host:port], the newer RPCn[host:port]; newer logs prefix
# "[pid] m.ss.mmm.uuu I ".
_BUFFER = re.compile(r"(?P<device>[A-Za-z][\w.-]*(?:\[[^\]\s]+\])?)\s+(?P<kind>model|KV|RS) buffer size\s*=\s*"
                     r"(?P<size>[\d.]+) (?P<unit>MiB|GiB|KiB)")
_RPC = re.compile(r"^RPC\d*\[(?P<endpoint>[^\]]+)\]$")
_LOAD_FAILED = re.compile(r"(?:error loading model|failed to load model|unable to allocate|failed to allocate)[^\n]*")
_UNITS = {"KiB": 1 << 10, "MiB": MIB, "GiB": 1 << 30}


def plan_split(master: str, workers: list[str], rails: dict, port: int, layers: int,
               master_gpu: bool) -> dict:
    """The planned split: every node an equal share (the memory plan's),
    each worker's divided among its rails' RPC servers.

    ``workers`` in the --rpc order; ``rails``: host -> twinrail_rails.
    Returns ``endpoints`` (the --rpc list), ``gpu_layers`` (-ngl),
    ``tensor_split`` (the -ts proportions), ``guard_workers`` (the
    guard's host@address=rail list, in --rpc order), ``nodes`` (host -> planned
    share), ``devices`` (endpoint or GPU -> host) and ``lines``."""
    layers = int(layers)
    if layers < 1:
        raise ValueError(f"twinrail_model.layers: expected a positive number of layers, got {layers}")
    if not workers:
        raise ValueError("the split needs at least one worker in the group workers")
    nodes = [master] + list(workers)
    share = 1 / len(nodes)
    endpoints, devices, proportions, guard_workers = [], {}, [], []
    for worker in workers:
        worker_rails = rails[worker]
        if not worker_rails:
            raise ValueError(f"{worker}: twinrail_rails: expected at least one rail, got none")
        for index, rail in enumerate(worker_rails):
            address = str(rail['address']).split('/', 1)[0]
            endpoint = f"{address}:{int(port)}"
            endpoints.append(endpoint)
            guard_workers.append(f"{worker}@{address}={rail.get('name') or f'rail{index}'}")
            devices[endpoint] = worker
            proportions.append(share / len(worker_rails))
    lines = [f"{len(nodes)} node(s), each {share:.1%} of the weights and KV cache (the memory plan's share)"]
    if master_gpu:
        gpu_layers = layers + 1
        proportions.append(share)
        devices["GPU"] = master
        lines.append(f"{master}: its share on its GPU (the last device); -ngl {gpu_layers} (all {layers} layers "
                     "and the output layer on the devices)")
    else:
        master_layers = round(layers * share)
        gpu_layers = layers + 1 - master_layers
        lines.append(f"{master}: no GPU the runtime uses: its share on its CPU, the first {master_layers} of "
                     f"{layers} layers; -ngl {gpu_layers} (the rest and the output layer on the RPC servers)")
    total = sum(proportions)
    split = [round(p / total, 4) for p in proportions]
    for worker in workers:
        count = len(rails[worker])
        lines.append(f"{worker}: {share:.1%} over {count} RPC server(s), {share / count:.1%} each")
    lines.append("--tensor-split " + ",".join(f"{p:g}" for p in split))
    return {"master": master, "endpoints": endpoints, "gpu_layers": gpu_layers, "tensor_split": split,
            "guard_workers": guard_workers,
            "nodes": {host: round(share, 6) for host in nodes}, "devices": devices,
            "layers": layers, "master_gpu": bool(master_gpu), "lines": lines}


def parse_buffers(text: str) -> dict:
    """The buffers llama.cpp's loader reports, in log order: device, kind
    (model, KV, RS), bytes; and the loader's error line if it failed."""
    buffers = []
    for line in text.splitlines():
        match = _BUFFER.search(line)
        if match:
            buffers.append({"device": match.group("device"), "kind": match.group("kind"),
                            "bytes": int(float(match.group("size")) * _UNITS[match.group("unit")])})
    failed = _LOAD_FAILED.search(text)
    return {"buffers": buffers, "error": failed.group(0).strip() if failed else None}


def device_host(device: str, devices: dict, master: str) -> str | None:
    """The node holding a device: an RPC server by its endpoint (None when
    the plan does not know it), anything else (CPU, CPU_Mapped, CUDA0, ...)
    the master's own."""
    match = _RPC.match(device)
    if match:
        return devices.get(match.group("endpoint"))
    return master


def measured_shares(buffers: list[dict], devices: dict, master: str) -> dict:
    """Bytes and share of all buffers per node; ``unknown``: RPC devices the
    plan does not name."""
    per_node, unknown = {}, []
    for buffer in buffers:
        host = device_host(buffer["device"], devices, master)
        if host is None:
            unknown.append(buffer["device"])
            continue
        per_node[host] = per_node.get(host, 0) + buffer["bytes"]
    total = sum(per_node.values())
    return {"total_bytes": total, "unknown": sorted(set(unknown)),
            "nodes": {host: {"bytes": size, "share": size / total if total else 0.0}
                      for host, size in per_node.items()}}


def split_problems(plan: dict, measured: dict, tolerance: float) -> list[str]:
    """Each node whose measured share is off its planned share by more than
    ``tolerance`` of it plus one layer's worth (llama.cpp places whole
    layers: a node gets one more or one less than its fraction), as
    '<node>: planned P, measured M (allowed ...)'."""
    problems = []
    step = 1 / (plan["layers"] + 1)
    for device in measured["unknown"]:
        problems.append(f"{device}: a device the plan does not name (the --rpc list and the plan disagree)")
    for host, planned in plan["nodes"].items():
        got = measured["nodes"].get(host, {"bytes": 0, "share": 0.0})
        allowed = planned * float(tolerance) + step
        if abs(got["share"] - planned) > allowed:
            problems.append(
                f"{host}: planned {planned:.1%} of the model and KV cache, measured {got['share']:.1%} "
                f"({got['bytes'] / MIB:.1f} of {measured['total_bytes'] / MIB:.1f} MiB in llama-server's buffers); "
                f"allowed {planned:.1%} +/- {allowed:.1%} ({float(tolerance):g} of the share and one of "
                f"{plan['layers'] + 1} layers)")
    return problems
