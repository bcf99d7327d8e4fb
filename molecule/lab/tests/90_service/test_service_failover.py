"""The seed's failover line and the memory watermarks, as drills on the lab,
from the controller through the proxy (nginx -> twinrail-guard ->
llama-server): a worker's RPC server killed, stopped (SIGSTOP), its node
paused, a rail cut. Each time an in-flight stream ends with a 503 error
event and a new request gets a JSON 503 naming the worker, both within
10 s; the cluster comes back by itself (timed). A memory hog on the master
past each watermark: new requests refused, then queued ones failed, with
the reason; nothing else on the node dies."""

from __future__ import annotations

import json
import threading
import time

import pytest
from lab_client import MASTER, WORKER, chat, guard_sees, guard_status, hog, lab, memory, node, post, record, unhog, \
    wait_available

testinfra_hosts = ["ansible://master"]

SLA = 10.0


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
        guard_sees("soft")
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
        unhog()
        for stream in streams:
            stream.stop()
    # nothing else on the node died
    after = {unit: node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip()
             for unit in pids}
    assert after == pids
    assert wait_available(60) < 60
