"""The guard's own metrics, in Prometheus's text exposition format (the
nodes' python3 has no client library: the standard library writes it; the
unit tests read it back with ``promtool check metrics`` and
prometheus_client's parser).

What the monitoring stage scrapes from ``GET /twinrail/metrics`` on the
master's loopback: each worker rail's state (up / stopped / gone /
silent) and whether it serves (degraded: a rail left out), the refusals by reason, every node's memory against the
watermarks (the same figures the watermarks use), the requests generating
and queued, and the KV cache held by llama-server's slots (current
llama.cpp has no KV-cache gauge of its own: it is read from ``/slots``).

And what clients see (``Traffic``): every request the guard answers, by
status (2xx, 4xx, 429, 5xx, 503 with its reason), histograms of the time to
the first token of a streamed generation and of a generation's whole time
(queue included, as the client waits), and the tokens generated, read from
the ``timings`` object llama-server ends every answer with.
"""

from __future__ import annotations

import math
import re
import threading

WORKER_STATES = ("up", "stopped", "gone", "silent")
REFUSAL_REASONS = ("worker_lost", "recovering", "memory_soft", "memory_hard", "queue_full")


def worker_state(problem: str | None) -> str:
    """A worker rail's state from the problem the guard holds for it (its
    agent's words, or the guard's own when the agent is silent)."""
    if not problem:
        return "up"
    if "has not answered" in problem:
        return "silent"
    if "is stopped" in problem:
        return "stopped"
    return "gone"  # not running, not listening, in another state


def refusal_reason(status: int, reason: str) -> str | None:
    """The refusal counter a 503/429 with this reason counts in, or None
    (a client that went away is not refused)."""
    if status == 429:
        return "queue_full"
    if reason.startswith("worker unavailable"):
        return "worker_lost"
    if reason.startswith("recovering"):
        return "recovering"
    if reason.startswith("memory above the hard"):
        return "memory_hard"
    if reason.startswith("memory above the soft"):
        return "memory_soft"
    return None


# seconds: the first token of a streamed generation, and a whole generation
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# a 503's reasons: the guard's refusals, then llama-server's own failures
SERVICE_UNAVAILABLE_REASONS = ("worker_lost", "recovering", "memory_soft", "memory_hard", "llama_server")
_PREDICTED = re.compile(rb'"predicted_n"\s*:\s*(\d+)')
# what of an answer's end is kept to read its timings (llama.cpp's final
# /completion object repeats its generation settings: about 2 KiB)
TAIL_BYTES = 8192


def status_code(status: int) -> str:
    """The status label of an answer: 429 and 503 on their own, the rest by
    class (2xx, 4xx, 5xx)."""
    return str(status) if status in (429, 503) else f"{status // 100}xx"


def unavailable_reason(reason: str) -> str:
    """A 503's reason label: the guard's refusal it was, or llama_server
    (llama-server answered 503, or stopped answering mid-way)."""
    kind = refusal_reason(503, reason)
    return kind if kind in SERVICE_UNAVAILABLE_REASONS else "llama_server"


def generated_tokens(tail: bytes) -> int | None:
    """Tokens generated, from the end of llama-server's answer: the last
    ``"predicted_n": N`` of its ``timings`` (every answer, streamed or not,
    chat or raw completion, ends with them); None when absent (an error, an
    answer cut short)."""
    found = _PREDICTED.findall(tail)
    return int(found[-1]) if found else None


