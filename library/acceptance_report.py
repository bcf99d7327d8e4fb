#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Write the acceptance report on the controller: JSON, Markdown and a plot."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: acceptance_report
short_description: Write the acceptance stage's report (acceptance.json, acceptance.md, acceptance.png)
description:
  - Runs on the controller with the results of M(acceptance_run).
  - C(acceptance.json) holds every figure, C(acceptance.md) the table of
    the seed's acceptance checks (measured, required, verdict), the answers
    of the functional prompts and the failover drill; C(acceptance.png)
    plots tokens/s and the memory of every node over the run (matplotlib).
  - Refuses a destination that exists and is not a directory, or cannot be
    written, naming it.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  dest:
    description: Directory of this run's report (created).
    type: path
    required: true
  results:
    description: What acceptance_run returned.
    type: dict
    required: true
  context:
    description: What the report says about the run (cluster, model, thresholds, run id, commit).
    type: dict
    default: {}
  baseline:
    description: >-
      The site's acceptance baseline (a JSON file). When the context's thresholds set no floor (all 0), a run
      that passes with no baseline kept makes its figures the baseline, and a later run fails on a figure
      more than I(baseline_max_drop_pct) below it. Unset: no baseline.
    type: path
  baseline_max_drop_pct:
    description: How far below the baseline a figure may fall, in percent.
    type: float
    default: 20
"""

EXAMPLES = r"""
- name: Write the report
  acceptance_report:
    host: localhost
    dest: "reports/{{ run_id }}"
    results: "{{ measured }}"
    context: {run: "{{ run_id }}", model: "{{ twinrail_model.name }}"}
  delegate_to: localhost
"""

RETURN = r"""
files:
  description: The paths written.
  returned: success
  type: list
baseline_failures:
  description: The figures more than the bound below the site's baseline (empty when none, or floors are set).
  returned: success
  type: list
notice:
  description: What a first site reads when its figures became its baseline (empty otherwise).
  returned: success
  type: str
