"""What the agent and the proxy share: the JSON handler, the log, error bodies."""

from __future__ import annotations

import http.server
import json
import sys

class _JSONHandler(http.server.BaseHTTPRequestHandler):
    server_version = "twinrail-guard"
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # the journal gets events, not every request
        pass

    def send_json(self, status: int, body: dict, headers: dict | None = None) -> None:
        data = (json.dumps(body) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the asker gave up waiting


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def error_body(message: str, code: int = 503, kind: str = "service_unavailable") -> dict:
    return {"error": {"code": code, "type": kind, "message": message}}
