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

from ansible.module_utils.gpu.facts import gpu_settings_problems

MIB = 1 << 20

# "load_tensors: RPC0[198.19.0.2:<port>] model buffer size = 12.34 MiB",
# "llama_kv_cache:        CPU KV buffer size =   384.00 MiB"; the older
# naming is RPC[host:port], the newer RPCn[host:port]; newer logs prefix
# "[pid] m.ss.mmm.uuu I ". Older builds print the weights' buffer with no
# kind ("llm_load_tensors:      CUDA0 buffer size =  4155.99 MiB"), and a
# model split over several GGUF files gives one line per file and device.
# The compute and output buffers are the context's scratch, not the
# model's or the KV cache's: they are not part of the split.
_BUFFER = re.compile(r"(?<![\w\]])(?P<device>(?!(?:compute|output)\b)[A-Za-z][\w.-]*(?:\[[^\]\s]+\])?)\s+"
                     r"(?:(?P<kind>model|KV|RS)\s+)?buffer size\s*=\s*(?P<size>[\d.]+) (?P<unit>MiB|GiB|KiB)")
_RPC = re.compile(r"^RPC\d*\[(?P<endpoint>[^\]]+)\]$")
# the load's own failure: a loader error, or an allocation that failed
# ("failed to allocate CUDA0 buffer of size ...", "cudaMalloc failed: out
# of memory"); an allocation that failed before llama.cpp's retry without
# pipeline parallelism is what the retry gave up, not the load's failure
_LOAD_FAILED = re.compile(r"(?:error loading model|failed to load model|unable to allocate|failed to allocate"
                          r"|failed to create context|failed to initialize the context|cudaMalloc failed"
                          r"|exiting due to model loading error|RPC server version mismatch"
                          r"|Failed to connect to \S*:\d+)[^\n]*")
# what a load error means, by its words
_LOAD_CAUSES = (
    ("RPC server version mismatch", "the worker's rpc-server speaks another RPC protocol version than this "
     "llama-server: both must come from the same runtime release (the runtime stage installs one on every node)"),
    ("Failed to connect to :", "an RPC endpoint without a host: the --rpc list is malformed"),
    ("Failed to connect to", "no rpc-server answered at that address: the worker's RPC server is not running, "
     "listens elsewhere, or the rail or firewall drops it"),
)
_RETRY = re.compile(r"[^\n]*retrying without pipeline parallelism[^\n]*")
# a process that dies: the CUDA backend's error ("CUDA error: an illegal
# memory access was encountered", older "CUDA error 209 at ggml-cuda.cu:
# 6951: no kernel image ..."), ROCm's, a failed assertion (GGML_ASSERT(x)
# failed, older "GGML_ASSERT: file:line: x"), an uncaught C++ exception
# and what other runtimes and backends die with: ROCm's HSA runtime
# ("Callback: Queue 0x... aborting with error : HSA_STATUS_ERROR_..."), an
# abort as the shell, Go's runtime (ollama) or systemd's wrapper print it
_FATAL = re.compile(r"(?:CUDA error: \S[^\n]*|CUDA error \d+ at \S+: [^\n]+|ROCm error: \S[^\n]*"
                    r"|GGML_ASSERT\([^\n]*\) failed[^\n]*|GGML_ASSERT: [^\n]+"
                    r"|terminate called after throwing an instance of [^\n]+"
                    r"|aborting with error : [^\n]+|HSA_STATUS_ERROR_\w+[^\n]*"
                    r"|SIGABRT: abort|signal: aborted[^\n]*|\bAborted \(core dumped\))")
