# -*- coding: utf-8 -*-
"""The canary: before the weights stage moves a ~200 GB model, each node
loads a small GGUF with the runtime it just installed, on each of its GPUs
in turn, and answers one completion.

A CUDA build that lacks the GPU's arch, a driver older than the toolkit,
a GPU the process cannot see, a runtime that silently falls back to the
CPU: each shows here in seconds, named by node and GPU, instead of after
the weights are synced and the service's start times out.

What a GPU run must show in llama-server's log (verbosity 4):
- every layer offloaded ("offloaded N/N layers to GPU");
- the model's and the KV cache's buffers on that GPU (``--device CUDAi``),
  none on another GPU. llama.cpp keeps the token embeddings on the CPU by
  design (their lookup runs there), so a CPU model buffer is allowed; the
  canary loads without mmap (``-lm none``) so that buffer is the
  embeddings, not the file's mapped range;
- an answer to one completion (the first kernels run there: a missing
  arch dies at that point, not at the load).

A CPU build (the lab) runs the same load once, on the CPU: the load and
the answer, every buffer on the CPU (a CPU build's "GPU" is the CPU, so
its offload line says all layers).

Pure Python: the parsers read real logs (tests/fixtures/canary/,
llama-load/), the process handling is library/runtime_canary.py's.
"""

from __future__ import annotations

import re

from ansible.module_utils.engines.llamacpp.tensor_split import cuda_devices, parse_buffers

_OFFLOADED = re.compile(r"offloaded (?P<done>\d+)/(?P<total>\d+) layers to GPU")
_CUDA_INIT_FAILED = re.compile(r"ggml_cuda_init: failed to initialize CUDA: (?P<why>[^\n]+)")
_NO_USABLE_GPU = re.compile(r"no usable GPU found[^\n]*")
_GPU_DEVICE = re.compile(r"^(?:CUDA|ROCm|Vulkan|SYCL|MTL|RPC)\d*")
_HOST_DEVICES = ("CPU", "CPU_Mapped", "CPU_REPACK", "CUDA_Host")

# what llama.cpp's words about a failed CUDA start mean, and what to do
_INIT_CAUSES = (
    ("driver version is insufficient", "the NVIDIA driver{driver} is older than the CUDA toolkit the runtime was "
     "built with: update the driver, or build with a toolkit the driver supports (runtime_build_cuda_root)"),
    ("no CUDA-capable device", "the process sees no GPU: the driver is not loaded, /dev/nvidia* is missing, or "
     "CUDA_VISIBLE_DEVICES hides it"),
    ("forward compatibility", "the driver's forward compatibility does not cover this GPU: install a driver "
     "that supports the toolkit natively"),
)

# the canary's own llama-server options, the same on every node
CONTEXT = 256
SERVER_OPTIONS = ["-c", str(CONTEXT), "-np", "1", "-lm", "none", "--fit", "off", "--no-webui", "-lv", "4"]
PROMPT = "The capital of France is"
PREDICT = 4


def server_args(binary: str, model: str, port: int, device: str | None, threads: int = 0) -> list[str]:
    """llama-server's command for one canary run: all layers on ``device``
    (CUDA0, ...), or on the CPU build's own device when None."""
    args = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(int(port)), "-ngl", "999"] + SERVER_OPTIONS
    if device:
        args += ["--device", device]
    if int(threads) > 0:
        args += ["-t", str(int(threads))]
    return args


def read_load(text: str) -> dict:
    """What one canary run's log says: ``offloaded`` (done, total) or None,
    ``cuda_init`` (ggml_cuda_init's failure) or None, ``no_gpu`` (the
    fallback to the CPU) or None, ``devices`` (the CUDA devices listed),
    and parse_buffers' ``buffers``, ``error`` and ``fatal``."""
    offloads = list(_OFFLOADED.finditer(text))
    init = _CUDA_INIT_FAILED.search(text)
    no_gpu = _NO_USABLE_GPU.search(text)
    loaded = parse_buffers(text)
    return {"offloaded": (int(offloads[-1].group("done")), int(offloads[-1].group("total"))) if offloads else None,
            "cuda_init": init.group(0).strip() if init else None,
            "no_gpu": no_gpu.group(0).strip() if no_gpu else None,
            "devices": cuda_devices(text),
            "buffers": loaded["buffers"], "error": loaded["error"], "fatal": loaded["fatal"]}


def answered(reply) -> bool:
    """A /completion reply with at least one generated token."""
    return isinstance(reply, dict) and isinstance(reply.get("content"), str) \
        and int(reply.get("tokens_predicted") or 0) >= 1


def _init_cause(line: str, driver: str | None) -> str:
    shown = f" ({driver})" if driver else ""
    return next((cause.format(driver=shown) for words, cause in _INIT_CAUSES if words in line),
                "the CUDA runtime could not start on this node")


def _death(fatal: dict, archs: str) -> str:
    gpu = fatal.get("gpu") or {}
    when = "after the load (its first kernels)" if fatal.get("after_load") else "while loading"
    cause = fatal.get("cause") or ""
    if "no kernel image" in fatal["line"]:
        cc = gpu.get("compute_capability")
        arch = f"sm_{cc.replace('.', '')} (compute capability {cc})" if cc else "this GPU's arch"
        cause = (f"no kernel image for {arch}: the build's archs are {archs or 'not set'} "
                 "(runtime_build_cuda_archs); rebuild with the GPU's arch")
    where = f" [{fatal['where']}]" if fatal.get("where") else ""
    return f"died {when}: {fatal['line']}{where}" + (f": {cause}" if cause else "")