class Histogram:
    """A Prometheus histogram: cumulative counts per upper bound, sum, count."""

    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = buckets
        self.counts = [0] * len(buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1
        self.sum += value
        self.count += 1


class Traffic:
    """What the guard's clients saw, for the one model it serves."""

    def __init__(self, model: str):
        self.model = model
        self.lock = threading.Lock()
        self.responses: dict[tuple[str, str], int] = {}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.duration = Histogram(DURATION_BUCKETS)
        self.tokens = 0

    def record(self, status: int, reason: str = "", *, duration: float | None = None,
               ttft: float | None = None, tokens: int | None = None) -> None:
        """One answer: its status (and a 503's reason), a generation's
        seconds, a streamed one's seconds to its first token, its tokens."""
        code = status_code(status)
        why = unavailable_reason(reason) if status == 503 else ""
        with self.lock:
            self.responses[(code, why)] = self.responses.get((code, why), 0) + 1
            if duration is not None:
                self.duration.observe(duration)
            if ttft is not None:
                self.ttft.observe(ttft)
            if tokens:
                self.tokens += tokens

    def families(self, out: "Exposition") -> None:
        with self.lock:
            model = {"model": self.model}
            responses = sorted(self.responses.items())
            out.family("twinrail_guard_responses", "counter",
                       "requests the guard answered, by status: 2xx, 4xx, 429, 5xx, 503 with its reason (the "
                       "guard's refusal, or llama_server: it failed or stopped answering)",
                       [({**model, "code": code, "reason": why}, n) for (code, why), n in responses])
            out.histogram("twinrail_guard_time_to_first_token_seconds",
                          "seconds from a streamed generation's arrival (its wait for a slot included) to its "
                          "first token", [(model, self.ttft)])
            out.histogram("twinrail_guard_request_duration_seconds",
                          "seconds from a generation's arrival (its wait for a slot included) to its last byte",
                          [(model, self.duration)])
            out.family("twinrail_guard_generated_tokens", "counter",
                       "tokens generated for the guard's clients (llama-server's timings)",
                       [(model, self.tokens)])


def kv_cache(slots: list[dict] | None) -> dict | None:
    """Tokens held in the KV cache against its size, from llama-server's
    ``/slots`` (llama.cpp 0.3.36's server): per slot its context size
    (``n_ctx``) and the tokens it holds: ``n_prompt_tokens`` (the prompt;
    after a task, the whole sequence the slot keeps cached for the next
    request with the same prefix) plus ``next_token[0].n_decoded`` while it
    generates. A slot that never ran a task holds nothing. None when
    /slots did not answer."""
    if slots is None:
        return None
    held = capacity = 0
    per_slot = []
    for slot in slots:
        n_ctx = int(slot.get("n_ctx") or 0)
        tokens = int(slot.get("n_prompt_tokens") or 0)
        if slot.get("is_processing"):
            nxt = slot.get("next_token")
            nxt = nxt[0] if isinstance(nxt, list) and nxt else nxt
            if isinstance(nxt, dict):
                tokens += int(nxt.get("n_decoded") or 0)
        tokens = min(tokens, n_ctx) if n_ctx else tokens
        held += tokens
        capacity += n_ctx
        per_slot.append({"id": slot.get("id", len(per_slot)), "tokens": tokens, "n_ctx": n_ctx,
                         "processing": bool(slot.get("is_processing"))})
    return {"tokens": held, "capacity": capacity, "slots": per_slot}


def _escape(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict) -> str:
    """{k="v",...}, or nothing for a sample without labels."""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}" if labels else ""


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    return repr(value) if isinstance(value, float) else str(int(value))


