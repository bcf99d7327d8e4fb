"""twinrail-guard, the service's watchdog and memory guard, on loopback:
real sockets, a stand-in llama-server that streams (or hangs) and stand-in
worker agents that answer, report a dead RPC server or fall silent."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from twinrail.guard import access, memory, procs
from twinrail.guard import proxy as guard_proxy


# ---------------------------------------------------------------- memory


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_proc(tmp_path: Path, cgroup: str, total_kb=8 * 2**20, available_kb=6 * 2**20) -> Path:
    proc = tmp_path / "proc"
    write(proc / "meminfo", f"MemTotal: {total_kb} kB\nMemFree: 1 kB\nMemAvailable: {available_kb} kB\n")
    write(proc / "self" / "cgroup", cgroup)
    return proc


def test_memory_of_a_machine_without_a_cgroup_limit(tmp_path):
    proc = fake_proc(tmp_path, "0::/system.slice/twinrail-guard.service\n")
    root = tmp_path / "cg"
    write(root / "cgroup.controllers", "memory")
    write(root / "system.slice" / "memory.max", "max")
    mem = memory.node_memory(str(root), str(proc))
    assert mem["source"] == "meminfo" and mem["total"] == 8 * 2**30 and mem["used"] == 2 * 2**30
    assert mem["percent"] == 25.0


def test_memory_of_a_container_cgroup_v1_leaves_out_the_page_cache(tmp_path):
    node = "docker/abc"
    proc = fake_proc(tmp_path, f"12:memory:/{node}/system.slice/twinrail-guard.service\n"
                               f"1:name=systemd:/{node}/system.slice/twinrail-guard.service\n")
    mem_root = tmp_path / "cg" / "memory"
    write(mem_root / "memory.limit_in_bytes", str(2**63 - 4096))
    write(mem_root / node / "memory.limit_in_bytes", str(4 * 2**30))
    write(mem_root / node / "memory.usage_in_bytes", str(3 * 2**30))
    write(mem_root / node / "memory.stat", f"cache 5\ninactive_file 7\ntotal_inactive_file {2**30}\n")
    # the unit's own limit is the unit's, not the node's
    write(mem_root / node / "system.slice" / "twinrail-guard.service" / "memory.limit_in_bytes", str(2**20))
    mem = memory.node_memory(str(tmp_path / "cg"), str(proc))
    assert mem["total"] == 4 * 2**30 and mem["used"] == 2 * 2**30 and mem["percent"] == 50.0
    assert mem["source"].endswith(node)


def test_memory_of_a_container_cgroup_v2_namespace(tmp_path):
    proc = fake_proc(tmp_path, "0::/system.slice/twinrail-guard.service\n")
    root = tmp_path / "cg"
    write(root / "cgroup.controllers", "memory")
    write(root / "memory.max", str(2 * 2**30))
    write(root / "memory.current", str(2**30 + 100))
    write(root / "memory.stat", "anon 5\ninactive_file 100\n")
    mem = memory.node_memory(str(root), str(proc))
    assert mem["total"] == 2 * 2**30 and mem["used"] == 2**30 and mem["percent"] == 50.0


# ---------------------------------------------------------------- processes


def test_rpc_server_state_reads_the_process_table(tmp_path):
    proc = tmp_path / "proc"
    port = free_port()  # nothing listens there
    for pid, argv, state in ((10, ["/opt/bin/ggml-rpc-server", "-H", "127.0.0.2", "-p", "1"], "S"),
                             (11, ["/opt/bin/ggml-rpc-server", "-H", "127.0.0.3", "-p", "1"], "T"),
                             (12, ["/usr/bin/python3", "ggml-rpc-server"], "R")):
        write(proc / str(pid) / "cmdline", "\0".join(argv) + "\0")
        write(proc / str(pid) / "stat", f"{pid} (ggml-rpc-server) {state} 1 1 1 0")
    stopped = procs.rpc_server_state("127.0.0.3", port, str(proc))
    assert not stopped["ok"] and "pid 11" in stopped["problem"] and "stopped" in stopped["problem"]
    gone = procs.rpc_server_state("127.0.0.9", port, str(proc))
    assert gone == {"address": "127.0.0.9", "ok": False, "problem": "ggml-rpc-server not running"}
    # running, but not listening (the kernel's socket table, this machine's own)
    closed = procs.rpc_server_state("127.0.0.2", port, str(proc))
    assert closed["state"] == "S" and not closed["ok"] and "does not listen on 127.0.0.2" in closed["problem"]


def test_listening_reads_the_kernels_socket_table():
    with socket.socket() as sock:
        sock.bind(("127.0.0.2", 0))
        port = sock.getsockname()[1]
        assert not procs.listening("127.0.0.2", port)  # bound, not listening
        sock.listen()
        assert procs.listening("127.0.0.2", port)
        assert not procs.listening("127.0.0.3", port)
    assert not procs.listening("127.0.0.2", port)


# ---------------------------------------------------------------- proxy


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FakeLlama(http.server.BaseHTTPRequestHandler):
    """Streams ``tokens`` SSE events ``delay`` s apart; hangs when hang is
    set; when wedged is set its GETs (/slots: the main loop's) hang too, as
    a llama-server whose loop is stuck does."""
    protocol_version = "HTTP/1.1"
    hang = threading.Event()
    wedged = threading.Event()
    loading = threading.Event()  # answers 503 as llama-server does while it loads its model
    tokens, delay = 20, 0.1

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        while self.hang.is_set() or self.wedged.is_set():
            time.sleep(0.05)
        if self.loading.is_set():
            data = b'{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}'
            self.send_response(503)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if not body.get("stream"):
            data = json.dumps({"content": "ok"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(self.tokens):
            while self.hang.is_set() or self.wedged.is_set():
                time.sleep(0.05)
            event = f"data: {json.dumps({'n': i})}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            time.sleep(self.delay)
        self.wfile.write(b"0\r\n\r\n")


    def do_GET(self):  # /v1/models, /slots, /metrics: what it was asked, and with which headers
        while self.wedged.is_set():
            time.sleep(0.05)
        data = json.dumps({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class FakeAgent(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    silent = threading.Event()
    problem: str | None = None
    percent = 10.0

    def log_message(self, *args):
        pass

    def do_GET(self):
        while self.silent.is_set():
            time.sleep(0.05)
        rpc = [{"address": "127.0.0.1", "ok": self.problem is None, "problem": self.problem}]
        data = json.dumps({"rpc": rpc, "memory": {"total": 2**30, "used": 1, "percent": FakeAgent.percent}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve(handler) -> tuple[http.server.ThreadingHTTPServer, int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


@contextlib.contextmanager
def guard_on(monkeypatch, upstream, probe_timeout: float = 1.0, **options):
    """A guard in front of `upstream` (a handler class standing in for
    llama-server), one worker whose agent is FakeAgent, polling every 0.2 s:
    (guard, its port, its monitor's stop), once it is available."""
    FakeAgent.silent.clear()
    FakeAgent.problem = None
    FakeAgent.percent = 10.0
    llama, llama_port = serve(upstream)
    agent, agent_port = serve(FakeAgent)
    # the proxy's own node: memory from the stand-in agent's figure too
    monkeypatch.setattr(guard_proxy, "node_memory", lambda: {"total": 2**30, "used": 1, "percent": 1.0})
    guard = guard_proxy.Guard([("worker1", "127.0.0.1")], agent_port, ("127.0.0.1", llama_port),
                              soft=85, hard=92, slots=2, interval=0.2, grace=1.0, probe_timeout=probe_timeout,
                              restart_grace=60, **options)
    stop = threading.Event()
    threading.Thread(target=guard.monitor, args=(stop,), daemon=True).start()
    proxy, proxy_port = serve(guard_proxy.make_proxy_handler(guard))
    deadline = time.monotonic() + 5
    while guard.refusal() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield guard, proxy_port
    finally:
        FakeAgent.silent.clear()
        FakeAgent.problem = None
        stop.set()
        for server in (proxy, agent, llama):
            server.shutdown()


@pytest.fixture
def cluster(monkeypatch):
    FakeLlama.hang.clear()
    killed = []
    with guard_on(monkeypatch, FakeLlama) as (guard, proxy_port):
        monkeypatch.setattr(guard, "restart_engine",
                            lambda *_: (killed.append(time.monotonic()), FakeLlama.hang.clear()))
        yield guard, proxy_port, killed
        FakeLlama.hang.clear()


def post(port: int, body: dict, timeout: float = 20):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/completion", body=json.dumps(body), headers={"Content-Type": "application/json"})
    return conn, conn.getresponse()


def test_a_stream_passes_through_as_it_comes(cluster):
    _, port, _ = cluster
    started = time.monotonic()
    conn, response = post(port, {"stream": True})
    arrivals = []
    while line := response.readline():
        if line.startswith(b"data: "):
            arrivals.append(time.monotonic() - started)
    conn.close()
    assert response.status == 200 and len(arrivals) == FakeLlama.tokens
    assert arrivals[0] < arrivals[-1] / 4


def test_an_agent_that_falls_silent_ends_new_and_in_flight_requests_with_503(cluster):
    guard, port, killed = cluster
    conn, response = post(port, {"stream": True})
    assert response.status == 200 and response.readline().startswith(b"data: ")
    FakeLlama.hang.set()  # the master waits for the paused worker
    FakeAgent.silent.set()  # the worker's node is paused
    paused = time.monotonic()
    last = b""
    while line := response.readline():
        last = line if line.strip() else last
    in_flight = time.monotonic() - paused
    conn.close()
    event = json.loads(last[len(b"data: "):])
    assert event["error"]["code"] == 503 and "has not answered" in event["error"]["message"]
    assert in_flight < 10
    conn, response = post(port, {"stream": False})
    body = json.loads(response.read())
    conn.close()
    assert response.status == 503 and "worker1 rail 127.0.0.1" in body["error"]["message"]
    # the worker comes back; llama-server stays hung: killed once, then available
    FakeAgent.silent.clear()
    deadline = time.monotonic() + 10
    while guard.refusal() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert guard.refusal() is None and len(killed) == 1
    conn, response = post(port, {"stream": False})
    assert response.status == 200 and json.loads(response.read()) == {"content": "ok"}
    conn.close()


def test_a_non_streamed_request_in_flight_gets_a_503(cluster):
    _, port, killed = cluster
    FakeLlama.hang.set()
    result = {}

    def client():
        started = time.monotonic()
        conn, response = post(port, {"stream": False})
        result.update(status=response.status, body=json.loads(response.read()), took=time.monotonic() - started)
        conn.close()

    thread = threading.Thread(target=client)
    thread.start()
    time.sleep(0.5)
    FakeAgent.problem = "ggml-rpc-server (pid 42) is stopped"
    thread.join(15)
    assert result["status"] == 503 and "pid 42" in result["body"]["error"]["message"]
    assert result["took"] < 10


def test_memory_watermarks_refuse_new_then_fail_queued_requests(cluster):
    guard, port, _ = cluster
    FakeLlama.delay = 0.3  # two long streams hold both slots
    try:
        holders = [post(port, {"stream": True}) for _ in range(2)]
        assert all(r.status == 200 for _, r in holders)
        queued = {}

        def client():
            conn, response = post(port, {"stream": False})
            queued.update(status=response.status, body=json.loads(response.read()), at=time.monotonic())
            conn.close()

        thread = threading.Thread(target=client)
        thread.start()
        time.sleep(0.5)
        assert not queued and guard.status()["active"] == 2
        FakeAgent.percent = 87.0
        time.sleep(0.6)
        conn, response = post(port, {"stream": False})
        body = json.loads(response.read())
        conn.close()
        assert response.status == 503 and "soft watermark" in body["error"]["message"]
        assert "worker1 uses 87.0%" in body["error"]["message"]
        assert not queued  # past the soft watermark, a queued request still waits
        FakeAgent.percent = 93.0
        crossed = time.monotonic()
        thread.join(5)
        assert queued["status"] == 503 and "hard watermark, queued request failed" in queued["body"]["error"]["message"]
        assert queued["at"] - crossed < 2
        FakeAgent.percent = 10.0
        for conn, _ in holders:
            conn.close()
    finally:
        FakeLlama.delay = 0.1


# ---------------------------------------------------------------- who may ask what

KEYS = {"team-a": "tr-" + "a" * 40, "team-b": "tr-" + "b" * 40}
# what nginx sets on every request it passes: the account it checked (none here)
VIA_NGINX = {"X-Twinrail-Proxy": "nginx", "X-Twinrail-User": ""}


def keys_file(path: Path, names: list[str]) -> str:
    tmp = path.with_suffix(".tmp")  # replaced, as the service stage's copy does
    tmp.write_text(json.dumps({"keys": [{"name": n, "sha256": access.digest(KEYS[n])} for n in names]}))
    tmp.replace(path)
    return str(path)


def ask(port: int, method: str, path: str, headers: dict, body: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = json.loads(response.read())
    conn.close()
    return response, data


def bearer(name: str) -> dict:
    return {**VIA_NGINX, "Authorization": f"Bearer {KEYS.get(name, 'tr-not-a-key')}"}


def test_api_keys_reach_the_api_and_only_the_api(cluster, tmp_path):
    guard, port, _ = cluster
    guard.keys = access.Keys(keys_file(tmp_path / "keys.json", ["team-a", "team-b"]))
    response, data = ask(port, "GET", "/v1/models", bearer("team-a"))
    assert response.status == 200 and data["path"] == "/v1/models"
    assert not {"authorization", "x-twinrail-user", "x-twinrail-proxy"} & set(data["headers"])  # not llama-server's
    response, data = ask(port, "POST", "/v1/chat/completions", {**bearer("team-b"), "Content-Type": "application/json"},
                         json.dumps({"stream": False}).encode())
    assert response.status == 200 and data == {"content": "ok"}
    for headers in (bearer("nobody"), VIA_NGINX, {**VIA_NGINX, "Authorization": "Basic b3A6cGFzcw=="}):
        response, data = ask(port, "GET", "/v1/models", headers)
        assert response.status == 401 and data["error"]["type"] == "invalid_api_key", headers
        assert response.getheader("WWW-Authenticate") == 'Bearer realm="twinrail"'
    for internal in ("/slots", "/props", "/metrics", "/twinrail/status"):
        response, data = ask(port, "GET", internal, bearer("team-a"))
        assert response.status == 403 and "operators' accounts" in data["error"]["message"], internal
        response, data = ask(port, "GET", internal, {**VIA_NGINX, "X-Twinrail-User": "operator"})
        assert response.status == 200, internal


def test_a_revoked_key_stops_working_without_a_restart(cluster, tmp_path):
    guard, port, _ = cluster
    path = tmp_path / "keys.json"
    guard.keys = access.Keys(keys_file(path, ["team-a", "team-b"]))
    assert ask(port, "GET", "/v1/models", bearer("team-a"))[0].status == 200
    keys_file(path, ["team-b"])
    assert ask(port, "GET", "/v1/models", bearer("team-a"))[0].status == 401
    assert ask(port, "GET", "/v1/models", bearer("team-b"))[0].status == 200
    assert guard.keys.names() == ["team-b"]


def test_a_body_that_is_not_json_gets_a_json_400(cluster):
    _, port, _ = cluster
    response, data = ask(port, "POST", "/v1/chat/completions", {"Content-Type": "application/json"}, b"{not json")
    assert response.status == 400 and data["error"]["type"] == "invalid_request_error"
    assert "not valid JSON" in data["error"]["message"]


def test_past_the_queue_cap_a_request_gets_429_with_retry_after(cluster):
    guard, port, _ = cluster
    guard.queue_max = 1
    FakeLlama.delay = 0.2  # two streams hold both slots for 4 s
    try:
        holders = [post(port, {"stream": True}) for _ in range(2)]
        assert all(r.status == 200 for _, r in holders)
        queued = {}

        def client():
            conn, response = post(port, {"stream": False})
            queued.update(status=response.status, body=json.loads(response.read()))
            conn.close()

        thread = threading.Thread(target=client)
        thread.start()
        deadline = time.monotonic() + 5
        while guard.status()["waiting"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert guard.status()["waiting"] == 1
        conn, response = post(port, {"stream": False})
        body = json.loads(response.read())
        conn.close()
        assert response.status == 429 and body["error"]["type"] == "rate_limit_exceeded"
        assert response.getheader("Retry-After") and "the queue holds 1" in body["error"]["message"]
        for conn, response in holders:
            response.read()
            conn.close()
        thread.join(10)
        assert queued["status"] == 200 and queued["body"] == {"content": "ok"}
    finally:
        FakeLlama.delay = 0.1


# ---------------------------------------------------------------- metrics


def get_text(port: int, path: str) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read().decode()
    conn.close()
    return response.status, response.getheader("Content-Type"), body


def exposition(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_guards_metrics_follow_a_stopped_worker_and_count_the_refusals(cluster, monkeypatch):
    import shutil
    import subprocess

    from conftest import FIXTURES

    guard, port, _ = cluster
    slots = json.loads((FIXTURES / "monitoring" / "slots_generating.json").read_text())
    monkeypatch.setattr(guard, "slots_now", lambda: slots)  # llama-server's real /slots, mid-generation
    status, kind, text = get_text(port, "/twinrail/metrics")
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")
    check = subprocess.run([shutil.which("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    got = exposition(text)
    rail = (("address", "127.0.0.1"), ("host", "worker1"))
    assert got[("twinrail_guard_worker_up", rail)] == 1
    assert got[("twinrail_guard_worker_state", rail + (("state", "up"),))] == 1
    assert got[("twinrail_kv_cache_tokens", ())] == 190 and got[("twinrail_kv_cache_capacity_tokens", ())] == 32768
    assert got[("twinrail_guard_memory_watermark_ratio", (("level", "soft"),))] == 0.85
    # the worker's RPC server is stopped: a new request is refused, and the metrics say which state and why
    FakeAgent.problem = "ggml-rpc-server (pid 42) is stopped"
    deadline = time.monotonic() + 5
    while guard.refusal() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    conn, response = post(port, {"stream": False})
    assert response.status == 503
    conn.close()
    got = exposition(get_text(port, "/twinrail/metrics")[2])
    assert got[("twinrail_guard_worker_up", rail)] == 0 and got[("twinrail_guard_available", ())] == 0
    assert got[("twinrail_guard_worker_state", rail + (("state", "stopped"),))] == 1
    assert got[("twinrail_guard_worker_state", rail + (("state", "up"),))] == 0
    assert got[("twinrail_guard_refusals_total", (("reason", "worker_lost"),))] == 1
    assert got[("twinrail_guard_refusals_total", (("reason", "memory_soft"),))] == 0


def test_a_hung_llama_server_is_really_killed(cluster, monkeypatch):
    """restart_engine itself (the other tests replace it): the process it finds gets SIGKILL."""
    import subprocess

    guard, _, _ = cluster
    monkeypatch.undo()  # the fixture's stand-in restart_engine and node_memory
    child = subprocess.Popen(["sleep", "60"])
    try:
        monkeypatch.setattr(guard_proxy, "find_processes",
                            lambda name: [{"pid": child.pid, "argv": ["llama-server"], "state": "S"}])
        guard.restart_engine()
        assert child.wait(timeout=5) == -9
        assert guard.events[-1]["event"] == "restart" and f"pid {child.pid}" in guard.events[-1]["detail"]
    finally:
        if child.poll() is None:
            child.kill()


@pytest.fixture
def watched(monkeypatch):
    """A guard with its stall watchdog on (no token for 1.5 s in flight, a
    probe every 0.5 s idle) in front of FakeLlama; its restart_engine notes
    the time (the test un-wedges the stand-in: systemd's restart)."""
    FakeLlama.hang.clear()
    FakeLlama.wedged.clear()
    killed = []
    with guard_on(monkeypatch, FakeLlama, stall_after=1.5, idle_probe=0.5) as (guard, proxy_port):
        monkeypatch.setattr(guard, "restart_engine", lambda *_: killed.append(time.monotonic()))
        yield guard, proxy_port, killed
        FakeLlama.wedged.clear()
        FakeLlama.hang.clear()


def wait_for(predicate, timeout: float) -> float:
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout, "not within the time"
        time.sleep(0.05)
    return time.monotonic() - started


def test_an_engine_wedged_while_idle_is_found_refused_and_restarted(watched):
    guard, port, killed = watched
    FakeLlama.wedged.set()
    found = wait_for(lambda: guard.stall is not None, 5)
    assert found < 0.5 + 1.0 + 1.0  # the idle probe's period, its timeout, a turn of the monitor
    conn, response = post(port, {"prompt": "hi"})
    data = json.loads(response.read())
    conn.close()
    assert response.status == 503
    assert data["error"]["message"] == ("recovering: llama-server stalled: its probe failed while idle (hung)")
    assert len(killed) == 1 and guard.stalls == 1
    FakeLlama.wedged.clear()  # systemd's new llama-server answers
    wait_for(lambda: guard.refusal() is None and guard.stall is None, 5)
    text = guard.metrics_text()
    assert "twinrail_guard_engine_stalls_total 1" in text and "twinrail_guard_engine_stalled 0" in text
    assert [e["event"] for e in guard.events if e["event"] in ("stall", "available")][-2:] == ["stall", "available"]


def test_an_engine_that_wedges_soon_after_a_restart_is_restarted_again(watched):
    """The guard killed the engine a moment ago (it hung after the workers
    came back); systemd's new one answered, then wedged: the stall restarts
    it now, not once restart_grace (the wait for a loading engine) is over."""
    guard, _, killed = watched
    killed.clear()
    guard.restart_grace = 120
    guard.last_kill = time.monotonic()
    FakeLlama.wedged.set()
    wait_for(lambda: guard.stall is not None, 5)
    assert len(killed) == 1 and guard.stalls == 1


def test_a_stream_whose_engine_wedges_ends_with_the_reason(watched):
    guard, port, killed = watched
    killed.clear()
    conn, response = post(port, {"stream": True}, timeout=30)
    assert response.readline().startswith(b"data: ")
    FakeLlama.wedged.set()
    started = time.monotonic()
    last = b""
    while line := response.readline():
        if line.startswith(b"data: "):
            last = line
    conn.close()
    ended = time.monotonic() - started
    FakeLlama.wedged.clear()
    assert b"stalled: no token relayed for" in last and b"its loop does not answer (hung)" in last, last
    assert 1.5 < ended < 1.5 + 1.5 + 1.5 and len(killed) == 1  # quiet for stall_after, the loop asked as long


def test_a_quiet_request_whose_loop_turns_is_no_stall(watched):
    """No token for longer than stall_after (a long prompt's prefill), but
    llama-server's loop answers /slots: no stall, nothing killed."""
    guard, port, killed = watched
    killed.clear()
    FakeLlama.hang.set()  # the answer waits; /slots does not
    result = {}

    def ask():
        conn, response = post(port, {"prompt": "a long prompt"}, timeout=30)
        result["status"] = response.status
        response.read()
        conn.close()

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    time.sleep(4.0)
    assert guard.stall is None and killed == [] and guard.stalls == 0
    FakeLlama.hang.clear()
    thread.join(10)
    assert result["status"] == 200


def test_an_engine_that_answers_an_error_while_idle_is_down_not_stalled(watched):
    """Restarting or loading (llama-server's 503 "Loading model"): 503 with
    that until it answers, nothing killed, no stall counted."""
    guard, _, killed = watched
    killed.clear()
    FakeLlama.loading.set()
    try:
        wait_for(lambda: (guard.refusal() or "").startswith("recovering: llama-server answered 503 (the guard's idle probe)"), 5)
        assert killed == [] and guard.stalls == 0 and guard.stall is None
    finally:
        FakeLlama.loading.clear()
    wait_for(lambda: guard.refusal() is None, 5)
