"""The service seen from the controller: a chat answer across both nodes,
every worker holding its share (the memory plan's split, read back from
llama-server's own log), a wrong split caught by the gate, a killed worker
process and the cluster coming back by itself (timed), and a bad input
refused with nothing changed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

from lab_client import LLAMA_PORT, RPC_PORT
import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.engines.llamacpp import tensor_split

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
MASTER, WORKER = "twinrail-lab-master", "twinrail-lab-worker1"
API = f"http://127.0.0.1:{LLAMA_PORT}"


def node(container: str, *argv: str, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True,
                          check=check)


# the nodes have no curl: Python's urllib, on the master's loopback
CLIENT = """
import json, sys, urllib.request, urllib.error
request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(),
                                 headers={"content-type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=60) as response:
        print(response.read().decode()); print(response.status)
except urllib.error.HTTPError as exc:
    print(exc.read().decode()); print(exc.code)
except OSError as exc:
    print(json.dumps({"error": str(exc)})); print(0)
"""


def chat(messages: list[dict], tokens: int = 24) -> subprocess.CompletedProcess:
    body = json.dumps({"messages": messages, "max_tokens": tokens, "temperature": 0})
    return node(MASTER, "python3", "-c", CLIENT, f"{API}/v1/chat/completions", body, check=False)


def answer(proc: subprocess.CompletedProcess) -> tuple[int, dict]:
    body, _, code = proc.stdout.strip().rpartition("\n")
    return int(code or 0), (json.loads(body) if body.startswith("{") else {})


def test_the_cluster_answers_a_chat(host):
    code, data = answer(chat([{"role": "user", "content": "What is the capital of Italy?"}]))
    assert code == 200, data
    text = data["choices"][0]["message"]["content"]
    assert text.strip() and data["usage"]["completion_tokens"] > 0
    assert data["timings"]["predicted_per_second"] > 1  # loose: 2 shared cores
    print(f"answer: {text!r}, {data['timings']['predicted_per_second']:.1f} tokens/s decode")


def test_the_worker_holds_its_share_of_the_model(host):
    rss = node(WORKER, "ps", "-C", "ggml-rpc-server", "-o", "rss=").stdout.split()
    model = int(node(MASTER, "stat", "-Lc", "%s", "/srv/twinrail/models/smollm2-135m-instruct/"
                     "current/SmolLM2-135M-Instruct.Q4_1.gguf").stdout)
    assert len(rss) == 2 and sum(int(r) * 1024 for r in rss) > model * 0.05


def _split() -> tuple[list[str], dict]:
    """llama-server's command line and its loader's buffers per node, from
    the journal of the unit's current start (module_utils/engines/llamacpp/tensor_split.py)."""
    measured_shares, parse_buffers = tensor_split.measured_shares, tensor_split.parse_buffers
    argv = node(MASTER, "ps", "-C", "llama-server", "-o", "args=").stdout.split()
    invocation = node(MASTER, "systemctl", "show", "-p", "InvocationID", "--value",
                      "twinrail-llama.service").stdout.strip()
    journal = node(MASTER, "journalctl", "-o", "cat", "--no-pager", f"_SYSTEMD_INVOCATION_ID={invocation}").stdout
    devices = {f"198.19.0.2:{RPC_PORT}": "lab-worker1", f"198.19.1.2:{RPC_PORT}": "lab-worker1"}
    return argv, measured_shares(parse_buffers(journal)["buffers"], devices, "lab-master")


def test_llama_server_runs_the_memory_plans_split(host):
    """Each node half (two nodes): the master's CPU its first 15 of 30
    layers (-ngl 16), the worker's two RPC servers the rest, half each."""
    argv, measured = _split()
    assert argv[argv.index("-ngl") + 1] == "16"
    assert argv[argv.index("--tensor-split") + 1] == "0.5,0.5"
    shares = {host: round(node["share"], 3) for host, node in measured["nodes"].items()}
    print(f"measured shares of llama-server's buffers: {shares}")
    # the gate's bound: 10 % of the share plus one of 31 layers
    assert set(shares) == {"lab-master", "lab-worker1"}
    assert all(abs(share - 0.5) <= 0.05 + 1 / 31 for share in shares.values()), shares


def test_a_split_the_runtime_cannot_place_fails_the_gate_naming_the_node(host):
    """A GPU named for a master that has none (a profile the runtime does not
    match): the plan keeps half for a device llama.cpp never gets, every
    layer lands on the worker, and the split gate says so; the stage run
    right after mends it."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    base = ["ansible-playbook", "-i", host.backend.ansible_inventory, str(PROJECT / "site.yml"), "--tags", "service"]
    try:
        proc = subprocess.run(base + ["-e", "inference_service_master_gpu=true"], capture_output=True, text=True,
                              env=env, timeout=600, check=False)
        text = " ".join(re.sub(r"\\\n\s*(\\ )?", "", proc.stdout + proc.stderr).split())
        assert proc.returncode != 0, text[-2000:]
        assert ("service: lab-master: step 3 (master, cluster mode): the split of the layers is not the memory "
                "plan's: lab-master: planned 50.0% of the model and KV cache, measured") in text, text[-2000:]
        argv, measured = _split()
        assert argv[argv.index("--tensor-split") + 1] == "0.25,0.25,0.5"
        assert measured["nodes"]["lab-worker1"]["share"] > 0.8
    finally:
        mend = subprocess.run(base, capture_output=True, text=True, env=env, timeout=600, check=False)
    assert mend.returncode == 0, mend.stdout[-3000:]
    argv, _ = _split()
    assert argv[argv.index("--tensor-split") + 1] == "0.5,0.5"


def test_a_killed_worker_process_and_the_way_back(host):
    """kill -9 of one RPC server: llama-server aborts, systemd restarts the RPC
    server, llama-server comes back once every worker answers (wait-workers)."""
    before = node(MASTER, "systemctl", "show", "-p", "NRestarts", "--value",
                  "twinrail-llama.service").stdout.strip()
    started = time.monotonic()
    node(WORKER, "pkill", "-9", "-f", "ggml-rpc-server -H 198.19.0.2")
    back = None
    while time.monotonic() - started < 120:
        code, data = answer(chat([{"role": "user", "content": "Say yes."}], tokens=4))
        if code == 200 and data.get("choices"):
            # the first answers may come from the old process before it notices
            after = node(MASTER, "systemctl", "show", "-p", "NRestarts", "--value",
                         "twinrail-llama.service").stdout.strip()
            if after != before:
                back = time.monotonic() - started
                break
        time.sleep(1)
    assert back is not None, "the cluster did not come back within 120 s"
    print(f"recovery after a killed worker process: {back:.1f} s (llama-server restarts "
          f"{before} -> {after})")
    assert node(WORKER, "systemctl", "is-active", "twinrail-rpc@198.19.0.2.service").stdout.strip() \
        == "active"


def test_a_bad_model_file_is_refused_before_anything_changes(host):
    link = node(MASTER, "readlink", "/etc/twinrail/service/current").stdout
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(
        ["ansible-playbook", "-i", host.backend.ansible_inventory, str(PROJECT / "site.yml"),
         "--tags", "service", "-e", "inference_service_model_file=../other/model.gguf"],
        capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode != 0
    # however the callback wraps it (YAML folds long strings with a backslash)
    text = " ".join(re.sub(r"\\\n\s*(\\ )?", "", proc.stdout + proc.stderr).split())
    assert ("service: lab-master: inference_service_model_file: expected the GGUF's file name "
            "inside /srv/twinrail/models/smollm2-135m-instruct/current/") in text, text[-2000:]
    assert node(MASTER, "readlink", "/etc/twinrail/service/current").stdout == link
    assert "changed=0" in proc.stdout.split("PLAY RECAP")[1].splitlines()[1]
