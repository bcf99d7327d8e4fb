"""What the lab's verifiers share: a command on a node, a lab.py command, and
a client of the service through the proxy on the controller's published
port (nginx -> twinrail-guard -> llama-server), as the operator's account."""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
PASSWORD = (Path.home() / ".local" / "state" / "twinrail-lab" / "service-password").read_text().strip()
MASTER, WORKER = "twinrail-lab-master", "twinrail-lab-worker1"
FIGURES = Path(os.environ.get("TWINRAIL_FIGURES", "/tmp/twinrail-failover.json"))


def node(container: str, *argv: str, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True, check=check)


def lab(*argv: str) -> None:
    subprocess.run([sys.executable, str(PROJECT / "tools" / "lab.py"), "-i", str(PROJECT / "inventory" / "lab"),
                    *argv], check=True, capture_output=True)


def connect(timeout: float = 120) -> http.client.HTTPSConnection:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the lab's self-signed certificate
    return http.client.HTTPSConnection("127.0.0.1", 8443, context=context, timeout=timeout)


def post(body: dict, timeout: float = 120):
    conn = connect(timeout)
    token = base64.b64encode(f"operator:{PASSWORD}".encode()).decode()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"content-type": "application/json", "authorization": f"Basic {token}"})
    return conn, conn.getresponse()


def chat(tokens: int = 4, timeout: float = 120) -> tuple[int, dict]:
    conn, response = post({"messages": [{"role": "user", "content": "Say yes."}], "max_tokens": tokens,
                           "temperature": 0}, timeout)
    data = response.read()
    conn.close()
    return response.status, (json.loads(data) if data.startswith(b"{") else {})


def wait_available(limit: float = 180, since: float | None = None, timeout: float = 30) -> float:
    """Seconds from `since` (now by default) to the first chat answered
    through the proxy, polled every 0.5 s; an error past limit."""
    started = time.monotonic() if since is None else since
    while time.monotonic() - started < limit:
        try:
            status, data = chat(timeout=timeout)
            if status == 200 and data.get("choices"):
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the service did not come back within {limit} s")


def record(name: str, figures: dict) -> None:
    """Keep a drill's figures (docs/benchmarks.md quotes them)."""
    data = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    data[name] = figures
    FIGURES.write_text(json.dumps(data, indent=2))
