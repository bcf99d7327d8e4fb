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
"""

from __future__ import annotations

import math

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
            label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            self.lines.append(f"{name}{{{label_text}}} {_number(value)}" if label_text else f"{name} {_number(value)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render(status: dict, refusals: dict[str, int], kv: dict | None) -> str:
    """The exposition of the guard's ``status()`` (the same dict
    ``/twinrail/status`` answers), its refusal counters and the KV cache."""
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
    return out.text()
