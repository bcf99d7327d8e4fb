"""`twinrail bench`: a short load through the proxy, as a client sees it
(the openai SDK over HTTPS with an API key): one stream, then N streams,
each for a set time; time to first token and end-to-end latency at
p50/p95/p99, errors and tokens/s per level: the acceptance stage's
figures (module_utils/acceptance_latency.py, the same functions), without
running Ansible."""

from __future__ import annotations

import threading
import time

from ..loader import module_utils


def _latency():
    return module_utils("acceptance_latency")


def one(client, model: str, tokens: int) -> dict:
    """One streaming chat: ttft_s, e2e_s, tokens, error."""
    started = time.monotonic()
    first, count = None, 0
    try:
        stream = client.chat.completions.create(
            model=model, max_tokens=tokens, temperature=0.7, stream=True,
            messages=[{"role": "user", "content": "Describe a harbor at dawn."}])
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                count += 1
                if first is None:
                    first = time.monotonic()
        error = None if count else "no token in the answer"
    except Exception as exc:  # pylint: disable=broad-except  # any failure a client sees is counted, not raised
        error = f"{type(exc).__name__}: {exc}"[:200]
    ended = time.monotonic()
    return {"ttft_s": round(first - started, 3) if first else None, "e2e_s": round(ended - started, 3),
            "tokens": count, "error": error}


def level(client, model: str, streams: int, seconds: float, tokens: int) -> dict:
    """`streams` clients sending one request after another for `seconds`."""
    outcomes, lock = [], threading.Lock()
    deadline = time.monotonic() + seconds

    def worker():
        while time.monotonic() < deadline:
            outcome = one(client, model, tokens)
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=worker) for _ in range(streams)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return _latency().level_row(streams, outcomes, time.monotonic() - started)


def run(url: str, key: str, model: str | None, streams: int, seconds: float, tokens: int,
        verify: bool = True) -> dict:
    import openai  # pylint: disable=import-outside-toplevel

    client = openai.OpenAI(base_url=url.rstrip("/") + "/v1", api_key=key, max_retries=0, timeout=120,
                           http_client=openai.DefaultHttpxClient(verify=verify))
    model = model or client.models.list().data[0].id
    rows = [level(client, model, n, seconds, tokens) for n in sorted({1, streams})]
    return {"url": url, "model": model, "seconds": seconds, "tokens": tokens, "levels": rows,
            "failures": _latency().ramp_failures(rows, 0)}


def render(result: dict) -> str:
    lines = [f"twinrail bench: {result['model']} at {result['url']}, {result['seconds']:g} s per level, "
             f"{result['tokens']} tokens per request",
             f"{'streams':>7} {'requests':>8} {'errors':>6}  {'first token p50/p95/p99 (s)':<28} "
             f"{'end to end p50/p95/p99 (s)':<28} tokens/s"]
    for row in result["levels"]:
        ttft = "/".join(str(row[f"ttft_p{q}_s"]) for q in (50, 95, 99))
        e2e = "/".join(str(row[f"e2e_p{q}_s"]) for q in (50, 95, 99))
        lines.append(f"{row['concurrency']:>7} {row['requests']:>8} {row['errors']:>6}  {ttft:<28} {e2e:<28} "
                     f"{row['aggregate_tps']}")
    lines += [f"FAILED: {f}" for f in result["failures"]]
    return "\n".join(lines)
