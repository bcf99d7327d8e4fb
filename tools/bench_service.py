#!/usr/bin/env python3
"""Benchmark (not a test): how long the lab's service takes to come back
after a worker's RPC server is killed (kill -9), and what clients get
meanwhile. Needs the lab up with the service stage converged.

Each run: one completion to check the service answers (the baseline: its
latency is printed), kill -9 of the worker's RPC server on rail0, then one
request every 0.5 s until a completion is answered by a restarted
llama-server; prints the time and the answers seen on the way.

    make bench-service        (tools/bench_service.py --runs 3)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from twinrail.loader import REPO
from ansible.module_utils.stages import catalogue as stages

MASTER, WORKER = "twinrail-lab-master", "twinrail-lab-worker1"
API = f"http://127.0.0.1:{stages.role_default(REPO, 'inference_service_listen_port')}/v1/chat/completions"
# the nodes have no curl: Python's urllib, on the master's loopback
CLIENT = """
import json, sys, urllib.request, urllib.error
request = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(),
                                 headers={"content-type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read(); print(response.status)
except urllib.error.HTTPError as exc:
    print(exc.code)
except OSError as exc:
    print(type(exc).__name__)
"""
BODY = json.dumps({"messages": [{"role": "user", "content": "Say yes."}], "max_tokens": 4})


def ask() -> str:
    return subprocess.run(["docker", "exec", MASTER, "python3", "-c", CLIENT, API, BODY],
                          capture_output=True, text=True, check=False).stdout.strip()


def restarts() -> str:
    return subprocess.run(["docker", "exec", MASTER, "systemctl", "show", "-p", "NRestarts",
                           "--value", "twinrail-llama.service"], capture_output=True, text=True,
                          check=False).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for run in range(args.runs):
        started = time.monotonic()
        if ask() != "200":
            sys.exit("bench: the service does not answer: converge the service stage first")
        baseline = time.monotonic() - started
        before = restarts()
        started = time.monotonic()
        subprocess.run(["docker", "exec", WORKER, "pkill", "-9", "-f", "ggml-rpc-server -H 198.19.0.2"],
                       check=True)
        seen = []
        while time.monotonic() - started < 180:
            answer = ask()
            if answer == "200" and restarts() != before:
                break
            if not seen or seen[-1][0] != answer:
                seen.append((answer, round(time.monotonic() - started, 1)))
            time.sleep(0.5)
        else:
            sys.exit(f"bench: run {run}: not back after 180 s; answers seen {seen}")
        back = time.monotonic() - started
        print(f"run {run}: a completion takes {baseline:.2f} s (baseline); back {back:.1f} s "
              f"after kill -9 ({back / baseline:.0f}x the baseline); answers on the way "
              f"(answer, from s): {seen}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
