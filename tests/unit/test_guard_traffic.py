"""What the guard's clients saw, counted by the guard (twinrail.guard.metrics.
Traffic): answers by status, the first token's and the whole generation's
time, the tokens generated. llama-server here is a stand-in that replays
real answers of the lab's llama-server byte for byte
(tests/fixtures/llama-server/, with its SOURCES.md), streamed an event at
a time."""

from __future__ import annotations

import http.client
import http.server
import json
import shutil
import subprocess
import threading
import time

import pytest
from conftest import FIXTURES
from test_guard import FakeAgent, exposition, get_text, guard_on

from twinrail.guard import metrics

CAPTURES = FIXTURES / "llama-server"


def capture(name: str) -> tuple[int, str, bytes]:
    """(status, content type, body) of a capture: `HTTP <status> <type>`,
    an empty line, the body."""
    head, _, body = (CAPTURES / name).read_bytes().partition(b"\n\n")
    _, status, kind = head.decode().split(" ", 2)
    return int(status), kind, body


@pytest.mark.parametrize("name, tokens", [
    ("lab_chat_stream.txt", 8), ("lab_chat_stream_usage.txt", 8), ("lab_chat.json", 8),
    ("lab_completions.json", 8), ("lab_completions_stream.txt", 8), ("lab_completion.json", 8),
    ("lab_completion_stream.txt", 8), ("lab_chat_error.json", None)])
def test_the_tokens_generated_are_read_from_the_answers_end(name, tokens):
    status, _, body = capture(name)
    assert metrics.generated_tokens(body[-metrics.TAIL_BYTES:]) == tokens
    if tokens:
        # the non-streamed answers say so twice (usage and timings): the same count
        usage = json.loads(body).get("usage") if name.endswith(".json") else None
        assert usage is None or usage["completion_tokens"] == tokens
        # an answer cut before its last event claims no tokens
        cut = body[:body.rfind(b'"timings"')]
        assert metrics.generated_tokens(cut[-metrics.TAIL_BYTES:]) is None
    else:
        assert status == 400


class Replay(http.server.BaseHTTPRequestHandler):
    """llama-server answering with a capture: the chat stream for a
    streamed request, the chat answer otherwise, the 400 for a body whose
    messages are not a list; ``first_delay`` s before the first event."""
    protocol_version = "HTTP/1.1"
    first_delay = 0.3
    stop_after: int | None = None  # events sent before the stream hangs
    hang = threading.Event()

    def log_message(self, *args):
        pass

    def capture_for(self, body: dict) -> str:
        return ("lab_chat_error.json" if not isinstance(body.get("messages", []), list)
                else "lab_chat_stream.txt" if body.get("stream") else "lab_chat.json")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        status, kind, data = capture(self.capture_for(body))
        time.sleep(self.first_delay)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        if not kind.startswith("text/event-stream"):
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for number, event in enumerate(data.split(b"\n\n")):
            if not event:
                continue
            if self.stop_after is not None and number >= self.stop_after:
                self.hang.wait(20)
                return
            event += b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            time.sleep(0.01)
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self):
        data = b'{"object": "list", "data": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def guard_on_replay(monkeypatch):
    Replay.stop_after = None
    Replay.hang.clear()
    with guard_on(monkeypatch, Replay, probe_timeout=2.0, model="smollm2-135m-instruct") as (guard, port):
        monkeypatch.setattr(guard, "slots_now", lambda: None)
        assert guard.refusal() is None
        guard.traffic = metrics.Traffic("smollm2-135m-instruct")  # the probe's completion is not a client's
        yield guard, port
        Replay.hang.set()


def chat(port: int, **body) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/chat/completions",
                 body=json.dumps({"messages": [{"role": "user", "content": "Say hello."}], **body}),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


