"""Serving on fewer rails (twinrail.guard.rails and the guard's reroute):
the split without a rail, when a rail is left out and taken back, the file
llama-server's unit reads; then the guard on loopback with a stand-in agent
per rail (127.0.0.2 and 127.0.0.3) and a stand-in llama-server, and the
agent's restart of a real process listening on a rail address."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from twinrail.guard import agent as guard_agent
from twinrail.guard import proxy as guard_proxy
from twinrail.guard import rails
from twinrail.guard.procs import rpc_server_state
from test_guard import FakeLlama  # the stand-in llama-server: a non-streamed answer

WORKERS = [("w1", "198.19.0.2", "rail0"), ("w1", "198.19.1.2", "rail1"),
           ("w2", "198.19.0.3", "rail0"), ("w2", "198.19.1.3", "rail1")]
SERVERS = ["198.19.0.2:50052", "198.19.1.2:50052", "198.19.0.3:50052", "198.19.1.3:50052"]


def test_the_split_of_the_configuration_is_read_back():
    assert rails.parse_split("--tensor-split 0.25,0.25,0.5") == [0.25, 0.25, 0.5]
    assert rails.parse_split("0.5,0.5") == [0.5, 0.5]
    for bad in ("", "--tensor-split", "a,b", "-1,2"):
        with pytest.raises(ValueError, match="expected proportions"):
            rails.parse_split(bad)


def test_rails_are_named_in_rpc_order_with_the_masters_gpu_share_last():
    built, master = rails.build_rails(WORKERS, SERVERS, [0.1667] * 4 + [0.3333])
    assert [(r.host, r.name, r.endpoint) for r in built] == [
        ("w1", "rail0", "198.19.0.2:50052"), ("w1", "rail1", "198.19.1.2:50052"),
        ("w2", "rail0", "198.19.0.3:50052"), ("w2", "rail1", "198.19.1.3:50052")]
    assert master == 0.3333
    assert rails.build_rails(WORKERS, SERVERS, [0.25] * 4)[1] is None  # a CPU master: -ngl, not the split
    with pytest.raises(ValueError, match="5 proportion"):
        rails.build_rails(WORKERS, SERVERS[:3], [0.2] * 5)
    with pytest.raises(ValueError, match="10.0.0.9:50052 is no worker rail"):
        rails.build_rails(WORKERS, SERVERS[:3] + ["10.0.0.9:50052"], [0.25] * 4)


def test_a_rail_left_out_gives_its_share_to_its_workers_other_rail_only():
    built, master = rails.build_rails(WORKERS, SERVERS, [0.1667, 0.1667, 0.1667, 0.1667, 0.3333])
    serving = {"198.19.0.2", "198.19.0.3", "198.19.1.3"}  # w1's rail1 out
    endpoints, split = rails.plan(built, serving, master)
    assert endpoints == ["198.19.0.2:50052", "198.19.0.3:50052", "198.19.1.3:50052"]
    assert split == [0.3334, 0.1667, 0.1667, 0.3333]  # w1's third on rail0 alone; w2 and the GPU unchanged
    text = rails.override_env(built, serving, master)
    assert "TWINRAIL_RPC_SERVERS=198.19.0.2:50052,198.19.0.3:50052,198.19.1.3:50052\n" in text
    assert 'TWINRAIL_SPLIT_ARGS="--tensor-split 0.3334,0.1667,0.1667,0.3333"\n' in text
    assert rails.override_env(built, {r.address for r in built}, master) is None


def test_the_description_names_the_rail_that_serves_and_the_one_left_out():
    built, _ = rails.build_rails(WORKERS[:2], SERVERS[:2], [0.5, 0.5])
    assert rails.describe(built, {"198.19.0.2"}) == "serving on rail0 only (w1 rail1 (198.19.1.2) left out)"
    assert rails.describe(built, {"198.19.0.2", "198.19.1.2"}) is None


def test_a_rail_is_left_out_after_degrade_after_and_only_while_its_worker_keeps_another():
    built, _ = rails.build_rails(WORKERS, SERVERS, [0.25] * 4)
    every = {r.address for r in built}
    healthy = {a: 0.0 for a in every - {"198.19.1.2"}}
    # down for 10 s of 15: still serving (the guard answers 503 meanwhile)
    assert rails.target(built, every, {"198.19.1.2": 100.0}, healthy, 110.0, 15, 30) == every
    assert rails.target(built, every, {"198.19.1.2": 100.0}, healthy, 115.0, 15, 30) == every - {"198.19.1.2"}
    # never, when degrade_after is 0
    assert rails.target(built, every, {"198.19.1.2": 100.0}, healthy, 500.0, 0, 30) == every
    # both of w1's rails down (the node paused): nothing to serve on, nothing left out
    both = {"198.19.0.2": 100.0, "198.19.1.2": 100.0}
    assert rails.target(built, every, both, {a: 0.0 for a in every - set(both)}, 200.0, 15, 30) == every


def test_a_rail_left_out_comes_back_after_restore_after_healthy():
    built, _ = rails.build_rails(WORKERS, SERVERS, [0.25] * 4)
    every = {r.address for r in built}
    serving = every - {"198.19.1.2"}
    healthy = {a: 0.0 for a in every}
    healthy["198.19.1.2"] = 100.0
    assert rails.target(built, serving, {}, healthy, 120.0, 15, 30) == serving
    assert rails.target(built, serving, {}, healthy, 130.0, 15, 30) == every


def test_the_file_a_guard_wrote_is_read_back_by_the_next_one(tmp_path):
    built, master = rails.build_rails(WORKERS[:2], SERVERS[:2], [0.5, 0.5])
    path = str(tmp_path / "rails.env")
    assert rails.read_override(path, built) is None
    rails.write_override(path, rails.override_env(built, {"198.19.0.2"}, master))
    assert rails.read_override(path, built) == {"198.19.0.2"}
    # a configuration that changed since (another port): the file is ignored
    moved, _ = rails.build_rails(WORKERS[:2], ["198.19.0.2:6000", "198.19.1.2:6000"], [0.5, 0.5])
    assert rails.read_override(path, moved) is None
    rails.write_override(path, None)
    assert not os.path.exists(path)


# ---------------------------------------------------------------- the guard, on loopback


class Agent(http.server.BaseHTTPRequestHandler):
    """One worker's agent; silent on the addresses in ``cut``; records restarts."""
    protocol_version = "HTTP/1.1"
    cut: set = set()
    restarts: list = []

    def log_message(self, *args):
        pass

    def answer(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except OSError:
            pass  # the guard gave up waiting (a cut rail)

    def do_GET(self):
        address = self.connection.getsockname()[0]
        while address in self.cut:
            time.sleep(0.05)
        self.answer({"rpc": [{"address": address, "ok": True}],
                     "memory": {"total": 2**30, "used": 1, "percent": 10.0}})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        address = self.connection.getsockname()[0]
        Agent.restarts.append(address)
        self.answer({"address": address, "ok": True, "old_pid": 1, "pid": 2})


def serve(handler, host: str, port: int = 0):
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def request(port: int) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/completion", body=b"{}", headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    body = json.loads(response.read())
    conn.close()
    return response.status, body


def until(predicate, limit: float = 10.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_the_guard_serves_on_the_other_rail_while_one_stays_cut_then_on_both(tmp_path, monkeypatch):
    Agent.cut, Agent.restarts = set(), []
    servers = [serve(Agent, "127.0.0.2")]
    port = servers[0].server_address[1]
    servers.append(serve(Agent, "127.0.0.3", port))
    FakeLlama.hang.clear()
    llama = serve(FakeLlama, "127.0.0.1")
    servers.append(llama)
    workers = [("w1", "127.0.0.2", "rail0"), ("w1", "127.0.0.3", "rail1")]
    built, master = rails.build_rails(workers, ["127.0.0.2:50052", "127.0.0.3:50052"], [0.5, 0.5])
    override = tmp_path / "rails.env"
    monkeypatch.setattr(guard_proxy, "node_memory", lambda: {"total": 2**30, "used": 1, "percent": 1.0})
    guard = guard_proxy.Guard([(h, a) for h, a, _ in workers], port, ("127.0.0.1", llama.server_address[1]),
                              soft=85, hard=92, slots=2, interval=0.1, grace=0.5, probe_timeout=1.0,
                              restart_grace=60, rails=built, master_share=master, degrade_after=1.0,
                              restore_after=1.0, override=str(override))
    kills = []
    monkeypatch.setattr(guard, "restart_engine", lambda why="": kills.append((time.monotonic(), why)))
    stop = threading.Event()
    threading.Thread(target=guard.monitor, args=(stop,), daemon=True).start()
    proxy = serve(guard_proxy.make_proxy_handler(guard), "127.0.0.1")
    servers.append(proxy)
    try:
        assert until(lambda: guard.refusal() is None)
        Agent.cut = {"127.0.0.3"}  # rail1 cut
        cut_at = time.monotonic()
        assert until(lambda: guard.refusal() is not None)
        status, body = request(proxy.server_address[1])
        assert status == 503 and "w1 rail 127.0.0.3" in body["error"]["message"]
        assert "goes on over the worker's other rail(s) if this lasts 1 s" in body["error"]["message"]
        # left out after degrade_after: llama-server restarted with rail0's server and the whole share on it
        assert until(lambda: kills, 10)
        assert kills[0][0] - cut_at >= 1.0 and "rails that serve" in kills[0][1]
        text = override.read_text()
        assert "TWINRAIL_RPC_SERVERS=127.0.0.2:50052\n" in text and '"--tensor-split 1"' in text
        assert until(lambda: guard.refusal() is None)
        status, body = request(proxy.server_address[1])
        assert status == 200 and body == {"content": "ok"}
        seen = guard.status()
        assert seen["degraded"] == "serving on rail0 only (w1 rail1 (127.0.0.3) left out)"
        assert [(w["rail"], w["serving"]) for w in seen["workers"]] == [("rail0", True), ("rail1", False)]
        assert "\ntwinrail_guard_degraded 1\n" in guard_proxy.metrics.render(seen, {}, None)
        # a restarted guard goes on from the file
        again = guard_proxy.Guard([(h, a) for h, a, _ in workers], port, ("127.0.0.1", 1), soft=85, hard=92,
                                  slots=2, interval=0.1, grace=0.5, probe_timeout=1.0, restart_grace=60,
                                  rails=built, master_share=master, degrade_after=1.0, restore_after=1.0,
                                  override=str(override))
        assert again.serving == {"127.0.0.2"}
        # mended: rail1's RPC server restarted over rail1 first, then back to both, the file removed
        Agent.cut = set()
        assert until(lambda: len(kills) == 2, 10)
        assert Agent.restarts == ["127.0.0.3"] and "every rail" in kills[1][1]
        assert not override.exists() and guard.serving == {"127.0.0.2", "127.0.0.3"}
        assert until(lambda: guard.refusal() is None) and guard.status()["degraded"] is None
        assert [e["event"] for e in guard.events].count("restored") == 1
    finally:
        Agent.cut = set()
        stop.set()
        for server in servers:
            server.shutdown()


def test_without_rail_options_a_cut_rail_stays_a_503(monkeypatch):
    """degrade_after 0 (or no rails given): the guard never restarts llama-server on fewer rails."""
    Agent.cut, Agent.restarts = set(), []
    first = serve(Agent, "127.0.0.2")
    port = first.server_address[1]
    second = serve(Agent, "127.0.0.3", port)
    monkeypatch.setattr(guard_proxy, "node_memory", lambda: {"total": 2**30, "used": 1, "percent": 1.0})
    guard = guard_proxy.Guard([("w1", "127.0.0.2"), ("w1", "127.0.0.3")], port, ("127.0.0.1", 1), soft=85,
                              hard=92, slots=2, interval=0.1, grace=0.3, probe_timeout=1.0, restart_grace=60)
    kills = []
    monkeypatch.setattr(guard, "restart_engine", lambda why="": kills.append(why))
    stop = threading.Event()
    threading.Thread(target=guard.monitor, args=(stop,), daemon=True).start()
    try:
        Agent.cut = {"127.0.0.3"}
        time.sleep(2.0)
        assert "worker unavailable" in guard.refusal() and "goes on" not in guard.refusal()
        assert kills == [] and guard.status()["degraded"] is None
    finally:
        Agent.cut = set()
        stop.set()
        first.shutdown()
        second.shutdown()


def test_the_agent_restarts_the_rpc_server_bound_to_the_rail(tmp_path):
    """restart_rpc on real processes: a program named ggml-rpc-server
    listening on 127.0.0.2, kept running by a supervisor like systemd's
    Restart=always; the one on 127.0.0.3 is left alone."""
    program = tmp_path / "ggml-rpc-server"
    program.symlink_to(sys.executable)
    listen = ("import socket, sys, time; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
              "socket.SO_REUSEADDR, 1); s.bind((sys.argv[2], int(sys.argv[4]))); s.listen(); time.sleep(60)")
    with socket_port() as port:
        children: dict[str, list] = {"127.0.0.2": [], "127.0.0.3": []}
        stop = threading.Event()

        def supervise(address):
            while not stop.is_set():
                child = subprocess.Popen([str(program), "-c", listen, "-H", address, "-p", str(port)])
                children[address].append(child)
                while child.poll() is None and not stop.is_set():
                    time.sleep(0.05)
                time.sleep(0.3)  # RestartSec

        threads = [threading.Thread(target=supervise, args=(a,), daemon=True) for a in children]
        for thread in threads:
            thread.start()
        try:
            assert until(lambda: rpc_server_state("127.0.0.2", port)["ok"] and
                         rpc_server_state("127.0.0.3", port)["ok"])
            old, other = children["127.0.0.2"][0].pid, children["127.0.0.3"][0].pid
            result = guard_agent.restart_rpc("127.0.0.2", port, wait=10)
            assert result["ok"] and result["old_pid"] == old and result["pid"] != old, result
            assert children["127.0.0.2"][0].wait(5) == -9
            assert children["127.0.0.3"][0].poll() is None and rpc_server_state("127.0.0.3", port)["pid"] == other
            # nothing comes back: the answer says so, naming the address
            stop.set()
            result = guard_agent.restart_rpc("127.0.0.2", port, wait=1)
            assert not result["ok"] and "127.0.0.2" in result["problem"], result
        finally:
            stop.set()
            for child in children["127.0.0.2"] + children["127.0.0.3"]:
                if child.poll() is None:
                    child.kill()
                    child.wait()


class socket_port:
    """A free TCP port on loopback."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    def __exit__(self, *exc):
        return False


def test_the_agent_restarts_the_engine_on_its_path_and_the_old_one(monkeypatch):
    """The guard asks POST /engine/restart (agent.RESTART_PATH); a guard of
    the release before asks /rpc/restart, which answers the same; any other
    path is a 404 naming the right one. The restart is of the rail it was
    asked over."""
    import argparse  # pylint: disable=import-outside-toplevel
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel

    from test_guard import free_port  # pylint: disable=import-outside-toplevel

    asked = []
    monkeypatch.setattr(guard_agent, "restart_rpc", lambda address, rpc_port: asked.append((address, rpc_port))
                        or {"address": address, "ok": True})
    port = free_port()
    args = argparse.Namespace(address=["127.0.0.3"], port=port, rpc_port=50052, engine="llamacpp")
    threading.Thread(target=guard_agent.run_agent, args=(args,), daemon=True).start()

    def post(path: str) -> tuple[int, dict]:
        request = urllib.request.Request(f"http://127.0.0.3:{port}{path}", data=b"{}", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    deadline = time.monotonic() + 5
    while True:
        try:
            status, answer = post(guard_agent.RESTART_PATH)
            break
        except OSError:
            assert time.monotonic() < deadline, "the agent did not answer"
            time.sleep(0.05)
    assert guard_agent.RESTART_PATH == "/engine/restart" and (status, answer["ok"]) == (200, True)
    assert post("/rpc/restart")[0] == 200
    assert asked == [("127.0.0.3", 50052)] * 2
    assert post("/restart") == (404, {"error": "GET /status, POST /engine/restart"}) and len(asked) == 2
