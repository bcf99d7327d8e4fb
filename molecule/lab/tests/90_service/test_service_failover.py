"""The seed's failover line and the memory watermarks, as drills on the lab,
from the controller through the proxy (nginx -> twinrail-guard ->
llama-server): a worker's RPC server killed, stopped (SIGSTOP), its node
paused, a rail cut. Each time an in-flight stream ends with a 503 error
event and a new request gets a JSON 503 naming the worker, both within
10 s; the cluster comes back by itself (timed). A memory hog on the master
past each watermark: new requests refused, then queued ones failed, with
the reason; nothing else on the node dies."""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
PASSWORD = (Path.home() / ".local" / "state" / "twinrail-lab" / "service-password").read_text().strip()
MASTER, WORKER = "twinrail-lab-master", "twinrail-lab-worker1"
FIGURES = Path(os.environ.get("TWINRAIL_FIGURES", "/tmp/twinrail-failover.json"))
SLA = 10.0


def node(container: str, *argv: str, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True, check=check)


def lab(*argv: str) -> None:
    subprocess.run([sys.executable, str(PROJECT / "tools" / "lab.py"), "-i", str(PROJECT / "inventory" / "lab"),
                    *argv], check=True, capture_output=True)


def connect(timeout: float = 120) -> http.client.HTTPSConnection:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the lab's self-signed certificate
    return http.client.HTTPSConnection("127.0.0.1", 8443, context=context, timeout=timeout)


def post(body: dict, timeout: float = 120):
    conn = connect(timeout)
    token = base64.b64encode(f"operator:{PASSWORD}".encode()).decode()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"content-type": "application/json", "authorization": f"Basic {token}"})
    return conn, conn.getresponse()


def chat(tokens: int = 4, timeout: float = 120) -> tuple[int, dict]:
    conn, response = post({"messages": [{"role": "user", "content": "Say yes."}], "max_tokens": tokens,
                           "temperature": 0}, timeout)
    data = response.read()
    conn.close()
    return response.status, (json.loads(data) if data.startswith(b"{") else {})


def wait_available(limit: float = 180) -> float:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        try:
            status, data = chat(timeout=30)
            if status == 200 and data.get("choices"):
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the service did not come back within {limit} s")


class Stream(threading.Thread):
    """A long streamed generation; notes when it started and how it ended."""

    def __init__(self):
        super().__init__(daemon=True)
        self.first = threading.Event()
        self.ended_at: float | None = None
        self.last: dict = {}
        self.status = None
        self.conn = None

    def stop(self):
        """Hang up: the guard closes its upstream, llama-server frees the slot."""
        try:
            self.conn.sock.shutdown(2)
        except (AttributeError, OSError):
            pass

    def run(self):
        self.conn, response = post({"messages": [{"role": "user", "content": "Tell me a very long story."}],
                               "max_tokens": 4000, "ignore_eos": True, "stream": True, "temperature": 0.7},
                              timeout=300)
        self.status = response.status
        try:
            while line := response.readline():
                if line.startswith(b"data: {"):
                    self.last = json.loads(line[6:])
                    self.first.set()
        except OSError:
            pass
        self.ended_at = time.monotonic()
        self.conn.close()


FAILURES = {
    "worker RPC server killed (kill -9)": (
        lambda: node(WORKER, "pkill", "-9", "-f", "ggml-rpc-server -H 198.19.0.2"),
        lambda: None),
    "worker RPC server stopped (SIGSTOP)": (
        lambda: node(WORKER, "pkill", "-STOP", "-f", "ggml-rpc-server -H 198.19.1.2"),
        lambda: node(WORKER, "pkill", "-CONT", "-f", "ggml-rpc-server -H 198.19.1.2")),
    "worker node paused": (lambda: lab("pause", "lab-worker1"), lambda: lab("resume", "lab-worker1")),
    "rail1 cut at the worker": (lambda: lab("cut", "rail1", "--node", "lab-worker1"),
                                lambda: lab("mend", "rail1", "--node", "lab-worker1")),
}


def record(name: str, figures: dict) -> None:
    data = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    data[name] = figures
    FIGURES.write_text(json.dumps(data, indent=2))


