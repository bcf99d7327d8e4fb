"""Acceptance against vLLM, which reports no llama.cpp `timings`: the
client asks for the usage in streams and derives the rates from the
server's token counts and its own clock (module_utils/acceptance/client.py),
on vLLM's real answers replayed on the loopback
(tests/fixtures/vllm/api/SOURCE.md)."""

from __future__ import annotations

import http.server
import json

import pytest
from conftest import FIXTURES, loopback_server

from ansible.module_utils.acceptance.client import Client, client_timings

API = FIXTURES / "vllm" / "api"


class Replay(http.server.BaseHTTPRequestHandler):
    bodies: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Replay.bodies.append(body)
        name = "chat-stream-include-usage_pp2.txt" if body.get("stream") else "chat_pp2.json"
        data = (API / name).read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if body.get("stream") else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_):
        pass


@pytest.fixture
def server():
    Replay.bodies = []
    with loopback_server(Replay) as port:
        yield f"http://127.0.0.1:{port}"


def test_a_vllm_stream_gets_timings_from_its_usage(server):
    tokens = []
    text, last, finished = Client(server, "u", "p", False, 10, usage_timings=True).stream(
        {"model": "m", "messages": []}, lambda: tokens.append(1))
    assert finished and text.startswith("1")
    assert Replay.bodies[0]["stream_options"] == {"include_usage": True}
    timings = last["timings"]
    assert (timings["prompt_n"], timings["predicted_n"]) == (38, 24)
    assert timings["source"] == "usage and the client's clock"
    assert timings["prompt_per_second"] > 0 and timings["predicted_per_second"] > 0


def test_llama_servers_streams_are_left_as_they_are(server):
    _text, last, _finished = Client(server, "u", "p", False, 10).stream({"model": "m", "messages": []}, lambda: None)
    assert "stream_options" not in Replay.bodies[0]
    assert "timings" not in last  # no timings made up for an engine that reports its own


def test_a_plain_answer_gets_timings_too(server):
    status, data = Client(server, "u", "p", False, 10, usage_timings=True).post("/v1/chat/completions", {"model": "m"})
    assert status == 200 and data["timings"]["predicted_n"] == data["usage"]["completion_tokens"]


def test_the_rates_from_counts_and_clock():
    got = client_timings({"prompt_tokens": 100, "completion_tokens": 11}, started=10.0, first=10.5, ended=12.5)
    assert got["prompt_per_second"] == 200.0 and got["predicted_per_second"] == 5.0
    none = client_timings({"prompt_tokens": 0, "completion_tokens": 1}, started=1.0, first=None, ended=1.0)
    assert none["prompt_per_second"] == 0.0 and none["predicted_per_second"] == 0.0
