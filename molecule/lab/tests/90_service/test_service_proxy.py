"""The proxy and the firewall, from the controller: chat through nginx on
the published 127.0.0.1:8443 with basic authentication, streamed as it is
generated; 401 without the password; a JSON 503 at once when llama-server
is down; the firewall drops what it does not allow."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
import time
from pathlib import Path

from lab_client import GUARD_PORT, PROXY_PORT

testinfra_hosts = ["ansible://master"]

PASSWORD = (Path.home() / ".local" / "state" / "twinrail-lab" / "service-password").read_text().strip()
MASTER, WORKER = "twinrail-lab-master", "twinrail-lab-worker1"


def request(body: dict | None, password: str | None = PASSWORD, path="/v1/chat/completions"):
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the lab's certificate is self-signed
    conn = http.client.HTTPSConnection("127.0.0.1", 8443, context=context, timeout=60)
    headers = {"content-type": "application/json"}
    if password is not None:
        token = base64.b64encode(f"operator:{password}".encode()).decode()
        headers["authorization"] = f"Basic {token}"
    conn.request("POST" if body else "GET", path, body=json.dumps(body) if body else None,
                 headers=headers)
    return conn, conn.getresponse()


def node(container: str, *argv: str, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True,
                          check=check)


def test_a_chat_through_the_proxy_with_the_password(host):
    conn, response = request({"messages": [{"role": "user", "content": "Name a color."}],
                              "max_tokens": 12, "temperature": 0})
    data = json.loads(response.read())
    conn.close()
    assert response.status == 200 and data["choices"][0]["message"]["content"].strip()


def test_without_or_with_a_wrong_password_401(host):
    for password in (None, PASSWORD + "x"):
        conn, response = request({"messages": [{"role": "user", "content": "hi"}]}, password)
        body = json.loads(response.read())
        conn.close()
        assert response.status == 401 and body["error"]["type"] == "unauthorized"
        assert response.getheader("WWW-Authenticate") == 'Basic realm="twinrail"'


def test_a_generation_streams_through_unbuffered(host):
    started = time.monotonic()
    conn, response = request({"messages": [{"role": "user", "content": "Count from one to twenty."}],
                              "max_tokens": 48, "stream": True, "temperature": 0})
    assert response.status == 200
    arrivals = []
    while line := response.readline():
        if line.startswith(b"data: {"):
            arrivals.append(time.monotonic() - started)
    conn.close()
    assert len(arrivals) >= 10
    # the first tokens came well before the last: nothing held them back
    assert arrivals[0] < arrivals[-1] / 2, arrivals


def test_a_json_503_at_once_when_llama_server_is_down(host):
    node(MASTER, "systemctl", "stop", "twinrail-llama.service")
    try:
        started = time.monotonic()
        conn, response = request({"messages": [{"role": "user", "content": "hi"}]})
        body = json.loads(response.read())
        conn.close()
        assert response.status == 503 and body["error"]["type"] == "service_unavailable"
        assert time.monotonic() - started < 10
    finally:
        node(MASTER, "systemctl", "start", "twinrail-llama.service")
        for _ in range(60):
            if node(MASTER, "python3", "-c", "import urllib.request as u; "
                    f"u.urlopen('http://127.0.0.1:{GUARD_PORT}/health', timeout=2)", check=False).returncode == 0:
                break
            time.sleep(1)


def reachable(address: str, port: int, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def test_the_firewall_drops_what_it_does_not_allow(host):
    listener = node(MASTER, "systemd-run", "--unit=twinrail-test-port", "python3", "-m",
                    "http.server", "--bind", "0.0.0.0", "18099")
    assert listener.returncode == 0
    try:
        time.sleep(1)
        # the port is open on the node itself ...
        assert node(MASTER, "python3", "-c", "import socket; socket.create_connection"
                    "(('127.0.0.1', 18099), 3)", check=False).returncode == 0
        # ... and dropped from the controller and from the worker's management address
        assert not reachable("198.18.0.10", 18099)
        from_worker = node(WORKER, "python3", "-c", "import socket; socket.create_connection"
                           "(('198.18.0.10', 18099), 3)", check=False)
        assert from_worker.returncode != 0 and "timed out" in from_worker.stderr
        # what is allowed still is: SSH from the controller, the service port
        assert reachable("198.18.0.10", 22) and reachable("198.18.0.10", PROXY_PORT)
    finally:
        node(MASTER, "systemctl", "stop", "twinrail-test-port", check=False)
    table = node(MASTER, "nft", "list", "table", "inet", "twinrail").stdout
    assert "policy drop" in table and 'counter packets' in table
