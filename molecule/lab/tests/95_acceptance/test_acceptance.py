"""The whole site on the lab, read from the controller: the acceptance
stage's report of this converge (figures, answers, the failover drill, the
plot), a threshold the lab cannot meet failing the gate with the figures in
its message and its report, and bad input refused before any measurement."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
REPORTS = PROJECT / "reports" / "lab"


def reports() -> list[Path]:
    return sorted(p for p in REPORTS.glob("*/acceptance.json")) if REPORTS.exists() else []


def site(*extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    return subprocess.run(["ansible-playbook", "-i", str(PROJECT / "inventory" / "lab"),
                           str(PROJECT / "site.yml"), "--tags", "acceptance", *extra],
                          cwd=PROJECT, env=env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def report() -> dict:
    found = reports()
    assert found, f"no acceptance report under {REPORTS}"
    return json.loads(found[-1].read_text())


def test_the_report_passed_with_every_figure(report):
    assert report["failures"] == []
    perf = report["performance"]
    floors = report["context"]["thresholds"]
    assert perf["single_decode_tps"] >= float(floors["single_decode_tps"]) > 0
    assert perf["aggregate_decode_tps"] >= float(floors["aggregate_decode_tps"]) > 0
    assert perf["prefill_tps"] >= float(floors["prefill_tps"]) > 0 and perf["prefill_tokens"] > 500
    assert len(perf["per_stream_decode_tps"]) == 4 and all(t > 0 for t in perf["per_stream_decode_tps"])
    print(f"acceptance: decode {perf['single_decode_tps']} tokens/s single, {perf['aggregate_decode_tps']} "
          f"aggregate of 4; prefill {perf['prefill_tps']} tokens/s ({perf['prefill_tokens']} tokens)")


def test_every_prompt_was_answered_and_judged(report):
    names = [item["name"] for item in report["functional"]]
    assert names == ["geography", "arithmetic", "science", "programming", "writing", "completion"]
    for item in report["functional"]:
        assert item["answer"].strip() and item["problems"] == [] and item["repetition"] <= 0.3, item
    assert "Paris" in report["functional"][0]["answer"]


def test_the_long_context_was_sampled_on_both_nodes(report):
    long_context = report["long_context"]
    assert long_context["chars"] == 8000 and long_context["prompt_tokens"] > 1500
    assert set(long_context["growth_pct"]) == {"lab-master", "lab-worker1"}
    samples = [s for s in report["timeline"] if s["phase"] == "long context"]
    assert len(samples) >= 5 and all(set(s["memory_pct"]) == {"lab-master", "lab-worker1"} for s in samples)


def test_the_failover_drill_met_the_seeds_ten_seconds(report):
    drill = report["drill"]
    assert drill["new_request_status"] == 503 and "lab-worker1" in drill["reason"]
    assert drill["new_request_503_s"] < 10 and drill["in_flight_end_s"] < 10
    assert drill["recovery_s"] is not None
    print(f"acceptance drill: 503 after {drill['new_request_503_s']} s, stream ended after "
          f"{drill['in_flight_end_s']} s, back {drill['recovery_s']} s after the link")


def test_the_latency_ramp_and_the_soak(report):
    """Seeds 000/002/004: first-token and end-to-end latency at p50/p95/p99
    for 1, 2, 4 and 8 concurrent requests (the lab's 4 slots: at 8 half of
    them queue), every request answered; a 30 s soak without an error,
    throughput steady and memory flat."""
    rows = report["latency"]
    assert [r["concurrency"] for r in rows] == [1, 2, 4, 8]
    for row in rows:
        assert row["errors"] == 0 and row["requests"] == 8 and len(row["samples"]) == 8, row
        assert 0 < row["ttft_p50_s"] <= row["ttft_p95_s"] <= row["ttft_p99_s"] <= row["e2e_p99_s"], row
        assert row["e2e_p50_s"] <= row["e2e_p95_s"] <= row["e2e_p99_s"] and row["aggregate_tps"] > 0, row
    # past the 4 slots a request waits for one: its first token comes later
    assert rows[3]["ttft_p95_s"] > rows[0]["ttft_p95_s"]
    soak = report["soak"]
    assert soak["windows"] == 3 and soak["errors"] == 0 and soak["requests"] >= 6, soak
    # the lab's bound (inventory/lab: its shared cores make throughput noisy)
    assert soak["drift_pct"] >= -60 and set(soak["memory_growth_pct"]) == {"lab-master", "lab-worker1"}
    assert all(g <= 4 for g in soak["memory_growth_pct"].values()), soak["memory_growth_pct"]  # the lab's bound
    assert any(s["phase"] == "soak" for s in report["timeline"])
    markdown = (REPORTS / report["context"]["run"] / "acceptance.md").read_text()
    assert "## Latency by concurrency" in markdown and "| 8 | 8 | 0 | " in markdown
    assert "## Soak (30 s, 2 streams, 10 s windows)" in markdown
    # the lab's CPU nodes read no GPU power: energy per token unknown, with why, never a zero
    assert soak["energy"]["joules_per_token"] is None and soak["energy"]["power_w"] is None, soak["energy"]
    assert "- energy per token: unknown: no GPU power was read during the soak" in markdown
    print("acceptance ramp: " + "; ".join(f"x{r['concurrency']} first token p50 {r['ttft_p50_s']} s p95 "
                                          f"{r['ttft_p95_s']} s, {r['aggregate_tps']} tokens/s" for r in rows)
          + f"; soak {soak['requests']} requests, {soak['first_third_tps']} -> {soak['last_third_tps']} tokens/s")


def test_the_markdown_and_the_plot(report):
    run = REPORTS / report["context"]["run"]
    markdown = (run / "acceptance.md").read_text()
    assert "**PASSED**" in markdown and "| single-stream decode (tokens/s) |" in markdown
    png = (run / "acceptance.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_a_threshold_the_lab_cannot_meet_fails_the_gate_with_the_figures(report):
    before = reports()
    proc = site("-e", "acceptance_min_single_decode_tps=100000", "-e", "acceptance_failover_drill=false",
                "-e", "acceptance_long_context_chars=2000", "-e", "acceptance_soak_seconds=0",
                "-e", '{"acceptance_ramp_levels": [1]}')
    assert proc.returncode != 0
    assert "acceptance: lab-master: 1 check(s) failed: single-stream decode:" in proc.stdout
    assert "tokens/s measured, 100000.0 required" in proc.stdout
    after = reports()
    assert len(after) == len(before) + 1  # the report is written whatever the verdict
    failed = json.loads(after[-1].read_text())
    assert failed["failures"][0].startswith("single-stream decode:")
    assert "**FAILED**" in (after[-1].parent / "acceptance.md").read_text()


def test_bad_prompts_are_refused_before_any_measurement(report):
    before = reports()
    proc = site("-e", json.dumps({"acceptance_prompts": [{"name": "x", "kind": "poem", "prompt": "y"}]}))
    assert proc.returncode != 0
    assert "acceptance: lab-master: acceptance_prompts: expected a list of {name, kind: chat|completion" in proc.stdout
    assert reports() == before