class Exposition:
    """Families in the order they are declared, samples under their family."""

    def __init__(self):
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples) -> None:
        # a counter's samples and its HELP/TYPE lines carry _total (what promtool's lint asks)
        name = f"{name}_total" if kind == "counter" else name
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            self.lines.append(f"{name}{_labels(labels)} {_number(value)}")

    def histogram(self, name: str, help_text: str, samples) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} histogram")
        for labels, hist in samples:
            for bound, count in [*zip(hist.buckets, hist.counts), ("+Inf", hist.count)]:
                le = bound if isinstance(bound, str) else repr(bound)
                self.lines.append(f"{name}_bucket{_labels({**labels, 'le': le})} {count}")
            self.lines.append(f"{name}_sum{_labels(labels)} {_number(float(hist.sum))}")
            self.lines.append(f"{name}_count{_labels(labels)} {hist.count}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render(status: dict, refusals: dict[str, int], kv: dict | None, traffic: Traffic | None = None) -> str:
    """The exposition of the guard's ``status()`` (the same dict
    ``/twinrail/status`` answers), its refusal counters, the KV cache and
    what its clients saw."""
    out = Exposition()
    workers = status["workers"]
    out.family("twinrail_guard_worker_state", "gauge",
               "1 for the state each worker rail is in (its RPC server as the worker's agent sees it; "
               "silent: the agent does not answer)",
               [({"host": w["host"], "address": w["address"], "state": state},
                 worker_state(w.get("problem")) == state)
                for w in workers for state in WORKER_STATES])
    out.family("twinrail_guard_worker_up", "gauge", "1 when the worker rail's RPC server is up",
               [({"host": w["host"], "address": w["address"]}, not w.get("problem")) for w in workers])
    out.family("twinrail_guard_worker_serving", "gauge",
               "1 when llama-server uses the worker rail's RPC server now (0: left out while it is down, "
               "the worker's other rails carry its share)",
               [({"host": w["host"], "address": w["address"], "rail": w.get("rail") or ""}, w.get("serving", True))
                for w in workers])
    out.family("twinrail_guard_degraded", "gauge",
               "1 when the service runs on fewer rails than configured (a rail left out)",
               [({}, bool(status.get("degraded")))])
    out.family("twinrail_guard_available", "gauge",
               "1 when the guard passes new requests to llama-server (every worker up, memory under the "
               "soft watermark)", [({}, bool(status["available"]))])
    out.family("twinrail_guard_engine_stalls", "counter",
               "times the guard took the engine as stalled (no token while requests were in flight and its "
               "loop silent, or its probe failing while idle) and restarted it",
               [({}, status.get("stalls", 0))])
    out.family("twinrail_guard_engine_stalled", "gauge",
               "1 while the engine is taken as stalled, until its probe answers again",
               [({}, bool(status.get("stalled")))])
    out.family("twinrail_guard_refusals", "counter", "requests the guard refused, by reason",
               [({"reason": reason}, refusals.get(reason, 0)) for reason in REFUSAL_REASONS])
    out.family("twinrail_guard_requests_active", "gauge", "generations passed to llama-server now",
               [({}, status["active"])])
    out.family("twinrail_guard_requests_waiting", "gauge", "requests queued for a slot (queue depth)",
               [({}, status["waiting"])])
    if status.get("queue_max") is not None:
        out.family("twinrail_guard_queue_max", "gauge", "requests the queue holds at most (past it 429)",
                   [({}, status["queue_max"])])
    out.family("twinrail_guard_slots", "gauge",
               "generations allowed at once now (1 past the soft watermark)", [({}, status["slots"])])
    memory = status.get("memory") or {}
    hosts = sorted(memory)
    out.family("twinrail_node_memory_used_bytes", "gauge",
               "memory used on the node, the figure the watermarks are shares of (page cache left out)",
               [({"host": h}, memory[h]["used"]) for h in hosts])
    out.family("twinrail_node_memory_limit_bytes", "gauge",
               "the node's memory: its cgroup's limit, or the machine's",
               [({"host": h}, memory[h]["total"]) for h in hosts])
    out.family("twinrail_node_memory_used_ratio", "gauge", "used / limit, 0 to 1",
               [({"host": h}, round(memory[h]["used"] / memory[h]["total"], 4)) for h in hosts
                if memory[h].get("total")])
    out.family("twinrail_guard_memory_watermark_ratio", "gauge",
               "the memory watermarks: soft (new requests refused), hard (queued requests fail)",
               [({"level": "soft"}, status["soft"] / 100.0), ({"level": "hard"}, status["hard"] / 100.0)])
    if kv is not None:
        out.family("twinrail_kv_cache_tokens", "gauge", "tokens held in llama-server's KV cache (from /slots)",
                   [({}, kv["tokens"])])
        out.family("twinrail_kv_cache_capacity_tokens", "gauge", "the KV cache's size in tokens (n_ctx of "
                   "every slot)", [({}, kv["capacity"])])
        out.family("twinrail_kv_cache_usage_ratio", "gauge", "tokens held / capacity, 0 to 1",
                   [({}, round(kv["tokens"] / kv["capacity"], 4) if kv["capacity"] else 0.0)])
        out.family("twinrail_kv_cache_slot_tokens", "gauge", "tokens held per slot",
                   [({"slot": str(s["id"])}, s["tokens"]) for s in kv["slots"]])
    out.family("twinrail_guard_slots_answer", "gauge", "1 when llama-server's /slots answered this scrape",
               [({}, kv is not None)])
    if traffic is not None:
        traffic.families(out)
    return out.text()
