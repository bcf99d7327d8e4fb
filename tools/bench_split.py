#!/usr/bin/env python3
"""`make bench-split`: what distribution and the proxies cost per token, on
the converged lab (`make lab`), in one run, each figure with its ratio to a
baseline measured in the same run.

On the master (tools/bench_split_node.py, copied there):

- `llama-bench` alone, at llama-server's own thread count (the unit's
  `--threads`), on the same model: prefill and decode tokens/s of one
  sequence, all layers on the master;
- the serving llama-server itself, with the cluster's `--rpc` layout, on
  loopback (its inference_service_listen_port);
- the same through the guard (inference_service_guard_port);
- the same through nginx and the guard (inference_service_proxy_port, an API key);

each at 1 and at 4 concurrent streams (streamed /v1/completions, exactly
--tokens generated, the prompt never cached), taken twice in turn so a busy
moment of the shared cores costs every path alike; the medians are shown.
Then the guard's relay alone: a stand-in upstream stamps each chunk with
the time it sent it, and a second guard (the running one's command line on
other ports) relays it: the latency it adds per chunk at p50 and p99.

    tools/bench_split.py [--tokens 64] [--words 160] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import bench_acceptance  # tools/, beside this file
import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.stages import catalogue as stages

REPO = Path(__file__).resolve().parent.parent
# the service's ports, where their defaults live (roles/inference_service/defaults/main.yml)
PORTS = {n: stages.role_default(REPO, f"inference_service_{n}_port") for n in ("listen", "guard", "proxy")}
NODE_SCRIPT = "/tmp/twinrail_bench_split_node.py"
KEY = Path.home() / ".local" / "state" / "twinrail-lab" / "api-keys" / "lab-client"


def node(container: str, *argv: str, env: dict | None = None, timeout: float = 600) -> str:
    extra = [f"--env={k}={v}" for k, v in (env or {}).items()]
    proc = subprocess.run(["docker", "exec", *extra, container, *argv], capture_output=True, text=True,
                          timeout=timeout, check=False)
    if proc.returncode:
        raise SystemExit(f"bench_split: {container}: {' '.join(argv[:3])}...: {proc.stderr.strip()[-1500:]}")
    return proc.stdout


def unit_argv(container: str, unit: str) -> list[str]:
    pid = node(container, "systemctl", "show", "-p", "MainPID", "--value", unit).strip()
    if pid in ("", "0"):
        raise SystemExit(f"bench_split: {container}: {unit} is not running (make lab first)")
    return [a for a in node(container, "cat", f"/proc/{pid}/cmdline").split("\0") if a]


def option(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg in names:
            return argv[i + 1]
    return None


def llama_bench(container: str, server: list[str], prompt: int, tokens: int) -> dict:
    """llama-bench alone (bench_acceptance's), at llama-server's own threads
    and model, every layer on the master."""
    threads, model = int(option(server, "-t", "--threads")), option(server, "-m", "--model")
    figures = bench_acceptance.llama_bench(3, container=container, model=model, threads=threads, prompt=prompt,
                                           tokens=tokens, layers=0)
    return {"threads": threads, "model": model, "prefill_tps": figures[f"pp{prompt}"],
            "decode_tps": figures[f"tg{tokens}"]}


def replace(argv: list[str], names: tuple[str, ...], value: str | None) -> list[str]:
    """argv with option `names` set to value (added when absent), or
    removed (value None)."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in names:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out + ([names[0], value] if value is not None else [])


def layout_variants(server: list[str]) -> list[tuple[str, list[str]]]:
    """What the layout measurement runs, each a llama-server command line
    derived from the service's own, on port 18080."""
    base = replace(server, ("--port",), "18080")
    rpc = option(server, "--rpc") or ""
    first = rpc.split(",")[0]
    quiet = replace(base, ("-lv", "--verbosity"), None)
    return [
        ("the service's: an RPC server per rail", base),
        ("the service's, without -lv 4", quiet),
        ("one RPC server per worker (rail0 carries the share)",
         replace(replace(base, ("--rpc",), first), ("--tensor-split", "-ts"), None)),
        ("no RPC: every layer on the master", replace(replace(replace(base, ("--rpc",), None),
                                                              ("--tensor-split", "-ts"), None), ("-ngl",), "0")),
        ("an RPC server per rail, llama-server -t 2", replace(base, ("-t", "--threads"), "2")),
        ("an RPC server per rail, -ub 128", replace(base, ("-ub", "--ubatch-size"), "128")),
        ("an RPC server per rail, -b 256 -ub 256", replace(replace(base, ("-b", "--batch-size"), "256"),
                                                           ("-ub", "--ubatch-size"), "256")),
    ]


def rail_packets(worker: str) -> int:
    """Packets the worker's rails sent and received so far."""
    total = 0
    for rail in node(worker, "sh", "-c", "ls -d /sys/class/net/ens*").split():
        for way in ("rx_packets", "tx_packets"):
            total += int(node(worker, "cat", f"{rail}/statistics/{way}"))
    return total


def layouts(box: str, worker: str, server: list[str], tokens: int, words: int) -> list[dict]:
    """Each variant's llama-server started by hand while the service's is
    stopped (the RPC servers take one client), measured at 1 and 4 streams
    on loopback, with the rails' packets per token; the service started
    again at the end."""
    rows = []
    node(box, "systemctl", "stop", "twinrail-llama.service")
    try:
        for name, argv in layout_variants(server):
            node(box, "sh", "-c", f"nohup {' '.join(argv)} > /tmp/bench-layout.log 2>&1 &")
            try:
                node(box, "python3", NODE_SCRIPT, "wait", "http://127.0.0.1:18080", "120")
                row = {"layout": name, "argv": argv[1:]}
                for streams in (1, 4):
                    before = rail_packets(worker)
                    out = json.loads(node(box, "python3", NODE_SCRIPT, "streams", "http://127.0.0.1:18080",
                                          str(streams), "3" if streams == 1 else "2", str(tokens), str(words)))
                    if out["errors"]:
                        raise SystemExit(f"bench_split: {name}: {out['errors']}")
                    out["packets_per_token"] = (rail_packets(worker) - before) / out["tokens"]
                    row[streams] = out
                rows.append(row)
                print(f"  {name}: decode {row[1]['decode_tps']:.1f} tokens/s a stream, "
                      f"{row[4]['aggregate_decode_tps']:.1f} in all at 4; prefill {row[1]['prefill_tps']:.1f}; "
                      f"{row[1]['packets_per_token']:.1f} rail packets a token", flush=True)
            finally:
                node(box, "sh", "-c", "pkill -f 'llama-server.*--port 1808[0]'; sleep 1; true")
    finally:
        node(box, "systemctl", "start", "twinrail-llama.service")
        node(box, "python3", NODE_SCRIPT, "wait", f"http://127.0.0.1:{PORTS['guard']}", "300")
    return rows


def median(values: list[float]) -> float | None:
    """The median of the values measured (None: none was)."""
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(value, base) -> str:
    return f"{value / base:.2f}x" if value and base else "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--container", default="twinrail-lab-master", help="the master's container")
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per request")
    parser.add_argument("--words", type=int, default=160, help="words in each prompt (about 1.3 tokens each)")
    parser.add_argument("--rounds", type=int, default=2, help="times each path is measured, in turn")
    parser.add_argument("--worker", default="twinrail-lab-worker1", help="the worker's container")
    parser.add_argument("--layouts", action="store_true",
                        help="also the layouts: llama-server started by hand in other layouts, thread counts and "
                             "batch sizes, while the service's is stopped (minutes; 503s meanwhile)")
    parser.add_argument("--json", help="also write every figure here")
    args = parser.parse_args(argv)
    box = args.container
    subprocess.run(["docker", "cp", str(REPO / "tools" / "bench_split_node.py"), f"{box}:{NODE_SCRIPT}"],
                   check=True, capture_output=True)
    server = unit_argv(box, "twinrail-llama.service")
    guard = node(box, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-guard.service").strip()
    key = KEY.read_text().strip()
    print(f"llama-server: {' '.join(server[1:])}", flush=True)
    base = llama_bench(box, server, prompt=int(args.words * 1.3), tokens=args.tokens)
    print(f"llama-bench alone: {base['threads']} thread(s): prefill {base['prefill_tps']:.1f}, decode "
          f"{base['decode_tps']:.1f} tokens/s", flush=True)
    paths = [("llama-server --rpc, loopback", f"http://127.0.0.1:{PORTS['listen']}"),
             ("through the guard", f"http://127.0.0.1:{PORTS['guard']}"),
             ("through nginx and the guard", f"https://127.0.0.1:{PORTS['proxy']}")]
    runs: dict = {}
    for streams in (1, 4):
        requests = 3 if streams == 1 else 2
        for _ in range(args.rounds):
            for name, url in paths:
                out = node(box, "python3", NODE_SCRIPT, "streams", url, str(streams), str(requests), str(args.tokens),
                           str(args.words), env={"BENCH_KEY": key} if url.startswith("https") else None)
                row = json.loads(out)
                if row["errors"]:
                    raise SystemExit(f"bench_split: {name} at {streams} stream(s): {row['errors']}")
                runs.setdefault((streams, name), []).append(row)
                print(f"  {streams} stream(s), {name}: {row['aggregate_decode_tps']:.1f} tokens/s in all",
                      flush=True)
    relay = json.loads(node(box, "python3", NODE_SCRIPT, "relay", guard, "5"))
    table = []
    for (streams, name), rows in runs.items():
        tokens = sum(r["tokens"] for r in rows)
        table.append({"streams": streams, "path": name,
                      "decode_tps": median([r["decode_tps"] for r in rows]),
                      "aggregate_decode_tps": median([r["aggregate_decode_tps"] for r in rows]),
                      "prefill_tps": median([r["prefill_tps"] for r in rows]),
                      "ttft_s": median([r["ttft_s"] for r in rows]),
                      "guard_cpu_ms_per_token": 1e3 * sum(r["guard_cpu_s"] for r in rows) / tokens,
                      "nginx_cpu_ms_per_token": 1e3 * sum(r["nginx_cpu_s"] for r in rows) / tokens})
    print()
    print(f"{'streams':>7}  {'path':<30} {'decode/stream':>13} {'x bench':>7} {'x direct':>8} {'all streams':>11} "
          f"{'x direct':>8} {'prefill':>8} {'x bench':>7}  {'guard CPU':>9} {'nginx CPU':>9}")
    print(f"{1:>7}  {'llama-bench alone':<30} {base['decode_tps']:>13.1f} {'1.00x':>7} {'':>8} {'':>11} {'':>8} "
          f"{base['prefill_tps']:>8.1f} {'1.00x':>7}")
    for row in table:
        direct = next(r for r in table if r["streams"] == row["streams"] and r["path"] == paths[0][0])
        print(f"{row['streams']:>7}  {row['path']:<30} {row['decode_tps']:>13.1f} "
              f"{ratio(row['decode_tps'], base['decode_tps']):>7} {ratio(row['decode_tps'], direct['decode_tps']):>8} "
              f"{row['aggregate_decode_tps']:>11.1f} "
              f"{ratio(row['aggregate_decode_tps'], direct['aggregate_decode_tps']):>8} {row['prefill_tps']:>8.1f} "
              f"{ratio(row['prefill_tps'], base['prefill_tps']):>7}  {row['guard_cpu_ms_per_token']:>6.2f} ms "
              f"{row['nginx_cpu_ms_per_token']:>6.2f} ms")
    print("(tokens/s; decode/stream: one stream's own rate, the median; all streams: every token over the wall "
          "time; CPU: milliseconds of the guard's and nginx's processes per token generated, on every path)")
    print(f"the guard's relay, {relay['chunks']} chunks: it adds {relay['added_p50_ms']:.3f} ms a chunk at p50, "
          f"{relay['added_p99_ms']:.3f} ms at p99 (direct {relay['direct_p50_ms']:.3f} / {relay['direct_p99_ms']:.3f} ms, "
          f"through it {relay['guard_p50_ms']:.3f} / {relay['guard_p99_ms']:.3f} ms); its CPU "
          f"{relay['guard_cpu_s_per_chunk'] * 1e3:.3f} ms a chunk (its monitor included)")
    found = []
    if args.layouts:
        print("\nlayouts (llama-server by hand on 127.0.0.1:18080, the service's stopped meanwhile):", flush=True)
        found = layouts(box, args.worker, server, args.tokens, args.words)
        first = found[0]
        print(f"{'layout':<52} {'decode':>7} {'x bench':>7} {'x service':>9} {'at 4':>7} {'x service':>9} "
              f"{'prefill':>8} {'x service':>9} {'packets/token':>13}")
        for row in found:
            print(f"{row['layout']:<52} {row[1]['decode_tps']:>7.1f} {ratio(row[1]['decode_tps'], base['decode_tps']):>7} "
                  f"{ratio(row[1]['decode_tps'], first[1]['decode_tps']):>9} {row[4]['aggregate_decode_tps']:>7.1f} "
                  f"{ratio(row[4]['aggregate_decode_tps'], first[4]['aggregate_decode_tps']):>9} "
                  f"{row[1]['prefill_tps']:>8.1f} {ratio(row[1]['prefill_tps'], first[1]['prefill_tps']):>9} "
                  f"{row[1]['packets_per_token']:>13.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"llama_bench": base, "paths": table, "relay": relay,
                                               "layouts": found}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