def problems(host: str, gpu: int | None, load: dict, reply, exit_code: int | None = None,
             archs: str = "", driver: str | None = None, tail: str = "") -> list[str]:
    """Everything wrong with one canary run, each naming the node and the
    GPU (``gpu`` its index, None for the CPU path): a failed CUDA start or
    a fallback to the CPU, a death (with its cause), a failed load,
    layers left off the GPU, buffers elsewhere, no answer."""
    where = f"{host} GPU {gpu}" if gpu is not None else f"{host} (CPU build)"
    device = f"CUDA{gpu}" if gpu is not None else None
    out = []
    if device and load["cuda_init"]:
        out.append(f"{where}: llama-server could not use the GPU ({load['cuda_init']}): "
                   f"{_init_cause(load['cuda_init'], driver)}")
    elif device and load["no_gpu"]:
        out.append(f"{where}: llama-server found no usable GPU ({load['no_gpu']}) and would run on the CPU")
    if load["fatal"]:
        out.append(f"{where}: the canary {_death(load['fatal'], archs)}")
    elif load["error"]:
        out.append(f"{where}: the canary model did not load: {load['error']}")
    if out:
        return out
    if reply is None:
        code = f" (exit code {exit_code})" if exit_code is not None else ""
        last = f"; its last lines: {tail}" if tail else ""
        return [f"{where}: llama-server{code} did not answer the canary's completion{last}"]
    buffers = load["buffers"]
    if not buffers:
        return [f"{where}: llama-server's log names no buffer (model or KV cache): not the loader's log at -lv 4"]
    if device:
        done, total = load["offloaded"] or (0, None)
        if total is None or done < total:
            out.append(f"{where}: {done}/{total if total is not None else '?'} layers offloaded to the GPU, "
                       "expected all of them")
        elsewhere = sorted({b["device"] for b in buffers
                            if _GPU_DEVICE.match(b["device"]) and b["device"] != device})
        if elsewhere:
            out.append(f"{where}: buffers on {', '.join(elsewhere)}, expected only on {device}")
        for kind in ("model", "KV"):
            if not any(b["device"] == device and b["kind"] == kind for b in buffers):
                held = sorted({b["device"] for b in buffers if b["kind"] == kind}) or ["nowhere"]
                out.append(f"{where}: the {kind} buffer is on {', '.join(held)}, expected on {device}")
    else:
        away = sorted({b["device"] for b in buffers if b["device"] not in _HOST_DEVICES})
        if away:
            out.append(f"{where}: buffers on {', '.join(away)}, expected on the CPU only")
    if not answered(reply):
        out.append(f"{where}: the canary's completion came back without a generated token: {str(reply)[:200]}")
    return out


def summary(gpu: int | None, load: dict, reply, seconds: float) -> dict:
    """One run in the module's result: where, offload, buffers (MiB per device and kind), answer, time."""
    mib = {}
    for b in load["buffers"]:
        key = f"{b['device']} {b['kind']}"
        mib[key] = round(mib.get(key, 0) + b["bytes"] / (1 << 20), 2)
    return {"gpu": gpu, "offloaded": list(load["offloaded"]) if load["offloaded"] else None, "buffers_mib": mib,
            "devices": load["devices"], "answer": (reply or {}).get("content") if isinstance(reply, dict) else None,
            "seconds": round(seconds, 2)}


# passed verdicts kept besides the last one: a rollback to a build the
# canary passed (the runtime stage keeps earlier builds) loads nothing again
KEPT_PASSES = 8


def passed_at(record: dict | None, key: dict) -> str | None:
    """When a canary passed with exactly this runtime, model, GPUs and
    driver: the last verdict, or one of the earlier passes it keeps
    (None: never, or its last run with this key failed)."""
    if not record:
        return None
    if record.get("key") == key:
        return record.get("at") if record.get("passed") else None
    return next((p.get("at") for p in record.get("earlier_passes") or [] if p.get("key") == key), None)


def due(record: dict | None, key: dict, mode: str) -> list[str]:
    """Why the canary runs (empty: a canary passed with the same runtime,
    model, GPUs and driver, the last one or a kept earlier one): mode
    always, no record, a failed one, or what changed since the last."""
    if mode not in ("auto", "always"):
        raise ValueError(f"runtime_build_measure must be auto or always, got {mode!r}")
    reasons = ["asked for (runtime_build_measure=always)"] if mode == "always" else []
    if not record:
        return reasons + ["no canary has run on this node"]
    if passed_at(record, key):
        return reasons
    if not record.get("passed"):
        reasons.append("the last canary failed")
    old = record.get("key") or {}
    reasons += [f"{name} changed" for name in sorted(set(old) | set(key)) if old.get(name) != key.get(name)]
    return reasons


def verdict(record: dict | None, key: dict, found: list[str], runs: list[dict], at: str) -> dict:
    """The record after a run: its verdict, and the passes it keeps for
    other keys (the previous verdict's if it passed, newest first; a key
    that failed now is dropped, it must pass again)."""
    last = [{"key": record["key"], "at": record.get("at")}] if record and record.get("passed") else []
    # the last verdict's own key is never among its earlier passes: only this run's key can repeat
    kept = [p for p in last + ((record or {}).get("earlier_passes") or []) if p.get("key") != key]
    return {"key": key, "passed": not found, "problems": found, "runs": runs, "at": at,
            "earlier_passes": kept[:KEPT_PASSES]}
