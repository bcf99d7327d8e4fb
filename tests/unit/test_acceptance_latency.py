"""The latency ramp's table and the soak's verdict, on a real acceptance
report of the lab (tests/fixtures/lab/acceptance_lab_ramp_soak.json: every
request of the ramp and every window of the soak, as the lab measured them
through the proxy)."""

from __future__ import annotations

import copy
import json
import statistics

import pytest
from conftest import REPO

from ansible.module_utils.acceptance.latency import (drill_failures, level_row, percentile, ramp_failures, soak_failures, soak_summary,
                                soak_windows)

REPORT = json.loads((REPO / "tests" / "fixtures" / "lab" / "acceptance_lab_ramp_soak.json").read_text())


def test_the_report_has_a_row_per_level_and_a_soak():
    assert [row["concurrency"] for row in REPORT["latency"]] == [1, 2, 4, 8]
    assert REPORT["soak"]["windows"] >= 3 and REPORT["soak"]["requests"] > 0


@pytest.mark.parametrize("q", [50, 95, 99])
def test_percentiles_agree_with_the_standard_library(q):
    for row in REPORT["latency"]:
        values = [s["e2e_s"] for s in row["samples"] if not s["error"]]
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        assert percentile(values, q) == pytest.approx(cuts[q - 1], abs=1e-3)


def test_percentile_of_nothing_and_of_one():
    assert percentile([], 95) is None and percentile([None], 50) is None
    assert percentile([0.25], 99) == 0.25


@pytest.mark.parametrize("index", range(4))
def test_each_row_is_what_its_requests_give(index):
    row = REPORT["latency"][index]
    again = level_row(row["concurrency"], row["samples"], row["wall_s"])
    # the module's wall time was not yet rounded to the report's 0.01 s
    assert again.pop("aggregate_tps") == pytest.approx(row["aggregate_tps"], abs=0.05)
    assert {k: v for k, v in again.items() if k != "samples"} == \
        {k: v for k, v in row.items() if k not in ("samples", "aggregate_tps")}
    # latency grows with concurrency once the slots are all busy (4 slots in the lab)
    first_token = [r["ttft_p50_s"] for r in REPORT["latency"]]
    assert first_token[3] > first_token[0]


def test_the_real_ramp_passes_and_a_failed_request_fails_its_level():
    assert ramp_failures(REPORT["latency"], 0) == []
    row = copy.deepcopy(REPORT["latency"][3])
    row["samples"][0].update(ttft_s=None, error="HTTP 429: queue full")
    broken = level_row(8, row["samples"], row["wall_s"])
    assert broken["errors"] == 1 and broken["requests"] == row["requests"]
    assert ramp_failures([broken], 0) == [
        f"latency ramp: 1 of {row['requests']} requests failed at concurrency 8 (HTTP 429: queue full)"]


def test_a_first_token_bound_names_the_level_and_the_figure():
    slowest = max(REPORT["latency"], key=lambda r: r["ttft_p95_s"])
    bound = round(slowest["ttft_p95_s"] / 2, 3)
    failures = ramp_failures(REPORT["latency"], bound)
    assert f"first token after {slowest['ttft_p95_s']:.2f} s at p95 with {slowest['concurrency']} concurrent " \
           f"requests, at most {bound} s allowed" in " | ".join(failures)
    assert ramp_failures(REPORT["latency"], slowest["ttft_p95_s"]) == []


def summary_of(series, growth=None):
    soak = REPORT["soak"]
    start = {h: 50.0 for h in soak["memory_growth_pct"]}
    end = {h: 50.0 + (growth or soak["memory_growth_pct"]).get(h, 0) for h in start}
    return soak_summary(series, start, end)


def test_the_real_soak_is_summed_up_again_and_passes():
    soak = REPORT["soak"]
    again = summary_of(soak["series"])
    for key in ("windows", "requests", "errors", "tokens", "first_third_tps", "last_third_tps", "drift_pct"):
        assert again[key] == soak[key], key
    assert soak_failures(soak, 20.0, 2.0) == []


def test_throughput_that_falls_fails_the_soak_with_both_figures():
    series = copy.deepcopy(REPORT["soak"]["series"])
    third = len(series) // 3
    per_window = sum(w["tokens"] for w in series[:third]) // third
    for window in series[-third:]:  # the last third at half the first's pace
        window["tokens"] = per_window // 2
    summary = summary_of(series)
    failures = soak_failures(summary, 20.0, 2.0)
    assert len(failures) == 1 and failures[0].startswith(
        f"soak: throughput drifted from {summary['first_third_tps']} to {summary['last_third_tps']} tokens/s (")
    assert failures[0].endswith("between its first and last third, at most -20.0 % allowed")


def test_errors_and_memory_growth_fail_the_soak_naming_the_node():
    series = copy.deepcopy(REPORT["soak"]["series"])
    series[1]["errors"] += 2
    host = sorted(REPORT["soak"]["memory_growth_pct"])[-1]
    summary = summary_of(series, {host: 3.5})
    failures = soak_failures(summary, 20.0, 2.0)
    assert failures[0].startswith(f"soak: 2 of {summary['requests']} requests failed over ")
    assert failures[1] == f"soak: {host}: memory grew 3.50 points of the node's memory over " \
                          f"{summary['seconds']} s, at most 2.0 allowed"


def test_a_soak_too_short_to_judge_a_drift_fails():
    summary = summary_of(REPORT["soak"]["series"][:2])
    assert soak_failures(summary, 20.0, 2.0)[0].startswith("soak: 2 windows measured, at least 3 needed")


def test_soak_windows_give_back_the_real_soak_from_its_requests():
    """The real soak's series rebuilt from requests that ended in each
    window (one in flight at the deadline counts in the last)."""
    soak = REPORT["soak"]
    window, seconds, started = soak["window_s"], soak["duration_s"], 1000.0
    outcomes = []
    for i, w in enumerate(soak["series"]):
        for r in range(w["requests"]):
            outcomes.append({"ended": started + i * window + (r + 0.5) * window / w["requests"],
                             "error": None, "tokens": w["tokens"] // w["requests"]})
    outcomes[-1]["ended"] = started + seconds + 3.0
    windows = soak_windows(outcomes, started, window, seconds, started + seconds + 3.2)
    assert [(w["requests"], w["tokens"]) for w in windows] == [(w["requests"], w["tokens"]) for w in soak["series"]]
    assert windows[-1]["seconds"] == round(window + 3.2, 2) and windows[0]["seconds"] == window
    # a failed request counts as an error and brings no tokens
    outcomes[0]["error"] = "HTTP 503"
    first = soak_windows(outcomes, started, window, seconds, started + seconds)[0]
    assert first["errors"] == 1 and first["tokens"] == soak["series"][0]["tokens"] - outcomes[0]["tokens"]


def test_the_real_drill_passes_and_each_miss_is_named():
    drill = dict(REPORT["drill"])
    assert drill_failures(drill, 180) == []
    late = drill_failures(dict(drill, new_request_503_s=12.5), 180)
    assert late == ["failover drill (ens1f1np1 down on the master): a new request got HTTP 503 after 12.5 s, "
                    "a 503 within 10.0 s required"]
    hung = drill_failures(dict(drill, in_flight_end_s=None, new_request_status=200, recovery_s=None), 180)
    assert hung == ["failover drill (ens1f1np1 down on the master): a new request got HTTP 200 after 3.3 s, "
                    "a 503 within 10.0 s required",
                    "failover drill (ens1f1np1 down on the master): the stream in flight ended after None s, "
                    "within 10.0 s required",
                    "failover drill: the service did not answer within 180 s of ens1f1np1 coming back"]
