"""The part of `make bench-split` that runs on the master (python3's standard
library only: the nodes have nothing else). tools/bench_split.py copies it
there and reads the JSON it prints.

    streams URL N REQUESTS TOKENS PROMPT_WORDS   N concurrent streams of
        REQUESTS completions each (/v1/completions, streamed, the prompt
        never cached, exactly TOKENS generated); the CPU seconds the guard
        and nginx spent meanwhile. A bearer key comes from $BENCH_KEY.
    relay GUARD_PID CHUNKS                       llama-server's stream
        relayed by the guard, chunk by chunk: a stand-in upstream stamps
        each chunk with the time it sent it; a second guard (the running
        guard's own command line, on other ports, pointed at the stand-in,
        without its rail options) relays it; the latency of each chunk
        directly and through that guard.
    wait URL SECONDS                             until URL/health answers 200.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
        except OSError:
            pass
    return total


def pids_named(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm", encoding="utf-8") as handle:
                    if handle.read().strip() == name:
                        found.append(int(entry))
            except OSError:
                pass
    return found


def main_pid(unit: str) -> int:
    return int(subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit], capture_output=True,
                              text=True, check=True).stdout.strip() or 0)


def connection(url: str, timeout: float = 300):
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the service's own certificate, on loopback
        return http.client.HTTPSConnection(parts.hostname, parts.port or 443, context=context, timeout=timeout)
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)


def one(url: str, tokens: int, prompt: str, key: str | None) -> dict:
    """One streamed completion: ttft, each token's arrival, the server's timings."""
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "stream": True, "temperature": 0,
                       "ignore_eos": True, "cache_prompt": False}).encode()
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn = connection(url)
    started = time.monotonic()
    conn.request("POST", "/v1/completions", body=body, headers=headers)
    response = conn.getresponse()
    arrivals, timings, buffer = [], None, b""
    if response.status != 200:
        return {"error": f"HTTP {response.status}: {response.read()[:200]!r}"}
    while chunk := response.read1(65536):
        now = time.monotonic()
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            data = json.loads(event[6:])
            if data.get("timings"):
                timings = data["timings"]
            if any(c.get("text") for c in data.get("choices", [])):
                arrivals.append(now)
    conn.close()
    ended = time.monotonic()
    if not arrivals:
        return {"error": "no token"}
    span = arrivals[-1] - arrivals[0]
    return {"ttft_s": arrivals[0] - started, "e2e_s": ended - started, "tokens": len(arrivals),
            "decode_tps": (len(arrivals) - 1) / span if span > 0 else None,
            "prompt_n": (timings or {}).get("prompt_n"), "server_decode_tps": (timings or {}).get("predicted_per_second"),
            "server_prefill_tps": (timings or {}).get("prompt_per_second")}


def streams(url: str, count: int, requests: int, tokens: int, words: int) -> dict:
    key = os.environ.get("BENCH_KEY") or None
    guard = [main_pid("twinrail-guard.service")]
    nginx = pids_named("nginx")
    outcomes, lock = [], threading.Lock()

    def client(number: int):
        for request in range(requests):
            # a prompt of its own per request: nothing shared in the KV cache
            prompt = f"Request {number}.{request}: " + " ".join(["the harbor at dawn, ships and gulls"] * (words // 6))
            outcome = one(url, tokens, prompt, key)
            with lock:
                outcomes.append(outcome)

    cpu_before = (cpu_seconds(guard), cpu_seconds(nginx))
    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.monotonic() - started
    cpu_after = (cpu_seconds(guard), cpu_seconds(nginx))
    good = [o for o in outcomes if "error" not in o]
    generated = sum(o["tokens"] for o in good)
    return {"url": url, "streams": count, "requests": len(outcomes), "errors": [o["error"] for o in outcomes
                                                                                   if "error" in o][:3],
            "wall_s": wall, "tokens": generated, "aggregate_decode_tps": generated / wall if wall else None,
            "decode_tps": statistics.median([o["decode_tps"] for o in good if o["decode_tps"]]) if good else None,
            "prefill_tps": statistics.median([o["prompt_n"] / o["ttft_s"] for o in good if o["prompt_n"]])
            if good else None,
            "server_decode_tps": statistics.median([o["server_decode_tps"] for o in good if o["server_decode_tps"]])
            if good else None,
            "ttft_s": statistics.median([o["ttft_s"] for o in good]) if good else None,
            "guard_cpu_s": cpu_after[0] - cpu_before[0], "nginx_cpu_s": cpu_after[1] - cpu_before[1]}


class Stamped(http.server.BaseHTTPRequestHandler):
    """A stand-in llama-server: its probe's answer, and a stream of chunks
    each carrying the monotonic time it was sent (one clock: one kernel)."""
    protocol_version = "HTTP/1.1"
    chunks, gap = 200, 0.005

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/completion":  # the guard's probe
            data = b'{"content": "ok"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for number in range(self.chunks):
            event = (f'data: {{"n": {number}, "sent": {time.monotonic()!r}, "choices": [{{"text": "x"}}]}}'
                     + " " * 200 + "\n\n").encode()  # about a real chunk's size
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            time.sleep(self.gap)
        self.wfile.write(b"0\r\n\r\n")


def latencies(port: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/completions", body=b"{}", headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    out, buffer = [], b""
    while chunk := response.read1(65536):
        now = time.monotonic()
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if event.startswith(b"data: "):
                out.append(now - json.loads(event[6:])["sent"])
    conn.close()
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def relay(guard_pid: int, rounds: int) -> dict:
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stamped)
    upstream.daemon_threads = True
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    with open(f"/proc/{guard_pid}/cmdline", "rb") as handle:
        argv = [a.decode() for a in handle.read().split(b"\0") if a]
    # the same guard, on other ports, without the options that restart llama-server
    skip = {"--rpc-servers", "--split", "--degrade-after", "--restore-after", "--override", "--server-devices",
            "--master-devices"}
    port = free_port()
    mine, i = [], 0
    while i < len(argv):
        if argv[i] in skip:
            i += 2
            continue
        if argv[i] == "--listen-port":
            mine += [argv[i], str(port)]
            i += 2
            continue
        if argv[i] == "--upstream":
            mine += [argv[i], f"127.0.0.1:{upstream.server_address[1]}"]
            i += 2
            continue
        mine.append(argv[i])
        i += 1
    proc = subprocess.Popen(mine, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            raise SystemExit(f"bench_split_node: the second guard never became available: {proc.stderr.read(2000)}")
        direct, through = [], []
        for _ in range(rounds):  # interleaved: a busy moment costs both alike
            direct += latencies(upstream.server_address[1])
            through += latencies(port)
        cpu = cpu_seconds([proc.pid])
    finally:
        proc.terminate()
        proc.wait(10)
    quantile = lambda values, q: statistics.quantiles(values, n=100)[q - 1]  # noqa: E731
    return {"chunks": len(through), "direct_p50_ms": quantile(direct, 50) * 1e3,
            "direct_p99_ms": quantile(direct, 99) * 1e3, "guard_p50_ms": quantile(through, 50) * 1e3,
            "guard_p99_ms": quantile(through, 99) * 1e3,
            "added_p50_ms": (quantile(through, 50) - quantile(direct, 50)) * 1e3,
            "added_p99_ms": (quantile(through, 99) - quantile(direct, 99)) * 1e3,
            "guard_cpu_s_per_chunk": cpu / len(through) if through else None}


def wait(url: str, limit: float) -> None:
    """Until GET /health answers 200 (llama-server loaded, or the guard
    available), at most limit seconds."""
    deadline = time.monotonic() + limit
    last = None
    while time.monotonic() < deadline:
        try:
            conn = connection(url, timeout=5)
            conn.request("GET", "/health")
            response = conn.getresponse()
            response.read()
            conn.close()
            if response.status == 200:
                return
            last = f"HTTP {response.status}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.5)
    raise SystemExit(f"bench_split_node: {url}/health did not answer 200 within {limit:g} s ({last})")


def main(argv: list[str]) -> None:
    if argv[0] == "wait":
        wait(argv[1], float(argv[2]))
    elif argv[0] == "streams":
        url, count, requests, tokens, words = argv[1], *map(int, argv[2:6])
        print(json.dumps(streams(url, count, requests, tokens, words)))
    elif argv[0] == "relay":
        print(json.dumps(relay(int(argv[1]), int(argv[2]))))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
