# -*- coding: utf-8 -*-
"""The acceptance stage's client of the serving cluster, on the master: a
urllib client of the proxy (TLS, basic authentication; server-sent events
read as they come), the sampler of the guard's status (tokens/s and every
node's memory while a phase runs), and varied filler text for prompts no
cache can help. Standard library only (it runs with the node's python3).
The load engine that drives it is acceptance_load."""

from __future__ import annotations

import base64
import json
import random
import ssl
import threading
import time
import urllib.error
import urllib.request

WORDS = ("amber", "basalt", "cedar", "delta", "ember", "fjord", "granite", "harbor", "iris", "juniper",
         "kelp", "lagoon", "meadow", "nickel", "orchid", "pylon", "quartz", "river", "saffron", "tundra")


def filler(chars: int, seed: int) -> str:
    """Varied, readable text of about ``chars`` characters (a fresh seed: no prompt cache helps)."""
    rng = random.Random(seed)
    parts, size, i = [], 0, 0
    while size < chars:
        a, b, c = rng.sample(WORDS, 3)
        line = f"Entry {seed % 997}-{i}: the {a} station reported {rng.randint(2, 9999)} readings near the {b} and the {c}. "
        parts.append(line)
        size += len(line)
        i += 1
    return "".join(parts)[:chars]


def client_timings(usage: dict, started: float, first: float | None, ended: float) -> dict:
    """llama-server's `timings` for an engine that gives only the OpenAI
    usage (vLLM): the token counts are the server's, the rates the client's
    clock (prompt: until the first token; decode: the tokens after it)."""
    prompt_n, predicted_n = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    first = ended if first is None else first
    return {"prompt_n": prompt_n, "predicted_n": predicted_n,
            "prompt_per_second": prompt_n / (first - started) if first > started else 0.0,
            "predicted_per_second": (predicted_n - 1) / (ended - first) if predicted_n > 1 and ended > first else 0.0,
            "source": "usage and the client's clock"}


class Client:
    def __init__(self, url, user, password, validate_certs, timeout, usage_timings=False):
        """usage_timings: the server gives no `timings` (vLLM): ask for the
        usage in streams and derive them (client_timings)."""
        self.usage_timings = usage_timings
        self.url = url.rstrip("/")
        self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.context = ssl.create_default_context()
        if not validate_certs:
            self.context.check_hostname = False
            self.context.verify_mode = ssl.CERT_NONE
        self.timeout = timeout

    def open(self, path, body, timeout=None):
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json", "Authorization": self.auth})
        return urllib.request.urlopen(request, timeout=timeout or self.timeout, context=self.context)

    def post(self, path, body, timeout=None):
        """(status, json) whatever the status."""
        started = time.monotonic()
        try:
            with self.open(path, body, timeout) as response:
                data = json.loads(response.read())
                if self.usage_timings and "timings" not in data and data.get("usage"):
                    data["timings"] = client_timings(data["usage"], started, None, time.monotonic())
                return response.status, data
        except urllib.error.HTTPError as exc:
            data = exc.read()
            try:
                return exc.code, json.loads(data)
            except ValueError:
                return exc.code, {"error": {"message": data.decode(errors="replace")[:300]}}

    def stream(self, body, on_token, timeout=None):
        """Stream a chat completion; on_token() per content chunk. Returns
        (text, last event, finished)."""
        text, last, finished = [], {}, False
        started, first = time.monotonic(), None
        if self.usage_timings:
            body = dict(body, stream_options={"include_usage": True})
        with self.open("/v1/chat/completions", dict(body, stream=True), timeout) as response:
            for raw in response:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    finished = True
                    continue
                event = json.loads(line[6:])
                last = event
                if "error" in event:
                    break
                choice = (event.get("choices") or [{}])[0]
                content = (choice.get("delta") or {}).get("content")
                if content:
                    first = first or time.monotonic()
                    text.append(content)
                    on_token()
                if choice.get("finish_reason"):
                    finished = True
        if self.usage_timings and "timings" not in last and last.get("usage"):
            last = dict(last, timings=client_timings(last["usage"], started, first, time.monotonic()))
        return "".join(text), last, finished


class Sampler(threading.Thread):
    """Tokens/s, the memory of every node and the GPUs' power, every
    interval, while a phase runs."""

    def __init__(self, status_url, interval, power_url=""):
        super().__init__(daemon=True)
        self.status_url, self.interval, self.power_url = status_url, interval, power_url
        self.tokens = 0
        self.lock = threading.Lock()
        self.samples = []
        self.phase = "idle"
        self.stop = threading.Event()
        self.started = time.monotonic()

    def token(self):
        with self.lock:
            self.tokens += 1

    def memory(self):
        """Every node's memory from the guard: percent, used and total bytes per node."""
        try:
            with urllib.request.urlopen(self.status_url, timeout=2) as response:
                nodes = json.loads(response.read()).get("memory", {})
        except (OSError, ValueError):
            nodes = {}
        return tuple({host: mem[key] for host, mem in nodes.items()} for key in ("percent", "used", "total"))

    def power(self):
        """The GPUs' power draw now, watts (Prometheus's answer to its sum
        query), None when none is read or Prometheus does not answer."""
        if not self.power_url:
            return None
        try:
            with urllib.request.urlopen(self.power_url, timeout=2) as response:
                result = json.loads(response.read()).get("data", {}).get("result") or []
            return float(result[0]["value"][1]) if result else None
        except (OSError, ValueError, KeyError, IndexError):
            return None

    def run(self):
        last_tokens, last_time = 0, time.monotonic()
        while not self.stop.wait(self.interval):
            now = time.monotonic()
            with self.lock:
                tokens = self.tokens
            pct, used, _ = self.memory()
            self.samples.append({"phase": self.phase, "t": round(now - self.started, 2),
                                 "tokens_per_s": round((tokens - last_tokens) / max(now - last_time, 1e-6), 1),
                                 "memory_pct": pct, "memory_used": used, "power_w": self.power()})
            last_tokens, last_time = tokens, now
