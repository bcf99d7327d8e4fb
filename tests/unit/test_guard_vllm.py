"""The guard with the vLLM engine: a worker's vLLM found by its unit's
control group in real captures of a lab worker's /proc (vLLM renames its
processes: "VLLM::Worker_PP1"; tests/fixtures/vllm/proc/SOURCE.md), one of
them stopped or all gone; the probe rank 0 is asked (an OpenAI completion);
a group that stays unavailable is restarted whole, rank 0 and every worker
through its agent."""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import threading
import time

import pytest
from conftest import FIXTURES, loopback_server

from twinrail.guard import agent as guard_agent
from twinrail.guard import procs
from twinrail.guard import proxy as guard_proxy

PROC = FIXTURES / "vllm" / "proc"


def test_a_running_node_is_found_by_its_units_control_group():
    found = procs.unit_processes(procs.VLLM_UNIT, str(PROC / "worker-running"))
    assert [p["pid"] for p in found] == [2534, 2591, 2592]
    assert found[-1]["argv"] == ["VLLM::Worker_PP1"]  # renamed: no program name to look for
    state = procs.vllm_state("198.19.0.2", str(PROC / "worker-running"))
    assert state == {"address": "198.19.0.2", "pid": 2534, "state": "S", "ok": True}


def test_a_stopped_rank_makes_the_node_unavailable():
    state = procs.vllm_state("198.19.0.2", str(PROC / "worker-one-stopped"))
    assert not state["ok"]
    assert state["problem"] == "vLLM (twinrail-vllm.service) has 1 of 3 processes stopped (pid 2592)"


def test_a_node_whose_main_process_is_gone_is_unavailable(tmp_path):
    """SIGKILL of the launcher: systemd stops the rest (up to its stop
    timeout), and they still run meanwhile."""
    for entry in (PROC / "worker-running").iterdir():
        if entry.name != "2534":
            shutil.copytree(entry, tmp_path / entry.name)
    state = procs.vllm_state("198.19.0.2", str(tmp_path))
    assert state == {"address": "198.19.0.2", "ok": False,
                     "problem": "vLLM (twinrail-vllm.service): its main process is gone, 2 left stopping "
                                "(pid 2591, 2592)"}


def test_a_node_without_vllm(tmp_path):
    for entry in (PROC / "worker-running").iterdir():
        if procs.VLLM_UNIT not in (entry / "cgroup").read_text():
            shutil.copytree(entry, tmp_path / entry.name)
    assert procs.unit_processes(procs.VLLM_UNIT, str(tmp_path)) == []
    assert procs.vllm_state("198.19.0.2", str(tmp_path)) == {
        "address": "198.19.0.2", "ok": False, "problem": "vLLM (twinrail-vllm.service) not running"}
    # the llama.cpp agent's view of the same node: no RPC server either
    assert not procs.rpc_server_state("198.19.0.2", 50052, str(tmp_path))["ok"]


class Upstream(http.server.BaseHTTPRequestHandler):
    asked: list = []
    status = 200

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Upstream.asked.append((self.path, body))
        data = json.dumps({"choices": [{"text": "ok"}]}).encode()
        self.send_response(Upstream.status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_):
        pass


@pytest.fixture
def upstream():
    Upstream.asked, Upstream.status = [], 200
    with loopback_server(Upstream) as port:
        yield port


def guard(port: int, engine: str, **options) -> guard_proxy.Guard:
    return guard_proxy.Guard([("lab-worker1", "198.19.0.2")], 50053, ("127.0.0.1", port), soft=85, hard=92, slots=4,
                             interval=0.1, grace=1.0, probe_timeout=2, restart_grace=options.pop("restart_grace", 60),
                             model="smollm2-135m-instruct-bf16", engine=engine, **options)


def test_the_probe_asks_rank_0_an_openai_completion(upstream):
    assert guard(upstream, "vllm").probe() is None
    assert Upstream.asked == [("/v1/completions", {"model": "smollm2-135m-instruct-bf16", "prompt": "ok",
                                                   "max_tokens": 1})]
    Upstream.status = 500
    assert guard(upstream, "vllm").probe() == "vLLM answered 500"
    assert guard(upstream, "llamacpp").probe() == "llama-server answered 500"
    assert Upstream.asked[-1] == ("/completion", {"prompt": "ok", "n_predict": 1})


def test_the_whole_group_is_restarted(upstream, monkeypatch):
    """restart_engine with vLLM: rank 0's main process gets SIGKILL, every
    worker's agent is asked to restart its own."""
    child = subprocess.Popen(["sleep", "60"])
    asked = []
    g = guard(upstream, "vllm")
    try:
        monkeypatch.setattr(guard_proxy, "unit_processes",
                            lambda unit: [{"pid": child.pid, "argv": ["VLLM::APIServer"], "state": "S"}])
        monkeypatch.setattr(g, "restart_worker", lambda address: asked.append(address))
        g.restart_engine("hung")
        assert child.wait(timeout=5) == -9
        assert asked == ["198.19.0.2"]
        assert [e["event"] for e in g.events[-2:]] == ["restart", "restart"]
        assert "vLLM on lab-worker1: killed" in g.events[-1]["detail"]
    finally:
        if child.poll() is None:
            child.kill()


def test_an_unavailable_group_is_restarted_after_the_grace_only(upstream, monkeypatch):
    Upstream.status = 503
    g = guard(upstream, "vllm", restart_grace=0.5)
    kills = []
    monkeypatch.setattr(g, "restart_engine", lambda why="": kills.append(why))
    monkeypatch.setattr(g, "check_workers", lambda: None)
    monkeypatch.setattr(guard_proxy, "node_memory", lambda: {"total": 2**30, "used": 1, "percent": 1.0})
    stop = threading.Event()
    threading.Thread(target=g.monitor, args=(stop,), daemon=True).start()
    time.sleep(0.3)
    assert kills == []  # inside the grace: a group loading is left alone
    deadline = time.monotonic() + 5
    while not kills and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    assert kills and "not available for 0.5 s with every worker up" in kills[0]


def test_the_agent_restarts_the_nodes_vllm(monkeypatch):
    child = subprocess.Popen(["sleep", "60"])
    try:
        monkeypatch.setattr(guard_agent, "unit_processes",
                            lambda unit, proc="/proc": [{"pid": child.pid, "argv": ["VLLM::Worker_PP1"], "state": "S"}])
        assert guard_agent.restart_vllm("198.19.0.2") == {"address": "198.19.0.2", "ok": True, "old_pid": child.pid}
        assert child.wait(timeout=5) == -9
    finally:
        if child.poll() is None:
            child.kill()


def test_the_guards_words_name_the_engine(upstream, monkeypatch):
    """What a 503 says while the engine is not yet seen answering, or once a
    worker came back, names the engine the guard fronts (vLLM's group said
    "llama-server" before)."""
    for engine, name in (("vllm", "vLLM"), ("llamacpp", "llama-server")):
        g = guard(upstream, engine)
        assert g.engine_problem == f"{name} not yet answering"
        monkeypatch.setattr(g, "serving", {"198.19.0.2"})
        g.worker_problems = {}
        monkeypatch.setattr(guard_proxy.urllib.request, "urlopen", lambda *a, **k: (_ for _ in ()).throw(OSError("down")))
        g.last_ok["198.19.0.2"] = time.monotonic() - 60  # its agent silent past the grace
        g.check_workers()
        assert g.engine_problem == f"waiting for {name} after the worker came back", g.engine_problem