@pytest.mark.parametrize("failure", list(FAILURES))
def test_failover_drill(host, failure):
    wait_available()
    breaks, mends = FAILURES[failure]
    stream = Stream()
    stream.start()
    assert stream.first.wait(60), "the long stream did not start"
    failed_at = time.monotonic()
    breaks()
    try:
        # a new request: JSON 503 naming the worker, within the 10 s of the seed
        status, data = chat(timeout=30)
        new_503 = time.monotonic() - failed_at
        assert status == 503, (status, data)
        assert data["error"]["code"] == 503 and "lab-worker1" in data["error"]["message"], data
        assert new_503 < SLA, new_503
        # the stream in flight: ended with an error event, within 10 s
        stream.join(SLA + 5)
        assert stream.ended_at is not None, "the stream in flight still hangs"
        in_flight = stream.ended_at - failed_at
        assert stream.last.get("error", {}).get("code") == 503, stream.last
        assert in_flight < SLA, in_flight
    finally:
        stream.stop()
        mended_at = time.monotonic()
        mends()
    recovery = wait_available()
    outage = time.monotonic() - failed_at
    restarts = node(MASTER, "journalctl", "--no-pager", "-o", "cat", "-u", "twinrail-guard.service",
                    "--since", "-5min").stdout.count("restart:")
    print(f"{failure}: new request 503 after {new_503:.1f} s ({data['error']['message']!r}); in-flight stream "
          f"ended after {in_flight:.1f} s; service back {recovery:.1f} s after the worker was, "
          f"{outage:.1f} s after the failure")
    record(failure, {"new_request_503_s": round(new_503, 2), "in_flight_end_s": round(in_flight, 2),
                     "recovery_s": round(recovery, 2), "outage_s": round(outage, 2), "broken_for_s": round(mended_at - failed_at, 2),
                     "guard_restarts_in_log": restarts})


def memory() -> dict:
    return json.loads(node(MASTER, "python3", "/opt/twinrail/guard/current/twinrail-guard.pyz", "memory").stdout)


def hog(pct: float, name: str) -> None:
    """A process on the master holding memory up to pct of the node (its own unit)."""
    mem = memory()
    size = int(mem["total"] * pct / 100 - mem["used"])
    assert size > 0, mem
    node(MASTER, "systemd-run", "--unit", name, "--collect", "python3", "-c",
         f"import time; b = b'x' * {size}; time.sleep(600)")
    deadline = time.monotonic() + 60
    while memory()["percent"] < pct - 1 and time.monotonic() < deadline:
        time.sleep(0.5)


def guard_status() -> dict:
    return json.loads(node(MASTER, "python3", "-c", "import urllib.request as u; "
                           "print(u.urlopen('http://127.0.0.1:8081/twinrail/status', timeout=5).read().decode())").stdout)


def test_memory_watermarks_drill(host):
    wait_available()
    pids = {unit: node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip()
            for unit in ("twinrail-llama.service", "twinrail-guard.service", "nginx.service", "ssh.service")}
    streams = [Stream() for _ in range(4)]  # every slot busy
    for stream in streams:
        stream.start()
    for stream in streams:
        assert stream.first.wait(90)
    queued: dict = {}

    def queued_client():
        status, data = chat(timeout=300)
        queued.update(status=status, data=data, at=time.monotonic())

    waiting = threading.Thread(target=queued_client, daemon=True)
    waiting.start()
    time.sleep(2)
    assert not queued and guard_status()["active"] == 4
    try:
        hog(87, "twinrail-hog-soft")
        soft = memory()
        deadline = time.monotonic() + 10
        status, data = chat(timeout=30)
        while "soft watermark" not in data.get("error", {}).get("message", "") and time.monotonic() < deadline:
            time.sleep(0.5)
            status, data = chat(timeout=30)
        assert status == 503 and "soft watermark, new requests refused" in data["error"]["message"], data
        assert not queued, "a queued request failed below the hard watermark"
        hog(94, "twinrail-hog-hard")
        hard = memory()
        crossed = time.monotonic()
        waiting.join(15)
        assert queued.get("status") == 503, queued
        assert "hard watermark, queued request failed" in queued["data"]["error"]["message"]
        print(f"memory drill: soft at {soft['percent']}% of {soft['total'] / 2**30:.2f} GiB -> {data['error']['message']!r}; "
              f"hard at {hard['percent']}% -> queued request failed {queued['at'] - crossed:.1f} s later: "
              f"{queued['data']['error']['message']!r}")
        record("memory watermarks", {"soft_pct": soft["percent"], "hard_pct": hard["percent"],
                                     "queued_failed_after_s": round(queued["at"] - crossed, 2)})
    finally:
        for unit in ("twinrail-hog-soft", "twinrail-hog-hard"):
            node(MASTER, "systemctl", "stop", unit, check=False)
        for stream in streams:
            stream.stop()
    # nothing else on the node died
    after = {unit: node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip()
             for unit in pids}
    assert after == pids
    assert wait_available(60) < 60
