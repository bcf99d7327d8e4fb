"""The load engine shared by the acceptance stage and `twinrail bench`
(module_utils/acceptance/load.py), driving both clients against a stand-in
llama-server that replays the lab's real streamed chat answer
(tests/fixtures/llama-server/lab_chat_stream.txt) an event at a time."""

from __future__ import annotations

import threading
import time

import openai
import pytest
import test_guard_traffic
from test_guard import serve

from ansible.module_utils.acceptance import load
from ansible.module_utils.acceptance.client import Client
from twinrail.ctl import bench


class Replay(test_guard_traffic.Replay):
    """The chat stream after 0.2 s, counting the requests in flight at once."""
    first_delay = 0.2
    stop_after = None
    lock = threading.Lock()
    now = peak = started = 0

    def do_POST(self):
        with Replay.lock:
            Replay.now += 1
            Replay.started += 1
            Replay.peak = max(Replay.peak, Replay.now)
        try:
            super().do_POST()
        finally:
            with Replay.lock:
                Replay.now -= 1


@pytest.fixture
def server():
    Replay.now = Replay.peak = Replay.started = 0
    Replay.stop_after = None
    Replay.hang.clear()
    httpd, port = serve(Replay)
    yield f"http://127.0.0.1:{port}"
    Replay.hang.set()
    httpd.shutdown()


def acceptance_request(url, timeout=30):
    client = Client(url, "user", "secret", True, timeout)
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "Say hello."}]}

    def send(token):
        _text, last, finished = client.stream(body, token)
        return (last.get("timings") or {}).get("predicted_n"), None if finished else "not finished"

    return load.timed(send)


def test_a_request_is_timed_from_its_first_token_and_counted_by_the_server(server):
    outcome = acceptance_request(server)
    # the capture's last event: 8 tokens predicted; the first came after the stand-in's 0.2 s
    assert outcome["error"] is None and outcome["tokens"] == 8, outcome
    assert 0.2 <= outcome["ttft_s"] < outcome["e2e_s"], outcome


def test_the_sdk_client_of_twinrail_bench_sees_the_same_answer(server):
    client = openai.OpenAI(base_url=server + "/v1", api_key="k", max_retries=0, timeout=30)
    outcome = bench.one(client, "m", 8)
    # content chunks seen by the SDK: the capture's 9 content events, the first one empty
    assert outcome["error"] is None and outcome["tokens"] == 8, outcome
    assert 0.2 <= outcome["ttft_s"] < outcome["e2e_s"]


def test_a_stream_that_hangs_is_an_error_named_by_its_type(server):
    Replay.stop_after = 3
    outcome = acceptance_request(server, timeout=1)
    assert outcome["tokens"] == 0 and outcome["error"].startswith("TimeoutError: "), outcome
    # the tokens before it hung were seen: the first token's time is real
    assert outcome["ttft_s"] is not None and outcome["e2e_s"] >= 1.0


def test_shared_requests_are_all_sent_and_never_more_at_once_than_the_clients(server):
    outcomes, wall = load.shared(5, 2, lambda: acceptance_request(server))
    assert len(outcomes) == 5 == Replay.started and all(o["error"] is None for o in outcomes)
    assert Replay.peak == 2
    # three rounds of at least 0.2 s each
    assert wall >= 0.6


def test_clients_kept_busy_stop_sending_at_the_deadline(server):
    started = time.monotonic()
    outcomes, wall = load.until(0.5, 3, lambda: acceptance_request(server))
    assert Replay.peak == 3 and len(outcomes) == Replay.started >= 3
    # each client starts no request after the deadline: the last ended within one request of it
    assert wall < 0.5 + max(o["e2e_s"] for o in outcomes) + 0.5
    assert all(o["ended"] > started for o in outcomes)


def test_together_keeps_each_result_in_its_place():
    results, wall = load.together(4, lambda i: (time.sleep(0.1 * (4 - i)), i)[1])
    assert results == [0, 1, 2, 3] and 0.4 <= wall < 1.0
