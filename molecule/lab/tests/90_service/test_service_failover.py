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
from lab_client import GUARD_PORT, MASTER, RPC_PORT, WORKER, chat, default, guard_sees, guard_status, hog, lab, memory, \
    node, post, record, unhog, unit_argv, wait_available

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


def generation_rate(tokens: int = 48) -> float:
    """Tokens per second of one generation through the proxy (wall clock,
    the same measure before the cut and on one rail)."""
    started = time.monotonic()
    conn, response = post({"messages": [{"role": "user", "content": "Count from one to one hundred."}],
                           "max_tokens": tokens, "ignore_eos": True, "temperature": 0}, timeout=120)
    data = json.loads(response.read())
    conn.close()
    assert response.status == 200, data
    return data["usage"]["completion_tokens"] / (time.monotonic() - started)


def llama_rpc() -> str:
    """The --rpc and --tensor-split llama-server runs with now."""
    argv = unit_argv(MASTER, "twinrail-llama.service")
    return f"--rpc {argv[argv.index('--rpc') + 1]} --tensor-split {argv[argv.index('--tensor-split') + 1]}"


def rpc_pid(address: str) -> str:
    return node(WORKER, "systemctl", "show", "-p", "MainPID", "--value", f"twinrail-rpc@{address}.service").stdout.strip()


DEGRADE_AFTER, RESTORE_AFTER = 15, 30  # the role's defaults, which the lab keeps
SWITCH_BOUND = 30  # s past those for llama-server to restart and answer


def test_a_rail_that_stays_cut_turns_into_serving_on_the_other(host):
    """Issue 18's single-rail mode: rail1 cut at the master for longer than
    inference_service_degrade_after: the guard restarts llama-server on
    rail0's RPC server alone (the worker's whole share there), says
    degraded in its status and metrics; mended, it restarts rail1's RPC
    server (it still holds the killed llama-server's connection) and goes
    back to both rails. rail0's RPC server runs throughout."""
    wait_available()
    both = llama_rpc()
    assert both == f"--rpc 198.19.0.2:{RPC_PORT},198.19.1.2:{RPC_PORT} --tensor-split 0.5,0.5", both
    rate_both = generation_rate()
    rail0_pid, rail1_pid = rpc_pid("198.19.0.2"), rpc_pid("198.19.1.2")
    cut_at = time.monotonic()
    lab("cut", "rail1")
    try:
        refusals = []
        while time.monotonic() - cut_at < DEGRADE_AFTER + SWITCH_BOUND:
            status, data = chat(timeout=30)
            if status == 200:
                break
            refusals.append(data.get("error", {}).get("message", ""))
            time.sleep(0.5)
        serving_again = time.monotonic() - cut_at
        assert status == 200, f"no answer on rail0 {serving_again:.0f} s after the cut: {refusals[-1:]}"
        assert serving_again >= DEGRADE_AFTER, serving_again  # not before the rail stayed down for the setting
        assert any("goes on over the worker's other rail(s) if this lasts 15 s" in r for r in refusals), refusals
        seen = guard_status()
        assert seen["degraded"] == "serving on rail0 only (lab-worker1 rail1 (198.19.1.2) left out)", seen
        assert [(w["rail"], w["serving"]) for w in seen["workers"]] == [("rail0", True), ("rail1", False)]
        assert llama_rpc() == f"--rpc 198.19.0.2:{RPC_PORT} --tensor-split 1"
        metrics = node(MASTER, "python3", "-c", "import urllib.request as u; print(u.urlopen("
                       f"'http://127.0.0.1:{GUARD_PORT}/twinrail/metrics', timeout=5).read().decode())").stdout
        assert "\ntwinrail_guard_degraded 1\n" in metrics
        assert ('twinrail_guard_worker_serving{host="lab-worker1",address="198.19.1.2",rail="rail1"} 0'
                in metrics)
        rate_one = generation_rate()
    finally:
        mended_at = time.monotonic()
        lab("mend", "rail1")
    deadline = mended_at + RESTORE_AFTER + SWITCH_BOUND
    while time.monotonic() < deadline:
        seen = guard_status()
        if seen["degraded"] is None and seen["available"]:
            break
        time.sleep(0.5)
    back = time.monotonic() - mended_at
    assert seen["degraded"] is None and seen["available"], seen
    assert back >= RESTORE_AFTER, back
    assert llama_rpc() == both
    assert wait_available(30) < 30
    assert rpc_pid("198.19.0.2") == rail0_pid  # the healthy rail's server was never touched
    assert rpc_pid("198.19.1.2") != rail1_pid  # the cut rail's one was restarted before it served again
    print(f"single-rail mode: answering on rail0 {serving_again:.1f} s after the cut (degrade_after "
          f"{DEGRADE_AFTER} s); {rate_one:.1f} tokens/s on one rail vs {rate_both:.1f} on both "
          f"({rate_one / rate_both:.2f}x); back on both rails {back:.1f} s after the mend (restore_after "
          f"{RESTORE_AFTER} s)")
    record("single-rail mode", {"serving_again_s": round(serving_again, 2), "tokens_per_s_one_rail": round(rate_one, 2),
                                "tokens_per_s_both_rails": round(rate_both, 2), "back_on_both_s": round(back, 2)})


