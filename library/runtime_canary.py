#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The runtime stage's canary: a small GGUF loaded on each GPU, one completion."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: runtime_canary
short_description: Load a small model on each GPU with the installed runtime and answer one completion
description:
  - Starts the installed llama-server on loopback with O(model), every layer on one GPU (C(--device CUDAi),
    C(-ngl 999)), once per GPU in turn, or once on the CPU for a CPU build (O(gpus) 0). Reads its log at
    verbosity 4 and asks one completion.
  - A run passes when every layer was offloaded, the model's and KV cache's buffers are on that GPU and on
    no other (the token embeddings stay on the CPU by llama.cpp's design), and a token came back. A CPU
    build's run passes on the load and the answer with every buffer on the CPU.
  - Fails naming the node, the GPU and the cause (a missing arch, a driver older than the toolkit, no
    usable GPU, a death with its CUDA error, a failed load, layers or buffers elsewhere).
  - Runs only when due (module_utils/runtime/canary.py, due) - no passed record at O(record), or the
    runtime binary, the model, the GPUs or the driver changed since, or O(measure) always - and keeps its
    verdict there, with the earlier passes of other runtimes (a rollback to a build that passed loads
    nothing again). In check mode it says whether it would run and starts nothing.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  binary:
    description: The installed llama-server.
    type: path
    required: true
  model:
    description: The canary GGUF on the node.
    type: path
    required: true
  model_sha256:
    description: The model's pinned sha256 (part of what a verdict is valid for).
    type: str
    required: true
  gpus:
    description: How many GPUs the node serves on (CUDA0..n-1); 0 runs the CPU path.
    type: int
    default: 0
  archs:
    description: The build's CUDA archs, named in a missing-kernel failure.
    type: str
    default: ""
  record:
    description: Where the node keeps the last verdict and the earlier passes (JSON).
    type: path
    required: true
  measure:
    description: auto runs when due; always runs.
    type: str
    choices: [auto, always]
    default: auto
  timeout:
    description: Seconds one load and answer may take.
    type: int
    default: 180
  nvidia_smi:
    description: The nvidia-smi that names the GPUs and the driver (read only when O(gpus) > 0).
    type: str
    default: nvidia-smi
"""

EXAMPLES = r"""
- name: Canary
  runtime_canary:
    binary: /opt/twinrail/runtime/current/bin/llama-server
    model: /opt/twinrail/canary/SmolLM2-135M-Instruct.Q4_1.gguf
    model_sha256: "{{ sha }}"
    gpus: 1
    archs: "121"
    record: /var/lib/twinrail/runtime-canary.json
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
ran:
  description: Whether the canary ran this time.
  returned: always
  type: bool
reasons:
  description: Why it ran (empty when the kept verdict held).
  returned: always
  type: list
  elements: str
runs:
  description: Per GPU (or the CPU), offloaded layers, buffers in MiB per device and kind, the answer, seconds.
  returned: when it ran
  type: list
  elements: dict
msg:
  description: The verdict in one sentence.
  returned: always
  type: str
"""

import json
import os
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.runtime.canary import (PREDICT, PROMPT, due, passed_at, problems, read_load, server_args,
                                                 summary, verdict)
from ansible.module_utils.weights.sums import sha256_file


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, body: dict | None = None, timeout: float = 5.0):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # nosec: loopback only
        return response.status, json.loads(response.read() or b"null")


def _gpu_identity(module, nvidia_smi: str) -> tuple[list[str], str | None]:
    """The GPUs as nvidia-smi names them (index, uuid, name, driver), and the driver version."""
    rc, out, err = module.run_command([nvidia_smi, "--query-gpu=index,uuid,name,driver_version",
                                       "--format=csv,noheader"])
    if rc != 0:
        module.fail_json(msg=f"runtime canary: {module.params['host']}: nvidia-smi failed (rc {rc}): "
                             f"{(out + err).strip()[:300]}")
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    driver = lines[0].rsplit(",", 1)[-1].strip() if lines else None
    return lines, driver


def run_one(binary: str, model: str, gpu: int | None, timeout: float) -> tuple[dict, object, int | None, str, float]:
    """One load and one completion; returns the log read, the reply (None
    when none came), the exit code when the server died, its last lines
    and the seconds it took."""
    started = time.monotonic()
    port = _free_port()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(server_args(binary, model, port, f"CUDA{gpu}" if gpu is not None else None),
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        reply, code = None, None
        try:
            base = f"http://127.0.0.1:{port}"
            while time.monotonic() - started < timeout:
                code = proc.poll()
                if code is not None:
                    break
                try:
                    status, _ = _get(base + "/health", timeout=2)
                    if status == 200:
                        break
                except (urllib.error.URLError, OSError, ValueError):
                    pass
                time.sleep(0.3)
            if code is None and proc.poll() is None:
                try:
                    left = max(5.0, timeout - (time.monotonic() - started))
                    _, reply = _get(base + "/completion", {"prompt": PROMPT, "n_predict": PREDICT,
                                                          "temperature": 0, "cache_prompt": False}, timeout=left)
                except (urllib.error.URLError, OSError, ValueError):
                    reply = None
                code = proc.poll()
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        log.seek(0)
        text = log.read().decode(errors="replace")
    tail = " | ".join(line.strip() for line in text.splitlines()[-3:])
    return read_load(text), reply, code, tail, time.monotonic() - started


def main() -> None:
    module = AnsibleModule(argument_spec={
        "binary": {"type": "path", "required": True},
        "model": {"type": "path", "required": True},
        "model_sha256": {"type": "str", "required": True},
        "gpus": {"type": "int", "default": 0},
        "archs": {"type": "str", "default": ""},
        "record": {"type": "path", "required": True},
        "measure": {"type": "str", "choices": ["auto", "always"], "default": "auto"},
        "timeout": {"type": "int", "default": 180},
        "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
        "host": {"type": "str", "required": True},
    }, supports_check_mode=True)
    p = module.params
    host = p["host"]
    for name in ("binary", "model"):
        if not os.path.isfile(p[name]):
            module.fail_json(msg=f"runtime canary: {host}: {name} {p[name]} does not exist")
    gpus, driver = [], None
    if p["gpus"] > 0:
        gpus, driver = _gpu_identity(module, p["nvidia_smi"])
    key = {"runtime": sha256_file(p["binary"]), "model": p["model_sha256"], "gpus": gpus or "none (CPU build)"}
    try:
        with open(p["record"]) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        record = None
    reasons = due(record, key, p["measure"])
    if not reasons:
        module.exit_json(changed=False, ran=False, reasons=[],
                         msg=f"runtime canary: {host}: passed at {passed_at(record, key)} with this runtime, model and "
                             "GPUs: nothing loaded")
    if module.check_mode:
        module.exit_json(changed=False, ran=False, reasons=reasons,
                         msg=f"runtime canary: {host}: would run ({'; '.join(reasons)}); nothing loaded in check mode")
    targets = list(range(p["gpus"])) if p["gpus"] > 0 else [None]
    runs, found = [], []
    for gpu in targets:
        load, reply, code, tail, seconds = run_one(p["binary"], p["model"], gpu, p["timeout"])
        runs.append(summary(gpu, load, reply, seconds))
        found += problems(host, gpu, load, reply, code, p["archs"], driver, tail)
    kept = verdict(record, key, found, runs, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    os.makedirs(os.path.dirname(p["record"]) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(p["record"]) or ".", prefix=".canary-")
    with os.fdopen(fd, "w") as handle:
        json.dump(kept, handle, indent=2)
    os.chmod(tmp, 0o644)
    os.replace(tmp, p["record"])
    where = f"{len(targets)} GPU(s)" if p["gpus"] > 0 else "the CPU"
    if found:
        module.fail_json(changed=True, ran=True, reasons=reasons, runs=runs,
                         msg="runtime canary failed: " + "; ".join(found))
    module.exit_json(changed=True, ran=True, reasons=reasons, runs=runs,
                     msg=f"runtime canary: {host}: loaded on {where}, every layer and buffer where expected, "
                         f"answered ({'; '.join(reasons)})")


if __name__ == "__main__":
    main()
