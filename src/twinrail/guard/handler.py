"""The guard's handler of a client's request: who is asking (an API key
or an operator's account), what they may ask, whether the cluster may
take it now (the guard's refusal and its admission to a slot), the
guard's own health, status and metrics, and every answer counted in the
traffic's metrics. The relay (relay.py) forwards what is admitted."""

from __future__ import annotations

import json
import time

from twinrail.guard import access, metrics, relay
from twinrail.guard.web import _JSONHandler, error_body


def make_proxy_handler(guard):
    class Handler(_JSONHandler):
        def do_GET(self):
            self.proxy()

        def do_POST(self):
            self.proxy()

        def do_OPTIONS(self):
            self.proxy()

        def send_response(self, code, message=None):
            self.answered = code  # what the client got, for the traffic's counters
            super().send_response(code, message)

        def refuse(self, reason: str, status: int = 503) -> None:
            guard.count_refusal(status, reason)
            self.failure = reason
            if status == 429:
                self.send_json(429, error_body(reason, 429, "rate_limit_exceeded"), {"Retry-After": "2"})
            else:
                self.send_json(503, error_body(reason), {"Retry-After": "10"})

        def proxy(self):
            """The request, counted in the traffic's metrics (all but the
            guard's own health, status and metrics)."""
            started = time.monotonic()
            self.answered, self.failure, self.first_byte, self.tail = None, None, None, b""
            try:
                self.answer()
            finally:
                if self.answered is not None and self.path != "/health" and not self.path.startswith("/twinrail/"):
                    generation = self.command == "POST"
                    status = 503 if self.failure and self.answered == 200 else self.answered  # a stream cut short
                    guard.traffic.record(
                        status, self.failure or "",
                        duration=time.monotonic() - started if generation else None,
                        ttft=self.first_byte - started if generation and self.first_byte is not None else None,
                        tokens=metrics.generated_tokens(self.tail) if generation and status < 300 else None)

        def answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            who = access.caller(self.headers, guard.keys)
            if who is None:
                self.send_json(401, error_body("invalid or missing API key: send 'Authorization: Bearer <key>' "
                                               "(or sign in with an operator's account)", 401, "invalid_api_key"),
                               {"WWW-Authenticate": 'Bearer realm="twinrail"'})
                return
            if not who.may(self.path):
                self.send_json(403, error_body(f"{self.path.split('?', 1)[0]} is for the operators' accounts, "
                                               f"not for API keys (key '{who.name}')", 403, "permission_denied"))
                return
            if self.command == "POST" and body and self.path.startswith("/v1/"):
                try:
                    json.loads(body)
                except ValueError as exc:
                    self.send_json(400, error_body(f"the request body is not valid JSON: {exc}", 400,
                                                   "invalid_request_error"))
                    return
            if self.path == "/health":
                reason = guard.refusal()
                if reason:
                    self.refuse(reason)
                else:
                    self.send_json(200, {"status": "ok"})
                return
            if self.path == "/twinrail/status":
                self.send_json(200, guard.status())
                return
            if self.path == "/twinrail/metrics":
                data = guard.metrics_text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            generation = self.command == "POST"
            if generation:
                reason = guard.refusal()
                if reason:
                    self.refuse(reason)
                    return
                failed = guard.acquire(lambda: False)
                if failed:
                    self.refuse(failed[1], failed[0])
                    return
            try:
                relay.forward(self, guard, body)
            finally:
                if generation:
                    guard.release()

    return Handler