def test_a_wedged_engine_on_the_master_is_found_and_restarted(host):
    """The field's hang on the master while every worker is healthy:
    llama-server stopped (SIGSTOP: its port still accepts, nothing
    answers) while no request is in flight. The guard's idle probe finds it
    (within idle_probe + probe_timeout: its status says stalled), a new
    request gets a 503 naming the stall, the guard restarts llama-server
    itself and counts the stall; the service comes back without anyone
    mending anything."""
    idle_probe, probe_timeout = (default("inference_service_guard_idle_probe"),
                                 default("inference_service_guard_probe_timeout"))
    wait_available()
    before = int(node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-llama.service").stdout)
    stopped_at = time.monotonic()
    node(MASTER, "kill", "-STOP", str(before))
    try:
        # nothing sent meanwhile: a request would wait on the stopped process
        # (that case is the in-flight watchdog's, stall_after s later)
        seen: dict = {}
        while time.monotonic() - stopped_at < idle_probe + probe_timeout + 20:
            seen = guard_status()
            if seen.get("stalled"):
                break
            time.sleep(0.5)
        found = time.monotonic() - stopped_at
        assert (seen.get("stalled") or "").startswith("llama-server stalled: its probe failed while idle (hung)"), seen
        assert found < idle_probe + probe_timeout + 10, found  # a turn of the monitor and the lab's load
        # a new request: refused by the guard itself, naming the stall, while llama-server starts again
        status, data = chat(timeout=30)
        refused = time.monotonic() - stopped_at
        assert status == 503, (status, data)
        assert data["error"]["message"].startswith("recovering: llama-server stalled: its probe failed"), data
    finally:
        node(MASTER, "kill", "-CONT", str(before), check=False)  # gone once the guard killed it
    back = wait_available(since=stopped_at)
    after = int(node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-llama.service").stdout)
    assert after != before  # restarted by the guard, not resumed
    metrics = node(MASTER, "python3", "-c", "import urllib.request as u; print(u.urlopen("
                   f"'http://127.0.0.1:{GUARD_PORT}/twinrail/metrics', timeout=5).read().decode())").stdout
    stalls = [line for line in metrics.splitlines() if line.startswith("twinrail_guard_engine_stalls_total ")]
    assert stalls and float(stalls[0].split()[1]) >= 1, stalls
    assert "\ntwinrail_guard_engine_stalled 0\n" in metrics
    print(f"wedged llama-server: found stalled {found:.1f} s after SIGSTOP (idle probe every {idle_probe} s, probe "
          f"timeout {probe_timeout} s), a new request 503 naming it at {refused:.1f} s; serving again {back:.1f} s "
          "after the SIGSTOP")
    record("wedged engine on the master (SIGSTOP)", {"stall_found_s": round(found, 2), "stall_503_s": round(refused, 2),
                                                     "back_s": round(back, 2)})