"""

import json
import os

from ansible.module_utils.acceptance.checks import baseline_drops, baseline_notice, floors_set
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.acceptance.energy import sentence


def markdown(results: dict, context: dict) -> str:
    perf = results.get("performance", {})
    thresholds = context.get("thresholds", {})
    failures = results.get("failures", [])
    lines = [f"# Acceptance: {context.get('model', '')} on {', '.join(context.get('nodes', []))}", "",
             f"Run `{context.get('run', '')}`, twinrail {context.get('commit', 'unknown')}: "
             f"**{'PASSED' if not failures else 'FAILED'}**", "",
             "| check | measured | required |", "|---|---|---|"]
    rows = [("single-stream decode (tokens/s)", perf.get("single_decode_tps"), thresholds.get("single_decode_tps")),
            (f"{len(perf.get('per_stream_decode_tps', []))} concurrent streams, aggregate decode (tokens/s)",
             perf.get("aggregate_decode_tps"), thresholds.get("aggregate_decode_tps")),
            (f"prefill, {perf.get('prefill_tokens')} tokens (tokens/s)", perf.get("prefill_tps"),
             thresholds.get("prefill_tps")),
            ("long context: memory growth (points of the node's memory)",
             perf.get("long_context_memory_growth_pct"), thresholds.get("max_memory_growth_pct"))]
    for name, value, required in rows:
        lines.append(f"| {name} | {value} | {required if required else '-'} |")
    latency = results.get("latency") or []
    if latency:
        lines += ["", "## Latency by concurrency", "",
                  "| concurrent | requests | errors | first token p50 / p95 / p99 (s) | end to end p50 / p95 / p99 (s) "
                  "| aggregate (tokens/s) |", "|---|---|---|---|---|---|"]
        for row in latency:
            ttft = " / ".join(str(row.get(f"ttft_p{q}_s")) for q in (50, 95, 99))
            e2e = " / ".join(str(row.get(f"e2e_p{q}_s")) for q in (50, 95, 99))
            lines.append(f"| {row['concurrency']} | {row['requests']} | {row['errors']} | {ttft} | {e2e} "
                         f"| {row['aggregate_tps']} |")
    soak = results.get("soak")
    if soak:
        lines += ["", f"## Soak ({soak.get('duration_s', 0):g} s, {soak.get('concurrency')} streams, "
                      f"{soak.get('window_s', 0):g} s windows)", "",
                  f"- {soak.get('requests')} requests, {soak.get('errors')} failed",
                  f"- tokens/s: {soak.get('first_third_tps')} in the first third, {soak.get('last_third_tps')} in "
                  f"the last ({soak.get('drift_pct')} %)",
                  f"- memory growth over the run (points): {soak.get('memory_growth_pct')}",
                  f"- {sentence(soak.get('energy'))}"]
    drill = results.get("drill")
    if drill:
        lines += ["", f"## Failover drill ({drill.get('interface')} down on the master, SLA {drill.get('sla_s')} s)", "",
                  f"- new request: HTTP {drill.get('new_request_status')} after {drill.get('new_request_503_s')} s: "
                  f"{drill.get('reason', '')}",
                  f"- stream in flight ended after {drill.get('in_flight_end_s')} s: {drill.get('in_flight_error')}",
                  f"- service answering again {drill.get('recovery_s')} s after the link came back"]
    lines += ["", "## Functional prompts", "", "| prompt | answer | tokens | 3-gram repetition | verdict |",
              "|---|---|---|---|---|"]
    for item in results.get("functional", []):
        answer = " ".join(item["answer"].split())[:160].replace("|", "\\|")
        verdict = "; ".join(item["problems"]) or "ok"
        lines.append(f"| {item['name']} ({item['kind']}) | {answer} | {item['tokens']} | {item['repetition']} | {verdict} |")
    long_context = results.get("long_context", {})
    lines += ["", "## Long context", "",
              f"{long_context.get('chars')} characters ({long_context.get('prompt_tokens')} tokens) in "
              f"{long_context.get('seconds')} s; memory growth per node (points): {long_context.get('growth_pct')}",
              "", "![tokens/s and memory over the run](acceptance.png)", ""]
    if failures:
        lines += ["## Failures", ""] + [f"- {f}" for f in failures] + [""]
    return "\n".join(lines)


def plot(results: dict, path: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    timeline = results.get("timeline", [])
    latency = results.get("latency") or []
    if latency:
        figure, (top, bottom, ramp) = plt.subplots(3, 1, figsize=(10, 9), gridspec_kw={"height_ratios": [2, 2, 2]})
        bottom.sharex(top)
        levels = [row["concurrency"] for row in latency]
        for key, label in (("ttft_p50_s", "first token p50"), ("ttft_p95_s", "first token p95"),
                           ("e2e_p50_s", "end to end p50"), ("e2e_p95_s", "end to end p95")):
            ramp.plot(levels, [row.get(key) for row in latency], marker="o", label=label)
        ramp.set_xscale("log", base=2)
        ramp.set_xticks(levels, [str(level) for level in levels])
        ramp.set_xlabel("concurrent requests (latency ramp)")
        ramp.set_ylabel("seconds")
        ramp.legend(loc="upper left", fontsize=8)
    else:
        figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    times = [s["t"] for s in timeline]
    top.plot(times, [s["tokens_per_s"] for s in timeline], color="tab:blue")
    top.set_ylabel("tokens/s (all streams)")
    hosts = sorted({h for s in timeline for h in s.get("memory_pct", {})})
    for host in hosts:
        bottom.plot(times, [s.get("memory_pct", {}).get(host) for s in timeline], label=host)
    bottom.set_ylabel("memory used (%)")
    bottom.set_xlabel("seconds")
    if hosts:
        bottom.legend(loc="upper left")
    # the phases, as bands
    start = None
    for i, sample in enumerate(timeline + [{"phase": None, "t": times[-1] if times else 0}]):
        if start is None or sample["phase"] != timeline[start]["phase"]:
            if start is not None:
                top.annotate(timeline[start]["phase"], (timeline[start]["t"], 0), fontsize=7, rotation=90,
                             va="bottom")
                for axis in (top, bottom):
                    axis.axvline(timeline[start]["t"], color="grey", linewidth=0.5)
            start = i if i < len(timeline) else None
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main():
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "results": {"type": "dict", "required": True},
            "context": {"type": "dict", "default": {}},
            "baseline": {"type": "path"},
            "baseline_max_drop_pct": {"type": "float", "default": 20},
        },
        supports_check_mode=True,
    )
    dest = module.params["dest"]
    if os.path.exists(dest) and not os.path.isdir(dest):
        module.fail_json(msg=f"acceptance: {module.params['host']}: report directory {dest} exists and is not a directory")
    if module.check_mode:
        module.exit_json(changed=False, files=[])
    results, context = dict(module.params["results"]), module.params["context"]
    drops, notice, keep = judge_baseline(module, results, context)
    results["failures"] = list(results.get("failures") or []) + drops
    files = [os.path.join(dest, name) for name in ("acceptance.json", "acceptance.md", "acceptance.png")]
    try:
        os.makedirs(dest, exist_ok=True)
        with open(files[0], "w", encoding="utf-8") as handle:
            json.dump({"context": context, **results}, handle, indent=2)
        with open(files[1], "w", encoding="utf-8") as handle:
            handle.write(markdown(results, context))
        plot(results, files[2])
    except OSError as exc:
        module.fail_json(msg=f"acceptance: {module.params['host']}: cannot write the report in {dest}: {exc}")
    except ImportError as exc:
        module.fail_json(msg=f"acceptance: {module.params['host']}: the plot needs matplotlib on the controller "
                             f"(requirements.txt): {exc}")
    if keep:
        try:
            with open(module.params["baseline"], "w", encoding="utf-8") as handle:
                json.dump(keep, handle, indent=2)
        except OSError as exc:
            module.fail_json(msg=f"acceptance: {module.params['host']}: cannot keep the baseline: {exc}")
        files.append(module.params["baseline"])
    module.exit_json(changed=True, files=files, baseline_failures=drops, notice=notice)


def judge_baseline(module, results: dict, context: dict) -> tuple[list, str, dict | None]:
    """(drops below the kept baseline, the first site's notice, the
    baseline to keep) when the site sets no floors; nothing otherwise."""
    path = module.params["baseline"]
    if not path or floors_set(context.get("thresholds") or {}):
        return [], "", None
    measured = results.get("performance") or {}
    bound = module.params["baseline_max_drop_pct"]
    if os.path.exists(path):
        try:
            with open(path, encoding="utf-8") as handle:
                kept = json.load(handle)
        except (OSError, ValueError) as exc:
            module.fail_json(msg=f"acceptance: {module.params['host']}: the baseline {path} cannot be read: {exc}")
        return baseline_drops(measured, kept, bound), "", None
    if results.get("failures"):
        return [], "", None  # a failed run is no baseline
    figures = {key: measured.get(key) for key in ("single_decode_tps", "aggregate_decode_tps", "prefill_tps")}
    return [], baseline_notice(figures, path, bound), {"run": context.get("run"), "figures": figures}


if __name__ == "__main__":
    main()
