"""make bench-split's own logic: the layouts it derives from the serving
llama-server's real command line (tests/fixtures/lab/
llama_server_cmdline_lab.txt), and its client's reading of a real streamed
answer (tests/fixtures/llama-server/lab_completions_stream.txt, replayed)."""

from __future__ import annotations

import bench_split
import bench_split_node
import test_guard_traffic
from conftest import FIXTURES
from test_guard import serve

SERVER = (FIXTURES / "lab" / "llama_server_cmdline_lab.txt").read_text().split()


def test_each_layout_changes_only_what_it_says():
    variants = dict(bench_split.layout_variants(SERVER))
    base = variants["the service's: an RPC server per rail"]
    assert bench_split.option(base, "--port") == "18080" and base.count("--port") == 1
    assert [a for a in base if a not in ("--port", "18080")] == [a for a in SERVER if a not in ("--port", "8080")]
    quiet = variants["the service's, without -lv 4"]
    assert "-lv" not in quiet and bench_split.option(quiet, "-np") == "4"
    one = variants["one RPC server per worker (rail0 carries the share)"]
    assert bench_split.option(one, "--rpc") == "198.19.0.2:50052" and "--tensor-split" not in one
    assert bench_split.option(one, "-ngl") == "16"
    local = variants["no RPC: every layer on the master"]
    assert "--rpc" not in local and bench_split.option(local, "-ngl") == "0"
    assert bench_split.option(variants["an RPC server per rail, llama-server -t 2"], "-t") == "2"
    assert bench_split.option(variants["an RPC server per rail, -b 256 -ub 256"], "-b") == "256"


class Replay(test_guard_traffic.Replay):
    """The lab's llama-server's streamed /v1/completions, an event at a time."""
    first_delay = 0.0
    stop_after = None

    def capture_for(self, body: dict) -> str:
        return "lab_completions_stream.txt"


def test_the_client_reads_tokens_and_timings_from_a_real_stream():
    server, port = serve(Replay)
    try:
        got = bench_split_node.one(f"http://127.0.0.1:{port}", 8, "The capital of France is", None)
    finally:
        server.shutdown()
    # 8 events with text; llama-server's own figures from its last event
    assert got["tokens"] == 8 and got["prompt_n"] == 1, got
    assert got["server_decode_tps"] == 83.76311790257152
    assert 0 < got["ttft_s"] < got["e2e_s"] and got["decode_tps"] > 0
