#!/usr/bin/python3
"""The lab's alert receiver: the webhook a site would point Alertmanager at
(its chat or paging bridge), here on the lab master's loopback. Each POST
Alertmanager sends (its webhook payload, version 4) is appended as one JSON
line to the log, with the time it arrived; the lab's verifier reads it.

tools/lab.py installs it on the master as twinrail-lab-webhook.service; it
is part of the lab's furniture, like the cables, not of twinrail.
    lab_webhook.py LISTEN_HOST PORT LOG
"""

import http.server
import json
import sys
import time


def main() -> None:
    host, port, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                payload = json.loads(body)
            except ValueError:
                self.send_response(400)
                self.end_headers()
                return
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"received": time.time(), "path": self.path, "payload": payload}) + "\n")
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    http.server.ThreadingHTTPServer((host, port), Handler).serve_forever()


if __name__ == "__main__":
    main()
