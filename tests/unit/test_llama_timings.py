"""llama.cpp's timing lines read as an operator means them: prefill and
decode per request, the prompt tokens taken from the cache not counted as
prefill, a rate over one token not a measurement; on real captures
(tests/fixtures/lab/ and tests/fixtures/llama-load/, with their sources)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ansible.module_utils.engines.llamacpp.timings import lines, parse_timings, summary

LAB = (FIXTURES / "lab" / "llama-server_print_timing_cached_prompt_lab.txt").read_text()


def test_the_one_line_slot_form_with_a_cached_prompt():
    requests = parse_timings(LAB)
    assert len(requests) == 10
    first, cached = requests[-2:]
    assert first == {"prompt_tokens": 56, "prompt_cached": 0, "prompt_ms": 347.31, "prefill_tps": 161.24,
                     "decode_tokens": 12, "decode_ms": 239.43, "decode_tps": 45.94, "total_ms": 586.74}
    # the same prompt again: 55 tokens from the cache, one processed: no prefill rate
    assert (cached["prompt_tokens"], cached["prompt_cached"], cached["prefill_tps"]) == (1, 55, None)
    assert cached["decode_tps"] == 49.76
    # the guard's one-token probes: "eval time = 0.00 ms / 1 tokens (... 0.00 tokens per second)" is no figure
    probes = [r for r in requests if r["decode_tokens"] == 1]
    assert probes and all(r["decode_tps"] is None and r["prefill_tps"] is None for r in probes)


def test_the_summary_leaves_single_token_rates_out():
    requests = parse_timings(LAB)
    total = summary(requests)
    measured = [r for r in requests if r["prefill_tps"] is not None]
    assert total["prefill_not_measured"] == len(requests) - len(measured) == 8
    expected = sum(r["prefill_tps"] * r["prompt_ms"] for r in measured) / sum(r["prompt_ms"] for r in measured)
    assert total["prefill_tps"] == round(expected, 2)
    # a mean that took the 1-token rates in would be far off (49.80 tokens/s of a cached prompt)
    assert total["prefill_tps"] > 140
    said = lines(requests)
    assert said[-2] == ("request 10: prefill 1 tokens (+55 cached) in 18.9 ms, no rate (one token); decode 12 tokens "
                        "in 221.04 ms, 49.8 tokens/s")
    assert said[-1].startswith("10 request(s): prefill ")


LOAD = FIXTURES / "llama-load"


@pytest.mark.parametrize("name, first", [
    # the JSON log lines of mid-2024 servers ("generation eval time", "runs")
    ("llama-server_print_timings_json_log_issue7637.txt", (27, 2684.39, 10.06, 25, 3559.27, 7.02, 6243.66)),
    # the same as text with its fields after "|"
    ("llama-server_print_timings_info_text_issue9013_2024-08.txt", (12, 15.62, 768.49, 783, 3194.22, 245.13, 3209.84)),
    # the multi-line "slot print_timing: id 0 | task 0 |" block, unprefixed lines after it
    ("llama-server_slot_print_timing_multiline_forced_reprocess_pr19408.txt",
     (1360, 5093.47, 267.01, 10, 319.58, 31.29, 5413.05)),
    ("llama-server_slot_print_timing_multiline_pid_prefix_pr23269.txt",
     (27, 789.03, 34.22, 192, 16112.5, 11.92, 16901.53)),
    # one timestamped line a figure, with "graphs reused"
    ("llama-server_slot_print_timing_perline_timestamps_graphs_reused_pi-llama-pr19.txt",
     (104, 210.02, 495.19, 764, 12060.66, 63.35, 12270.68)),
    # the total time line was cut off in the stored excerpt
    ("llama-server_slot_print_timing_multiline_issue9013_2025-05.txt", (51, 915.13, 55.73, 275, 23038.87, 11.94, None)),
])
def test_every_form_llama_server_has_printed_is_read(name, first):
    request = parse_timings((LOAD / name).read_text())[0]
    assert tuple(request[k] for k in ("prompt_tokens", "prompt_ms", "prefill_tps", "decode_tokens", "decode_ms",
                                      "decode_tps", "total_ms")) == first


def test_a_one_token_prompt_and_a_one_run_generation_are_no_measurement():
    """45454.55 tokens per second over one run (CRLF line ends, as stored)."""
    (request,) = parse_timings((LOAD / "ik-llama-server_print_timings_info_1token_cached_huge_tps_crlf_ik612.txt")
                               .read_text())
    assert (request["prompt_tokens"], request["prefill_tps"], request["decode_tokens"], request["decode_tps"]) == (
        1, None, 1, None)
    assert summary([request]) == {"requests": 1, "prefill_tps": None, "decode_tps": None, "prefill_not_measured": 1,
                                  "decode_not_measured": 1}


def test_the_older_kv_cache_rm_line_says_what_came_from_the_cache():
    requests = parse_timings((LOAD / "ik-llama-server_cuda_illegal_memory_access_after_serving_2xT4_ik398.txt")
                             .read_text())
    assert [(r["prompt_tokens"], r["prompt_cached"], r["prefill_tps"]) for r in requests] == [
        (756, 0, 529.38), (1480, 0, 654.88)]
