#!/usr/bin/env python3
"""Benchmark (not a test): the acceptance figures of the lab's cluster
against llama-bench on the master alone, measured in the same run.

Baseline: llama-bench (the runtime's own, standalone, one thread like the
lab's llama-server) on the master with the served model: prompt processing
(pp512) and generation (tg128) tokens/s, median of its repetitions.
Then `--runs` times the acceptance stage (`site.yml --tags acceptance`),
which measures through the proxy (TLS, auth, guard) across both nodes:
single-stream decode, 4 concurrent streams, prefill, the failover drill.
Prints the medians and the ratios to the baseline. Needs the lab converged.

    make bench-acceptance        (tools/bench_acceptance.py --runs 3)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MASTER = "twinrail-lab-master"
MODEL = "/srv/twinrail/models/smollm2-135m-instruct/current/SmolLM2-135M-Instruct.Q4_1.gguf"


def llama_bench(repetitions: int, *, container: str = MASTER, model: str = MODEL, threads: int = 1,
                prompt: int = 512, tokens: int = 128, layers: int | None = None) -> dict:
    """llama-bench on a lab node: tokens/s by test, {"pp<prompt>": ..,
    "tg<tokens>": ..} (layers: its -ngl, left to llama-bench when None)."""
    argv = ["docker", "exec", container, "/opt/twinrail/runtime/current/bin/llama-bench", "-m", model,
            "-p", str(prompt), "-n", str(tokens), "-t", str(threads), "-r", str(repetitions), "-o", "json"]
    out = subprocess.run(argv + (["-ngl", str(layers)] if layers is not None else []),
                         capture_output=True, text=True, check=True).stdout
    figures = {}
    for test in json.loads(out):
        kind = "pp" if test["n_prompt"] else "tg"
        figures[f"{kind}{test['n_prompt'] or test['n_gen']}"] = test["avg_ts"]
    return figures


def acceptance() -> dict:
    reports = ROOT / "reports" / "lab"
    before = set(reports.glob("*/acceptance.json"))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(ROOT / "inventory" / "lab"),
                           str(ROOT / "site.yml"), "--tags", "acceptance"], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    new = sorted(set(reports.glob("*/acceptance.json")) - before)
    if proc.returncode != 0 or not new:
        sys.exit(f"acceptance stage failed:\n{proc.stdout[-3000:]}")
    return json.loads(new[-1].read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    base = llama_bench(3)
    print(f"llama-bench, master alone, 1 thread: pp512 {base['pp512']:.1f} tokens/s, tg128 {base['tg128']:.1f} tokens/s")
    runs = []
    for i in range(args.runs):
        report = acceptance()
        perf, drill = report["performance"], report.get("drill") or {}
        runs.append({**perf, **{f"drill_{k}": v for k, v in drill.items() if isinstance(v, (int, float))}})
        print(f"run {i + 1}: single {perf['single_decode_tps']:.1f}, 4 streams {perf['aggregate_decode_tps']:.1f}, "
              f"prefill {perf['prefill_tps']:.1f} tokens/s ({perf['prefill_tokens']} tokens); drill: 503 after "
              f"{drill.get('new_request_503_s')} s, stream ended after {drill.get('in_flight_end_s')} s, back "
              f"{drill.get('recovery_s')} s after the link ({report['context']['run']})")

    def median(key):
        return statistics.median(r[key] for r in runs if r.get(key) is not None)

    single, four, prefill = median("single_decode_tps"), median("aggregate_decode_tps"), median("prefill_tps")
    print(f"median of {args.runs}: single-stream decode {single:.1f} tokens/s = {single / base['tg128']:.2f}x "
          f"llama-bench tg128 alone; 4 streams {four:.1f} = {four / base['tg128']:.2f}x; prefill {prefill:.1f} = "
          f"{prefill / base['pp512']:.2f}x pp512 alone")
    print(f"failover drill (rail1 down on the master), median: new request 503 after "
          f"{median('drill_new_request_503_s'):.2f} s, in-flight stream ended after "
          f"{median('drill_in_flight_end_s'):.2f} s, service back {median('drill_recovery_s'):.2f} s after the link")
    return 0


if __name__ == "__main__":
    sys.exit(main())