def test_answers_first_tokens_and_tokens_are_counted_as_clients_saw_them(guard_on_replay):
    guard, port = guard_on_replay
    status, data = chat(port, stream=True)
    assert status == 200 and data.endswith(b"data: [DONE]\n\n")
    assert chat(port)[0] == 200
    assert chat(port, messages="x")[0] == 400
    models = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    models.request("GET", "/v1/models")
    assert models.getresponse().status == 200
    models.close()
    FakeAgent.problem = "ggml-rpc-server (pid 42) is stopped"
    deadline = time.monotonic() + 5
    while guard.refusal() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert chat(port)[0] == 503
    assert get_text(port, "/health")[0] == 503  # the guard's own: not a client's answer
    text = get_text(port, "/twinrail/metrics")[2]
    check = subprocess.run([shutil.which("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    got = exposition(text)
    model = (("model", "smollm2-135m-instruct"),)

    def answered(code: str, reason: str = "") -> float:
        return got.get(("twinrail_guard_responses_total", (("code", code),) + model + (("reason", reason),)), 0)

    assert (answered("2xx"), answered("4xx"), answered("503", "worker_lost")) == (3, 1, 1)
    assert answered("5xx") == 0 and answered("503", "llama_server") == 0
    # two generations of 8 tokens (llama-server's timings), none for the 400 or the 503
    assert got[("twinrail_guard_generated_tokens_total", model)] == 16
    # one streamed generation: its first token came after the stand-in's 0.3 s
    assert got[("twinrail_guard_time_to_first_token_seconds_count", model)] == 1
    assert got[("twinrail_guard_time_to_first_token_seconds_bucket", (("le", "0.25"),) + model)] == 0
    assert got[("twinrail_guard_time_to_first_token_seconds_bucket", (("le", "1.0"),) + model)] == 1
    # the whole time of each generation (POST), the model list's not
    assert got[("twinrail_guard_request_duration_seconds_count", model)] == 4
    assert got[("twinrail_guard_request_duration_seconds_bucket", (("le", "0.1"),) + model)] == 1  # the 503
    assert 0.9 < got[("twinrail_guard_request_duration_seconds_sum", model)] < 5


def test_a_stream_cut_by_a_lost_worker_counts_as_a_503_not_an_answer(guard_on_replay):
    guard, port = guard_on_replay
    Replay.stop_after = 3  # three events, then llama-server waits on the lost worker

    def lose_the_worker():
        time.sleep(0.8)
        FakeAgent.problem = "ggml-rpc-server (pid 42) is gone"

    threading.Thread(target=lose_the_worker, daemon=True).start()
    status, data = chat(port, stream=True)
    assert status == 200 and b"worker unavailable" in data  # the stream's own end, as clients see it
    got = exposition(get_text(port, "/twinrail/metrics")[2])
    model = (("model", "smollm2-135m-instruct"),)
    assert got.get(("twinrail_guard_responses_total", (("code", "2xx"),) + model + (("reason", ""),)), 0) == 0
    assert got[("twinrail_guard_responses_total", (("code", "503"),) + model + (("reason", "worker_lost"),))] == 1
    assert got[("twinrail_guard_generated_tokens_total", model)] == 0
    assert got[("twinrail_guard_time_to_first_token_seconds_count", model)] == 1


def test_a_503_from_llama_server_itself_is_its_own_reason():
    traffic = metrics.Traffic("m")
    traffic.record(503, "", duration=0.01)
    traffic.record(503, "memory above the soft watermark, new requests refused: x", duration=0.01)
    traffic.record(500, "", duration=0.01)
    traffic.record(429, "too many requests: 2 generating", duration=0.01)
    out = metrics.Exposition()
    traffic.families(out)
    got = exposition(out.text())
    key = lambda code, reason="": ("twinrail_guard_responses_total", (("code", code), ("model", "m"), ("reason", reason)))  # noqa: E731
    assert got[key("503", "llama_server")] == 1 and got[key("503", "memory_soft")] == 1
    assert got[key("5xx")] == 1 and got[key("429")] == 1