_CURRENT_DEVICE = re.compile(r"current device: (?P<index>\d+)")
# where: "current device: 1, in function ggml_cuda_op_mul_mat at .../ggml-cuda.cu:1621", else "file.cu:110: ..."
_IN_FUNCTION = re.compile(r"in function (?P<function>\S+) at (?P<file>\S+:\d+)")
_FAILED_IN = re.compile(r"(?P<file>\S+\.(?:cu|cpp|c|h):\d+): ")
_COMPUTE = re.compile(r"compute buffer size\s*=")
# "  Device 1: NVIDIA GeForce RTX 5090, compute capability 12.0, VMM: yes"
_CUDA_DEVICE = re.compile(r"Device (?P<index>\d+): (?P<name>[^,\n]+), compute capability (?P<cc>\d+\.\d+)")
# what each death means on real hardware, and what to do
_CAUSES = (
    ("no kernel image is available", "the runtime has no kernel for this GPU{cc}: its CUDA build's archs "
     "(runtime_build_cuda_archs) do not include it; rebuild with the GPU's arch"),
    ("out of memory", "the GPU ran out of memory after the weights were placed (the first graph's compute "
     "buffers): lower the context or batch size, or the GPU's planned share"),
    ("illegal memory access", "a kernel faulted on the GPU: a runtime bug, or a sick GPU (look for Xid lines "
     "in the kernel log and at nvidia-smi -q's ECC and remapped rows)"),
    ("GGML_ASSERT", "an assertion in llama.cpp failed: a runtime bug or a model this build does not support"),
    ("DeviceLost", "the GPU was lost to the Vulkan backend (a hang or reset of the GPU: look at the kernel log)"),
    ("terminate called", "llama-server threw an error it did not handle"),
    ("APERTURE_VIOLATION", "a kernel accessed memory outside the GPU's range (ROCm's illegal memory access): a "
     "runtime bug, or a backend this GPU's architecture does not support"),
    ("HSA_STATUS_ERROR", "ROCm's runtime stopped the process on a GPU error"),
    ("abort", "the process aborted (a failed check in the runtime or its GPU backend); the lines before it say "
     "which"),
    ("Abort", "the process aborted (a failed check in the runtime or its GPU backend); the lines before it say "
     "which"),
)
_UNITS = {"KiB": 1 << 10, "MiB": MIB, "GiB": 1 << 30}


