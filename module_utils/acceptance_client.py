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


class Client:
    def __init__(self, url, user, password, validate_certs, timeout):
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
        try:
            with self.open(path, body, timeout) as response:
                return response.status, json.loads(response.read())
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
                    text.append(content)
                    on_token()
                if choice.get("finish_reason"):
                    finished = True
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
