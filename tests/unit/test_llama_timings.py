"""llama.cpp's timing lines read as an operator means them: prefill and
decode per request, the prompt tokens taken from the cache not counted as
prefill, a rate over one token not a measurement; on real captures
(tests/fixtures/lab/ and tests/fixtures/llama-load/, with their sources)."""

from __future__ import annotations

from conftest import FIXTURES

from llama_timings import lines, parse_timings, summary

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