def plan_split(master: str, workers: list[str], rails: dict, port: int, layers: int,
               master_gpu: bool, gpus: dict | None = None) -> dict:
    """The planned split: every node an equal share (the memory plan's),
    each worker's divided among its rails' RPC servers.

    ``workers`` in the --rpc order; ``rails``: host -> twinrail_rails.
    Returns ``endpoints`` (the --rpc list), ``gpu_layers`` (-ngl),
    ``tensor_split`` (the -ts proportions), ``guard_workers`` (the
    guard's host@address=rail list, in --rpc order), ``nodes`` (host -> planned
    share), ``devices`` (endpoint or GPU -> host) and ``lines``.

    ``gpus``: host -> how many GPUs of its own it serves on
    (twinrail_gpu_count). A node with two or more is one device per GPU,
    its share divided evenly among them: the master's are CUDA0..n-1
    after the RPC servers; a worker's every rail server exposes all of its
    GPUs (``rpc_device_args``: ggml-rpc-server --device CUDA0,...) and
    each GPU's proportion is on one rail's server (GPUs dealt to rails in
    blocks, 0 on the others), so a rail left out moves its GPUs' layers to
    the same GPUs through another rail. ``server_devices`` counts each
    server's devices (the guard's --server-devices), ``master_devices``
    the master's; ``gpu_devices`` names each GPU's buffers (device ->
    [host, GPU index]) and ``gpu_shares`` the planned share of each."""
    layers = int(layers)
    if layers < 1:
        raise ValueError(f"twinrail_model.layers: expected a positive number of layers, got {layers}")
    if not workers:
        raise ValueError("the split needs at least one worker in the group workers")
    nodes = [master] + list(workers)
    share = 1 / len(nodes)
    counts = {host: _gpu_count(host, (gpus or {}).get(host)) for host in nodes}
    endpoints, devices, proportions, guard_workers = [], {}, [], []
    server_devices, gpu_devices, gpu_shares, device_args = [], {}, {}, {}
    for worker in workers:
        worker_rails = rails[worker]
        if not worker_rails:
            raise ValueError(f"{worker}: twinrail_rails: expected at least one rail, got none")
        count = counts[worker]
        if count > 1:
            device_args[worker] = "--device " + ",".join(f"CUDA{g}" for g in range(count))
            gpu_shares.update({f"{worker} GPU {g}": round(share / count, 6) for g in range(count)})
        for index, rail in enumerate(worker_rails):
            address = str(rail['address']).split('/', 1)[0]
            endpoint = f"{address}:{int(port)}"
            endpoints.append(endpoint)
            guard_workers.append(f"{worker}@{address}={rail.get('name') or f'rail{index}'}")
            devices[endpoint] = worker
            if count > 1:
                server_devices.append(count)
                for g in range(count):
                    held = g * len(worker_rails) // count == index
                    proportions.append(share / count if held else 0.0)
                    gpu_devices[f"RPC{g}[{endpoint}]"] = [worker, g]
            else:
                server_devices.append(1)
                proportions.append(share / len(worker_rails))
    lines = [f"{len(nodes)} node(s), each {share:.1%} of the weights and KV cache (the memory plan's share)"]
    master_devices = 0
    if master_gpu:
        gpu_layers = layers + 1
        count = counts[master]
        if count > 1:
            master_devices = count
            proportions.extend([share / count] * count)
            for g in range(count):
                devices[f"CUDA{g}"] = master
                gpu_devices[f"CUDA{g}"] = [master, g]
                gpu_shares[f"{master} GPU {g}"] = round(share / count, 6)
            lines.append(f"{master}: its share on its {count} GPUs (CUDA0..CUDA{count - 1}, the last devices), "
                         f"{share / count:.1%} each; -ngl {gpu_layers} (all {layers} layers and the output layer on "
                         f"the devices)")
        else:
            master_devices = 1
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
        count, rail_count = counts[worker], len(rails[worker])
        if count > 1:
            blocks = [[g for g in range(count) if g * rail_count // count == i] for i in range(rail_count)]
            lines.append(f"{worker}: {share:.1%} over its {count} GPUs, {share / count:.1%} each; every rail's RPC "
                         f"server exposes all of them ({device_args[worker]}), the GPUs' layers through "
                         + ", ".join(f"{rails[worker][i].get('name') or f'rail{i}'} for GPU {b[0]}-{b[-1]}"
                                     for i, b in enumerate(blocks) if b))
        else:
            lines.append(f"{worker}: {share:.1%} over {rail_count} RPC server(s), {share / rail_count:.1%} each")
    lines.append("--tensor-split " + ",".join(f"{p:g}" for p in split))
    return {"master": master, "endpoints": endpoints, "gpu_layers": gpu_layers, "tensor_split": split,
            "guard_workers": guard_workers,
            "nodes": {host: round(share, 6) for host in nodes}, "devices": devices,
            "server_devices": server_devices, "master_devices": master_devices,
            "rpc_device_args": {host: device_args.get(host, "") for host in nodes},
            "gpu_devices": gpu_devices, "gpu_shares": gpu_shares,
            "layers": layers, "master_gpu": bool(master_gpu), "lines": lines}


def _gpu_count(host: str, value) -> int:
    """twinrail_gpu_count read for the split, by the GPU gate's rule: unset is one device."""
    problems = gpu_settings_problems(host, {"count": value})
    if problems:
        raise ValueError(problems[0])
    return 1 if value is None or value == "" else int(value)


def parse_buffers(text: str) -> dict:
    """What llama.cpp's loader and the process after it logged:

    - ``buffers``: the model's and KV cache's buffers, in log order:
      device, kind (model, KV, RS; an older line with no kind is the
      model's), bytes;
    - ``error``: the load's failure (the first failing line), or None;
    - ``degraded``: llama.cpp's retry without pipeline parallelism when its
      compute buffers did not fit and the load went on (``line``, and
      ``given_up``: the allocations that failed before it), or None;
    - ``fatal``: the line the process died on (a CUDA or ROCm error, a
      failed assertion, an unhandled exception) with ``after_load`` (its
      buffers were placed first), the GPU (``gpu``: index, and name and
      compute capability from the device list) and ``cause``, or None."""
    lines = text.splitlines()
    buffers = []
    for line in lines:
        match = _BUFFER.search(line)
        if match:
            buffers.append({"device": match.group("device"), "kind": match.group("kind") or "model",
                            "bytes": int(float(match.group("size")) * _UNITS[match.group("unit")])})
    retries = [i for i, line in enumerate(lines) if _RETRY.search(line)]
    last_retry = retries[-1] if retries else -1
    error, given_up = None, []
    for i, line in enumerate(lines):
        failed = _LOAD_FAILED.search(line)
        if not failed or _RETRY.search(line):
            continue
        if i < last_retry and "failed to allocate" in failed.group(0) or i < last_retry and "cudaMalloc" in line:
            given_up.append(line.strip())
            continue
        error = failed.group(0).strip()
        break
    degraded = ({"line": _RETRY.search(lines[last_retry]).group(0).strip(), "given_up": given_up}
                if retries and not error else None)
    return {"buffers": buffers, "error": error, "degraded": degraded, "fatal": _fatal(lines)}


def load_error_cause(error: str) -> str | None:
    """What a load error read by parse_buffers means, or None."""
    return next((why for words, why in _LOAD_CAUSES if words in error), None)


def _fatal(lines: list[str]) -> dict | None:
    """The first line the process died on, with the GPU it names and why."""
    # the load is done once its buffers (or the context's compute buffers, the load's last step) were placed
    first_buffer = next((i for i, line in enumerate(lines) if _BUFFER.search(line) or _COMPUTE.search(line)), None)
    for i, line in enumerate(lines):
        said = _FATAL.search(line)
        if not said:
            continue
        around = lines[i:i + 4]
        index = next((int(m.group("index")) for m in map(_CURRENT_DEVICE.search, around) if m), None)
        function = next((m for m in map(_IN_FUNCTION.search, around) if m), None)
        where = (f"in {function.group('function')} at {function.group('file')}" if function else
                 next((f"at {m.group('file')}" for m in map(_FAILED_IN.search, lines[max(i - 1, 0):i + 4]) if m),
                      None))
        gpu = {"index": index}
        if index is not None:
            listed = [m for m in map(_CUDA_DEVICE.search, lines) if m and int(m.group("index")) == index]
            if listed:
                gpu.update(name=listed[0].group("name").strip(), compute_capability=listed[0].group("cc"))
        cc = gpu.get("compute_capability")
        cause = next((c.format(cc=f" (compute capability {cc}, sm_{cc.replace('.', '')})" if cc else "")
                      for words, c in _CAUSES if words in said.group(0) or words in line), None)
        return {"line": said.group(0).strip(), "where": where, "gpu": gpu, "cause": cause,
                "after_load": first_buffer is not None and first_buffer < i}
    return None


def cuda_devices(text: str) -> list[dict]:
    """The CUDA devices ggml_cuda_init listed: index, name, compute capability."""
    return [{"index": int(m.group("index")), "name": m.group("name").strip(), "compute_capability": m.group("cc")}
            for m in _CUDA_DEVICE.finditer(text)]


def death_message(fatal: dict, host: str) -> str:
    """A death read by parse_buffers, in words: node, GPU, the fatal line, the cause."""
    gpu = fatal.get("gpu") or {}
    device = ""
    if gpu.get("index") is not None:
        device = f" on GPU {gpu['index']}" + (f" ({gpu['name']}, compute capability {gpu['compute_capability']})"
                                              if gpu.get("name") else "")
    when = "after it loaded the model (every buffer was placed)" if fatal.get("after_load") else "while loading"
    return (f"llama-server on {host} died {when}{device}: {fatal['line']}"
            + (f" [{fatal['where']}]" if fatal.get("where") else "")
            + (f": {fatal['cause']}" if fatal.get("cause") else ""))


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


def gpu_split_problems(plan: dict, buffers: list[dict], tolerance: float) -> list[str]:
    """Each GPU of a node with several (the plan's ``gpu_devices``) whose
    measured share of all buffers is off its planned share by more than
    ``tolerance`` of it plus one layer's worth, named by node and GPU. A
    worker's GPU is reached through any of its rails' servers: RPC<j>[...]
    of every one of them is its GPU j."""
    named = plan.get("gpu_devices") or {}
    if not named:
        return []
    total = sum(b["bytes"] for b in buffers)
    held: dict[str, int] = {}
    for buffer in buffers:
        where = named.get(buffer["device"])
        if where:
            key = f"{where[0]} GPU {where[1]}"
            held[key] = held.get(key, 0) + buffer["bytes"]
    step = 1 / (plan["layers"] + 1)
    problems = []
    for key, planned in plan["gpu_shares"].items():
        got = held.get(key, 0)
        share = got / total if total else 0.0
        allowed = planned * float(tolerance) + step
        if abs(share - planned) > allowed:
            problems.append(f"{key}: planned {planned:.1%} of the model and KV cache, measured {share:.1%} "
                            f"({got / MIB:.1f} of {total / MIB:.1f} MiB in llama-server's buffers); allowed "
                            f"{planned:.1%} +/- {allowed:.1%}")
    return problems
