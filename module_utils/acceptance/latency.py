# -*- coding: utf-8 -*-
"""The acceptance stage's latency figures and soak verdict.

Seeds 000, 002 and 004 ask for the first-token latency, a ramp of
concurrency with latency and throughput at each level, and a long-run
stability check. The acceptance_run module measures; these pure functions
(no I/O) turn what it saw into the report's table and the gate's sentences,
and are unit-tested on the samples of a real lab run.

A request's outcome is a dict: ttft_s (seconds to the first content token,
None when none came), e2e_s (seconds to the end of the stream), tokens
(completion tokens), error (None, or why it failed).
"""

from __future__ import annotations

import math

QUANTILES = (50, 95, 99)


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile by linear interpolation between the closest ranks
    (numpy's default, "linear"); None for no values."""
    data = sorted(v for v in values if v is not None)
    if not data:
        return None
    if len(data) == 1:
        return round(data[0], 3)
    rank = (len(data) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    value = data[low] + (data[high] - data[low]) * (rank - low)
    return round(value, 3)


def level_row(level: int, outcomes: list[dict], wall_s: float) -> dict:
    """One row of the latency table: the level, its requests and errors,
    TTFT and end-to-end latency at p50/p95/p99 (of the requests that
    succeeded), and the level's aggregate decode rate (tokens / wall)."""
    good = [o for o in outcomes if not o.get("error")]
    row = {"concurrency": level, "requests": len(outcomes), "errors": len(outcomes) - len(good),
           "tokens": sum(int(o.get("tokens") or 0) for o in good), "wall_s": round(wall_s, 2)}
    for q in QUANTILES:
        row[f"ttft_p{q}_s"] = percentile([o.get("ttft_s") for o in good], q)
        row[f"e2e_p{q}_s"] = percentile([o.get("e2e_s") for o in good], q)
    row["aggregate_tps"] = round(row["tokens"] / wall_s, 2) if wall_s > 0 else 0.0
    row["error_samples"] = sorted({str(o["error"])[:160] for o in outcomes if o.get("error")})[:3]
    # every request, for the distribution (seed 000)
    row["samples"] = [{key: o.get(key) for key in ("ttft_s", "e2e_s", "tokens", "error")} for o in outcomes]
    return row


def ramp_failures(rows: list[dict], max_ttft_p95_s: float | None) -> list[str]:
    """A level with any failed request fails; so does a p95 first-token
    latency above the site's bound (absent or 0: no bound)."""
    failures = []
    for row in rows:
        if row["errors"]:
            failures.append(f"latency ramp: {row['errors']} of {row['requests']} requests failed at concurrency "
                            f"{row['concurrency']} ({'; '.join(row['error_samples'])})")
        p95 = row.get("ttft_p95_s")
        if max_ttft_p95_s and p95 is not None and p95 > max_ttft_p95_s:
            failures.append(f"latency ramp: first token after {p95:.2f} s at p95 with {row['concurrency']} concurrent "
                            f"requests, at most {max_ttft_p95_s} s allowed")
    return failures


def soak_windows(outcomes: list[dict], started: float, window: float, seconds: float, now: float) -> list[dict]:
    """The soak's windows: each request counted in the window it ended in
    (by its ``ended`` time since ``started``); one that ended after the
    deadline (the last ones in flight) counts in the last window, whose
    length runs to ``now``."""
    count = max(1, int(seconds // window))
    windows = [{"t_s": round((i + 1) * window, 1), "requests": 0, "errors": 0, "tokens": 0, "seconds": window}
               for i in range(count)]
    for outcome in outcomes:
        index = min(max(int((outcome["ended"] - started) // window), 0), count - 1)
        windows[index]["requests"] += 1
        windows[index]["errors"] += 1 if outcome["error"] else 0
        windows[index]["tokens"] += 0 if outcome["error"] else outcome["tokens"]
    windows[-1]["seconds"] = round(max(window, now - started - window * (count - 1)), 2)
    return windows


def soak_summary(windows: list[dict], started_memory: dict, ended_memory: dict) -> dict:
    """The soak's figures from its windows (each: t_s at its end, requests,
    errors, tokens, seconds) and every node's memory percent at its start
    and end: requests, errors, tokens/s of the first and last third of the
    windows, their drift in percent (negative: slower at the end) and each
    node's memory growth in points."""
    done = [w for w in windows if w.get("seconds", 0) > 0]
    third = max(1, len(done) // 3)

    def rate(part):
        seconds = sum(w["seconds"] for w in part)
        return round(sum(w["tokens"] for w in part) / seconds, 2) if seconds else 0.0

    first, last = rate(done[:third]), rate(done[-third:])
    return {
        "windows": len(done),
        "seconds": round(sum(w["seconds"] for w in done), 1),
        "requests": sum(w["requests"] for w in done),
        "errors": sum(w["errors"] for w in done),
        "tokens": sum(w["tokens"] for w in done),
        "first_third_tps": first,
        "last_third_tps": last,
        "drift_pct": round(100.0 * (last - first) / first, 1) if first else None,
        "memory_growth_pct": {host: round(ended_memory[host] - started_memory[host], 2)
                              for host in sorted(started_memory) if host in ended_memory},
    }


def soak_failures(summary: dict, max_drift_pct: float, max_memory_growth_pct: float) -> list[str]:
    """The soak fails on any error, on throughput that drifted down by more
    than max_drift_pct between its first and last third, and on a node whose
    memory grew by more than max_memory_growth_pct points over the run."""
    failures = []
    if summary["windows"] < 3:
        failures.append(f"soak: {summary['windows']} windows measured, at least 3 needed to judge a drift "
                        "(a longer soak or a shorter window)")
    if summary["errors"]:
        failures.append(f"soak: {summary['errors']} of {summary['requests']} requests failed over "
                        f"{summary['seconds']} s")
    drift = summary.get("drift_pct")
    if drift is not None and drift < -abs(max_drift_pct):
        failures.append(f"soak: throughput drifted from {summary['first_third_tps']} to {summary['last_third_tps']} "
                        f"tokens/s ({drift:.1f} %) between its first and last third, at most "
                        f"-{abs(max_drift_pct)} % allowed")
    for host, growth in summary["memory_growth_pct"].items():
        if growth > max_memory_growth_pct:
            failures.append(f"soak: {host}: memory grew {growth:.2f} points of the node's memory over "
                            f"{summary['seconds']} s, at most {max_memory_growth_pct} allowed")
    return failures


def drill_failures(result: dict, recovery_timeout: float) -> list[str]:
    """The failover drill's verdict from what it measured (interface, sla_s,
    new_request_status and new_request_503_s, in_flight_end_s, recovery_s):
    a new request must get a 503 and the stream in flight must end, both
    within the SLA, and the service must answer again once the link is up."""
    where, sla = f"failover drill ({result['interface']} down on the master)", result["sla_s"]
    failures = []
    status, after = result.get("new_request_status"), result.get("new_request_503_s")
    if status != 503 or after is None or after > sla:
        failures.append(f"{where}: a new request got HTTP {status} after {after} s, a 503 within {sla} s required")
    ended = result.get("in_flight_end_s")
    if ended is None or ended > sla:
        failures.append(f"{where}: the stream in flight ended after {ended} s, within {sla} s required")
    if result.get("recovery_s") is None:
        failures.append(f"failover drill: the service did not answer within {recovery_timeout:g} s of "
                        f"{result['interface']} coming back")
    return failures
