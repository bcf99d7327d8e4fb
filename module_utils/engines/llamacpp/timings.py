# -*- coding: utf-8 -*-
"""llama.cpp's timing lines, as an operator pastes them or `twinrail logs
--timings` reads them from the journal: one entry a request, its prefill
(prompt eval) and decode (eval) in tokens, milliseconds and tokens per
second, in every form llama.cpp has printed them:

- llama-server's JSON log lines ({"function":"print_timings", "msg":
  "prompt eval time = ..."}), and their fields where the line carries them;
- "print_timings: prompt eval time = ..." (older servers), and
  llama-cli's "llama_print_timings:" / "llama_perf_context_print:";
- the newer multi-line "slot print_timing: id 0 | task 0 |" block, the
  lines after it unprefixed, and "[pid] time I " prefixes.

The prompt tokens counted are those llama.cpp processed: tokens it took
from its cache are not prefill, and a rate over a single token (a prompt
wholly cached but its last token, or one generated token) is not a
measurement: its rate is None, its tokens and time are kept."""

from __future__ import annotations

import json
import re

# "prompt eval time =     123.45 ms /    42 tokens (    2.94 ms per token,   340.23 tokens per second)"
# "       eval time =    1234.56 ms /   100 runs   (   12.35 ms per token,    81.00 tokens per second)"
_TIME = re.compile(r"(?P<what>prompt eval|(?<!prompt )eval|total) time\s*=\s*(?P<ms>[\d.]+) ms"
                   r"(?:\s*/\s*(?P<n>\d+) (?:tokens|runs))?"
                   r"(?:\s*\(\s*[\d.]+ ms per token,\s*(?P<rate>[\d.]+|inf|nan) tokens per second\))?")
# the prompt's tokens taken from the cache, logged before its timing lines:
# "cached n_tokens = 55, memory_seq_rm [55, end)" (newer servers), "kv cache
# rm [55, end)" and "kv cache rm [p0, end) | ... p0=55" (older; JSON logs
# carry p0 as a field). n_past is not it: it counts the tokens processed too.
_CACHED = re.compile(r"cached n_tokens = (?P<a>\d+)|kv cache rm \[(?P<b>\d+), end\)"
                     r"|kv cache rm \[p0, end\).*?\bp0=(?P<c>\d+)")
# a rate needs at least this many tokens to be a measurement
MIN_TOKENS = 2


def _message(line: str) -> str:
    """The text of a line: a JSON log line's msg, else the line."""
    stripped = line.strip()
    if stripped.startswith("{"):
        try:
            data = json.loads(stripped)
        except ValueError:
            return line
        if isinstance(data, dict):
            return str(data.get("msg") or data.get("MESSAGE") or "")
    return line


def _rate(tokens: int | None, ms: float, said: str | None) -> float | None:
    """llama.cpp's own rate where the line prints one (it counts the
    decode steps, one fewer than the tokens where the first came from the
    prompt), else tokens over time; None over a single token."""
    if tokens is None or tokens < MIN_TOKENS or ms <= 0:
        return None
    if said and said not in ("inf", "nan"):
        return float(said)
    return round(tokens / ms * 1000, 2)


def parse_timings(text: str) -> list[dict]:
    """One dict a request in log order: prompt_tokens (processed),
    prompt_cached (taken from the cache, where the log says), prompt_ms,
    prefill_tps; decode_tokens, decode_ms, decode_tps; total_ms (None
    where the log does not say). A request opens at its prompt eval line
    (an eval line with none before it opens one too)."""
    out: list[dict] = []
    current: dict | None = None
    cached = None
    for line in text.splitlines():
        message = _message(line)
        from_cache = _CACHED.search(message)
        if from_cache:
            cached = int(next(g for g in from_cache.groups() if g is not None))
        said = _TIME.search(message)
        if not said:
            continue
        what, ms = said.group("what"), float(said.group("ms"))
        tokens = int(said.group("n")) if said.group("n") else None
        if what == "prompt eval" or current is None or (what == "eval" and current.get("decode_ms") is not None):
            current = {"prompt_tokens": None, "prompt_cached": cached, "prompt_ms": None, "prefill_tps": None,
                       "decode_tokens": None, "decode_ms": None, "decode_tps": None, "total_ms": None}
            cached = None
            out.append(current)
        if what == "prompt eval":
            current.update(prompt_tokens=tokens, prompt_ms=ms, prefill_tps=_rate(tokens, ms, said.group("rate")))
        elif what == "eval":
            current.update(decode_tokens=tokens, decode_ms=ms, decode_tps=_rate(tokens, ms, said.group("rate")))
        else:
            current["total_ms"] = ms
            current = None
    return out


def summary(requests: list[dict]) -> dict:
    """Over the requests: how many, the prefill and decode rates over all
    the measured requests' time (each request's rate weighted by its
    time), and how many rates were not measurements (a single token)."""
    def rate(rate_key: str, ms_key: str) -> float | None:
        measured = [r for r in requests if r[rate_key] is not None and r[ms_key]]
        ms = sum(r[ms_key] for r in measured)
        return round(sum(r[rate_key] * r[ms_key] for r in measured) / ms, 2) if ms else None

    return {"requests": len(requests),
            "prefill_tps": rate("prefill_tps", "prompt_ms"), "decode_tps": rate("decode_tps", "decode_ms"),
            "prefill_not_measured": sum(1 for r in requests if r["prompt_ms"] is not None and r["prefill_tps"] is None),
            "decode_not_measured": sum(1 for r in requests if r["decode_ms"] is not None and r["decode_tps"] is None)}


def lines(requests: list[dict]) -> list[str]:
    """The requests and their summary in words, as `twinrail logs --timings` prints them."""
    def rate(value, tokens) -> str:
        return f"{value:.1f} tokens/s" if value is not None else (
            "no rate (one token)" if tokens is not None else "n/a")

    out = []
    for n, r in enumerate(requests, 1):
        cached = f" (+{r['prompt_cached']} cached)" if r.get("prompt_cached") else ""
        out.append(f"request {n}: prefill {r['prompt_tokens'] if r['prompt_tokens'] is not None else '?'} tokens{cached} "
                   f"in {r['prompt_ms'] if r['prompt_ms'] is not None else '?'} ms, "
                   f"{rate(r['prefill_tps'], r['prompt_tokens'])}; decode "
                   f"{r['decode_tokens'] if r['decode_tokens'] is not None else '?'} tokens in "
                   f"{r['decode_ms'] if r['decode_ms'] is not None else '?'} ms, {rate(r['decode_tps'], r['decode_tokens'])}")
    s = summary(requests)
    out.append(f"{s['requests']} request(s): prefill {rate(s['prefill_tps'], 0) if s['prefill_tps'] else 'n/a'}, "
               f"decode {rate(s['decode_tps'], 0) if s['decode_tps'] else 'n/a'} (over the measured requests' "
               f"time; {s['prefill_not_measured']} prefill and {s['decode_not_measured']} decode figure(s) over a "
               f"single token left out)")
    return out
