#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Measure the serving cluster through its proxy: the acceptance table."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: acceptance_run
short_description: Run the acceptance measurements against the inference service, through its proxy
description:
  - Functional prompts (chat and completion) with their answers judged
    non-empty, free of garbage and of repetition loops (3-gram repetition),
    and mentioning what a prompt expects.
  - Single-stream decode tokens/s, the aggregate of concurrent streams,
    prefill tokens/s (a prompt with a fresh prefix, so no cache helps), all
    through the proxy (TLS, basic authentication, the guard).
  - A long prompt with the memory of every node sampled during its
    generation (from the status of the guard).
  - A latency ramp, levels of concurrent streaming requests (1, 2, 4, 8 by
    default), each with its time to first token and end-to-end latency at
    p50, p95 and p99, its errors and its aggregate tokens/s.
  - A soak, streams kept busy for a set time, judged in windows; it fails
    on any error, on throughput drifting down between its first and last
    third, and on a node's memory growing over the run.
  - Optionally a failover drill on the master itself, one rail's link set
    down during a stream (the hard case, no TCP reset), the time until a
    new request gets a 503 and the stream in flight ends, the link set up
    again and the time until the service answers.
  - Returns the figures, a timeline (tokens/s and memory) and the list of
    failures against the thresholds; changes nothing (the drill's link is
    set up again whatever happens).
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  url:
    description: The proxy's base URL.
    type: str
    required: true
  user:
    description: Account of the proxy.
    type: str
    required: true
  password:
    description: Its password.
    type: str
    required: true
  validate_certs:
    description: Check the proxy's certificate (off for a self-signed one).
    type: bool
    default: true
  status_url:
    description: The guard's status (memory of every node), on the master's loopback.
    type: str
    required: true
  power_url:
    description: >-
      Prometheus's instant query of the GPUs' summed power draw (the monitoring stage's twinrail_gpu_power_watts),
      sampled with the rest; empty, or no answer: energy per token unknown.
    type: str
    default: ""
  model:
    description: Model name sent in the requests.
    type: str
    required: true
  usage_timings:
    description: >-
      The engine reports no timings of its own (its table's C(usage_timings): vLLM), only the OpenAI usage: the
      rates come from its token counts and the client's clock (time to the first token, then the tokens after it).
    type: bool
    default: false
  prompts:
    description: Functional prompts, each with name, kind (chat or completion), prompt, expect (words) and max_tokens.
    type: list
    elements: dict
    required: true
  decode_tokens:
    description: Tokens asked for in the decode measurements.
    type: int
    default: 128
  concurrency:
    description: Concurrent streams of the aggregate measurement.
    type: int
    default: 4
  prefill_chars:
    description: Characters of the prefill measurement's prompt.
    type: int
    default: 8000
  long_context_chars:
    description: Characters of the long-context prompt.
    type: int
    default: 128000
  sample_interval:
    description: Seconds between samples of the timeline.
    type: float
    default: 0.5
  max_repetition:
    description: Largest share of repeated 3-grams an answer may have.
    type: float
    default: 0.3
  max_garbage:
    description: Largest share of non-text characters an answer may have.
    type: float
    default: 0.02
  thresholds:
    description: single_decode_tps, aggregate_decode_tps, prefill_tps, max_memory_growth_pct (absent or 0 for no gate).
    type: dict
    default: {}
  ramp:
    description: >-
      The latency ramp, with levels (concurrent requests at each level), requests (per level, at least the
      level), tokens (asked for per request) and max_ttft_p95_s (0 for no bound); levels empty for no ramp.
    type: dict
    default: {levels: [1, 2, 4, 8], requests: 16, tokens: 64, max_ttft_p95_s: 0}
  soak:
    description: >-
      The soak, with seconds (0 for none), concurrency, tokens (per request), window (seconds),
      max_drift_pct (the drop of tokens/s allowed between its first and last third),
      max_memory_growth_pct (points of a node's memory) and electricity_price (per kWh: the cost of a million
      tokens; 0 for none).
    type: dict
    default: {seconds: 600, concurrency: 2, tokens: 64, window: 10, max_drift_pct: 20, max_memory_growth_pct: 2,
              electricity_price: 0}
  drill:
    description: Failover drill, with enabled, interface (a rail interface of the master), sla (seconds), recovery_timeout and max_tokens (of the stream it interrupts, 4000 by default).
    type: dict
    default: {enabled: false}
  timeout:
    description: Seconds a single request may take.
    type: int
    default: 900
"""

EXAMPLES = r"""
- name: Measure the service
  acceptance_run:
    host: "{{ inventory_hostname }}"
    url: "https://127.0.0.1:{{ acceptance_proxy_port }}"
    user: operator
    password: "{{ vault_service_password }}"
    validate_certs: false
    status_url: "http://127.0.0.1:{{ acceptance_guard_port }}/twinrail/status"
    model: deepseek-v3-q4
    prompts:
      - {name: geography, kind: chat, prompt: "What is the capital of France?", expect: [Paris], max_tokens: 32}
    thresholds: {single_decode_tps: 75, aggregate_decode_tps: 130, prefill_tps: 2000}
  no_log: true
"""

RETURN = r"""
functional:
  description: Each prompt with its answer, tokens, repetition, garbage share and problems.
  returned: success
  type: list
performance:
  description: single_decode_tps, aggregate_decode_tps, prefill_tps and how they were measured.
  returned: success
  type: dict
long_context:
  description: Prompt size, tokens, memory before, peak and growth per node.
  returned: success
  type: dict
latency:
  description: The ramp's table, a row per level (concurrency, requests, errors, ttft and e2e p50/p95/p99 in seconds, aggregate_tps).
  returned: success
  type: list
soak:
  description: >-
    The soak's figures (requests, errors, tokens/s of its first and last third, drift_pct, memory_growth_pct per
    node), its windows, and energy (joules_per_token, cost_per_million_tokens, the GPUs' mean power_w; null
    figures with unknown saying why where no power was read).
  returned: when the soak ran
  type: dict
drill:
  description: new_request_503_s, in_flight_end_s, recovery_s and the 503's reason.
  returned: when the drill ran
  type: dict
timeline:
  description: Samples of phase, seconds, tokens/s, memory percent per node and the GPUs' power (null where not read).
  returned: success
  type: list
failures:
  description: One sentence per failed check.
  returned: always
  type: list
"""

import statistics
import threading
import time

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.acceptance.checks import judge_answer, ngram_repetition, garbage_share, verdicts
from ansible.module_utils.acceptance.client import Client, Sampler, filler
from ansible.module_utils.acceptance.energy import energy
from ansible.module_utils.acceptance.latency import (level_row, ramp_failures, soak_summary, soak_failures,
                                                     soak_windows, drill_failures)
from ansible.module_utils.acceptance.load import shared, timed, together, until


def functional(client, model, prompts, max_repetition, max_garbage):
    results, failures = [], []
    for item in prompts:
        kind, tokens = item.get("kind", "chat"), int(item.get("max_tokens", 64))
        if kind == "completion":
            status, data = client.post("/completion", {"prompt": item["prompt"], "n_predict": tokens,
                                                      "temperature": 0, "cache_prompt": False})
            answer = data.get("content", "")
            generated = data.get("tokens_predicted", 0)
        else:
            status, data = client.post("/v1/chat/completions", {
                "model": model, "messages": [{"role": "user", "content": item["prompt"]}],
                "max_tokens": tokens, "temperature": 0})
            answer = ((data.get("choices") or [{}])[0].get("message") or {}).get("content", "")
            generated = (data.get("usage") or {}).get("completion_tokens", 0)
        problems = ([f"HTTP {status}: {(data.get('error') or {}).get('message', '')}"] if status != 200 else
                    judge_answer(answer, item.get("expect", []), max_repetition, max_garbage))
        results.append({"name": item["name"], "kind": kind, "prompt": item["prompt"], "answer": answer,
                        "tokens": generated, "repetition": ngram_repetition(answer),
                        "garbage": garbage_share(answer), "problems": problems})
        failures += [f"functional prompt {item['name']!r}: {p} (answer: {answer[:120]!r})" for p in problems]
    return results, failures


def timed_request(client, body, on_token):
    """One streaming request through the proxy, timed by the load engine;
    its tokens are the server's count (timings, else usage)."""
    def send(token):
        _text, last, finished = client.stream(body, token)
        error = None if finished and "error" not in last else str((last.get("error") or {}).get("message", last))[:200]
        return (last.get("timings") or {}).get("predicted_n") or (last.get("usage") or {}).get("completion_tokens") or 0, error

    return timed(send, on_token)


def ramp(client, body, spec, sampler):
    """Each level: `level` clients sharing the level's requests; the
    level's row of the latency table."""
    rows = []
    for level in spec.get("levels") or []:
        level = int(level)
        sampler.phase = f"ramp x{level}"
        outcomes, wall = shared(max(int(spec.get("requests", 16)), level), level,
                                     lambda: timed_request(client, body, sampler.token))
        rows.append(level_row(level, outcomes, wall))
    return rows


def soak(client, body, spec, sampler):
    """Streams kept busy for spec["seconds"]; each request counted in the
    window it ended in; the memory of every node at its start and end
    (the median of the samples of its first and last window)."""
    seconds, window = float(spec["seconds"]), float(spec.get("window", 10))
    concurrency = int(spec.get("concurrency", 2))
    sampler.phase = "soak"
    mark = len(sampler.samples)
    started = time.monotonic()
    outcomes, _wall = until(seconds, concurrency, lambda: timed_request(client, body, sampler.token))
    windows = soak_windows(outcomes, started, window, seconds, time.monotonic())
    samples = sampler.samples[mark:]

    def median_memory(part):
        hosts = sorted({h for s in part for h in s["memory_pct"]})
        return {h: statistics.median([s["memory_pct"][h] for s in part if h in s["memory_pct"]]) for h in hosts}

    first = [s for s in samples if s["t"] - samples[0]["t"] <= window] if samples else []
    last = [s for s in samples if samples[-1]["t"] - s["t"] <= window] if samples else []
    summary = soak_summary(windows, median_memory(first), median_memory(last))
    summary.update(duration_s=seconds, window_s=window, concurrency=concurrency, series=windows,
                   errors_seen=sorted({o["error"] for o in outcomes if o["error"]})[:3])
    summary["energy"] = energy([s.get("power_w") for s in samples], summary["tokens"], summary["seconds"],
                               float(spec.get("electricity_price") or 0))
    return summary


def run(module):
    p = module.params
    client = Client(p["url"], p["user"], p["password"], p["validate_certs"], p["timeout"],
                    usage_timings=p["usage_timings"])
    sampler = Sampler(p["status_url"], p["sample_interval"], p["power_url"])
    sampler.start()
    failures = []
    seed = int(time.time())
    story = {"model": p["model"], "temperature": 0.7, "ignore_eos": True, "max_tokens": p["decode_tokens"],
             "messages": [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]}

    sampler.phase = "functional"
    answers, problems = functional(client, p["model"], p["prompts"], p["max_repetition"], p["max_garbage"])
    failures += problems

    sampler.phase = "single stream"
    perf = {}
    started = time.monotonic()
    text, last, finished = client.stream(story, sampler.token)
    timings = last.get("timings") or {}
    perf["single_decode_tps"] = round(timings.get("predicted_per_second", 0.0), 2)
    perf["single_tokens"] = timings.get("predicted_n")
    perf["single_wall_s"] = round(time.monotonic() - started, 2)
    if not finished:
        failures.append(f"single stream: ended without finishing ({last.get('error', last)})")

    sampler.phase = f"{p['concurrency']} streams"

    def one(_i):
        try:
            return client.stream(story, sampler.token)
        except (OSError, ValueError) as exc:
            return "", {"error": str(exc)}, False

    outcomes, wall = together(p["concurrency"], one)
    tokens = sum((o[1].get("timings") or {}).get("predicted_n", 0) for o in outcomes)
    perf["aggregate_decode_tps"] = round(tokens / wall, 2) if wall else 0.0
    perf["aggregate_tokens"], perf["aggregate_wall_s"] = tokens, round(wall, 2)
    perf["per_stream_decode_tps"] = [round((o[1].get("timings") or {}).get("predicted_per_second", 0.0), 2)
                                     for o in outcomes]
    failures += [f"concurrent stream {i + 1}: ended without finishing ({o[1].get('error', '')})"
                 for i, o in enumerate(outcomes) if not o[2]]

    sampler.phase = "prefill"
    status, data = client.post("/v1/chat/completions", {
        "model": p["model"], "max_tokens": 1, "temperature": 0,
        "messages": [{"role": "user", "content": filler(p["prefill_chars"], seed) + "\nSay OK."}]})
    timings = data.get("timings") or {}
    perf["prefill_tps"] = round(timings.get("prompt_per_second", 0.0), 2)
    perf["prefill_tokens"] = timings.get("prompt_n")
    if status != 200:
        failures.append(f"prefill: HTTP {status}: {(data.get('error') or {}).get('message', '')}")

    sampler.phase = "long context"
    before = sampler.memory()[1]
    mark = len(sampler.samples)
    long_prompt = filler(p["long_context_chars"], seed + 1)
    started = time.monotonic()
    try:
        text, last, finished = client.stream({
            "model": p["model"], "max_tokens": 64, "temperature": 0,
            "messages": [{"role": "user", "content": long_prompt + "\nWhich station reported the most readings?"}]},
            sampler.token)
    except (OSError, ValueError) as exc:
        text, last, finished = "", {"error": str(exc)}, False
    time.sleep(p["sample_interval"] * 2)
    during = sampler.samples[mark:]
    peak = {host: max([s["memory_used"].get(host, 0) for s in during] + [before.get(host, 0)]) for host in before}
    totals = sampler.memory()[2]
    growth = {host: round(100.0 * (peak[host] - before[host]) / totals[host], 2) for host in before if host in totals}
    long_context = {"chars": len(long_prompt), "prompt_tokens": (last.get("timings") or {}).get("prompt_n"),
                    "seconds": round(time.monotonic() - started, 2), "answer": text[:200],
                    "memory_before": before, "memory_peak": peak, "growth_pct": growth}
    if not finished:
        failures.append(f"long context: the generation did not finish ({last.get('error', last)})")
    perf["long_context_memory_growth_pct"] = max(growth.values()) if growth else None

    failures += verdicts(perf, p["thresholds"])

    # short answers of a fixed length (ignore_eos), so every request costs the same
    quick = {"model": p["model"], "temperature": 0.7, "ignore_eos": True, "max_tokens": int(p["ramp"].get("tokens", 64)),
             "messages": [{"role": "user", "content": "Describe a harbor at dawn."}]}
    latency = ramp(client, quick, p["ramp"], sampler)
    failures += ramp_failures(latency, float(p["ramp"].get("max_ttft_p95_s") or 0))

    soaked = None
    if float(p["soak"].get("seconds") or 0) > 0:
        body = dict(quick, max_tokens=int(p["soak"].get("tokens", 64)))
        soaked = soak(client, body, p["soak"], sampler)
        failures += soak_failures(soaked, float(p["soak"].get("max_drift_pct", 20)),
                                  float(p["soak"].get("max_memory_growth_pct", 2)))

    drill = None
    if p["drill"].get("enabled"):
        sampler.phase = "failover drill"
        drill = failover_drill(module, client, story, p["drill"], sampler)
        failures += drill.pop("failures")

    sampler.stop.set()
    sampler.join()
    return {"functional": answers, "performance": perf, "long_context": long_context, "latency": latency,
            "soak": soaked, "drill": drill,
            "timeline": [{k: v for k, v in s.items() if k != "memory_used"} for s in sampler.samples],
            "failures": failures}


def failover_drill(module, client, story, drill, sampler):
    interface, sla = drill["interface"], float(drill.get("sla", 10))
    result = {"interface": interface, "sla_s": sla, "failures": []}
    outcome = {}
    first = threading.Event()

    def streamer():
        def token():
            sampler.token()
            first.set()
        try:
            outcome["result"] = client.stream(dict(story, max_tokens=int(drill.get("max_tokens", 4000))), token,
                                              timeout=300)
        except (OSError, ValueError) as exc:
            outcome["result"] = ("", {"error": str(exc)}, False)
        outcome["ended"] = time.monotonic()

    thread = threading.Thread(target=streamer, daemon=True)
    thread.start()
    if not first.wait(120):
        result["failures"].append("failover drill: the stream to interrupt did not start within 120 s")
        return result
    cut = time.monotonic()
    module.run_command(["ip", "link", "set", "dev", interface, "down"], check_rc=True)
    try:
        status, data = client.post("/v1/chat/completions", {
            "model": story["model"], "max_tokens": 4, "messages": [{"role": "user", "content": "Say yes."}]},
            timeout=60)
        result["new_request_503_s"] = round(time.monotonic() - cut, 2)
        result["new_request_status"] = status
        result["reason"] = (data.get("error") or {}).get("message", "")
        thread.join(sla + 20)
        ended = outcome.get("ended")
        result["in_flight_end_s"] = round(ended - cut, 2) if ended else None
        last = outcome.get("result", ("", {}, False))[1]
        result["in_flight_error"] = (last.get("error") or {}).get("message") if isinstance(last.get("error"), dict) \
            else last.get("error")
    finally:
        back = time.monotonic()
        module.run_command(["ip", "link", "set", "dev", interface, "up"], check_rc=True)
    recovered = None
    while time.monotonic() - back < float(drill.get("recovery_timeout", 180)):
        status, data = client.post("/v1/chat/completions", {
            "model": story["model"], "max_tokens": 4, "messages": [{"role": "user", "content": "Say yes."}]},
            timeout=60)
        if status == 200:
            recovered = time.monotonic() - back
            break
        time.sleep(0.5)
    result["recovery_s"] = round(recovered, 2) if recovered is not None else None
    result["failures"] += drill_failures(result, float(drill.get("recovery_timeout", 180)))
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "required": True},
            "url": {"type": "str", "required": True},
            "user": {"type": "str", "required": True},
            "password": {"type": "str", "required": True, "no_log": True},
            "validate_certs": {"type": "bool", "default": True},
            "status_url": {"type": "str", "required": True},
            "power_url": {"type": "str", "default": ""},
            "model": {"type": "str", "required": True},
            "usage_timings": {"type": "bool", "default": False},
            "prompts": {"type": "list", "elements": "dict", "required": True},
            "decode_tokens": {"type": "int", "default": 128},
            "concurrency": {"type": "int", "default": 4},
            "prefill_chars": {"type": "int", "default": 8000},
            "long_context_chars": {"type": "int", "default": 128000},
            "sample_interval": {"type": "float", "default": 0.5},
            "max_repetition": {"type": "float", "default": 0.3},
            "max_garbage": {"type": "float", "default": 0.02},
            "thresholds": {"type": "dict", "default": {}},
            "ramp": {"type": "dict", "default": {"levels": [1, 2, 4, 8], "requests": 16, "tokens": 64,
                                                 "max_ttft_p95_s": 0}},
            "soak": {"type": "dict", "default": {"seconds": 600, "concurrency": 2, "tokens": 64, "window": 10,
                                                 "max_drift_pct": 20, "max_memory_growth_pct": 2,
                                                 "electricity_price": 0}},
            "drill": {"type": "dict", "default": {"enabled": False}},
            "timeout": {"type": "int", "default": 900},
        },
        supports_check_mode=True,
    )
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, failures=[],
                         msg="acceptance: measurements are not run in check mode")
    try:
        result = run(module)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"acceptance: {module.params['host']}: {module.params['url']}: {exc}",
                         failures=[str(exc)])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
