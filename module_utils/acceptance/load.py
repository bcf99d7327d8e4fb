# -*- coding: utf-8 -*-
"""The load engine: concurrent clients sending streaming requests, each
request timed as a client sees it.

Shared by the acceptance stage (the acceptance_run module on the master,
urllib through the proxy) and `twinrail bench` (the openai SDK on the
controller). Each brings its own way of sending one request, a
``send(on_token)`` that calls ``on_token()`` per content token and returns
``(tokens, error)``; this module times it and runs many of them at once.
Standard library only (it runs on the nodes with their python3).

An outcome is the dict acceptance_latency reads: ttft_s, e2e_s, tokens,
error, and ended (the monotonic time it ended, for the soak's windows).
"""

from __future__ import annotations

import threading
import time


def timed(send, on_token=None, errors=(OSError, ValueError)) -> dict:
    """One request through ``send``: its time to the first token, its
    end-to-end time, its tokens (those ``send`` returns, else the tokens it
    saw) and its error (``send``'s, or the exception among ``errors`` it
    raised, named by its type)."""
    started = time.monotonic()
    seen = []

    def token():
        seen.append(time.monotonic())
        if on_token:
            on_token()

    try:
        tokens, error = send(token)
    except errors as exc:
        tokens, error = 0, f"{type(exc).__name__}: {exc}"[:200]
    ended = time.monotonic()
    return {"ttft_s": round(seen[0] - started, 3) if seen else None, "e2e_s": round(ended - started, 3),
            "tokens": int(len(seen) if tokens is None else tokens), "error": error, "ended": ended}


def together(count: int, job) -> tuple[list, float]:
    """``job(i)`` for i in range(count), all at once, each in its thread:
    their results in order and the wall time from the first start to the
    last end."""
    results = [None] * count

    def one(i):
        results[i] = job(i)

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(count)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, time.monotonic() - started


def until(seconds: float, streams: int, request) -> tuple[list[dict], float]:
    """``streams`` clients, each sending ``request()`` after the last one
    ended until ``seconds`` have passed (the last ones in flight finish):
    every outcome and the wall time."""
    deadline = time.monotonic() + seconds

    def client(_i):
        outcomes = []
        while time.monotonic() < deadline:
            outcomes.append(request())
        return outcomes

    per_client, wall = together(streams, client)
    return [o for outcomes in per_client for o in outcomes], wall


def shared(total: int, streams: int, request) -> tuple[list[dict], float]:
    """``streams`` clients sharing ``total`` requests (each takes the next
    one when its last ended): every outcome and the wall time."""
    lock, left = threading.Lock(), [total]

    def client(_i):
        outcomes = []
        while True:
            with lock:
                if left[0] <= 0:
                    return outcomes
                left[0] -= 1
            outcomes.append(request())

    per_client, wall = together(streams, client)
    return [o for outcomes in per_client for o in outcomes], wall
