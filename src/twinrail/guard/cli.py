"""twinrail-guard's command line. Every setting is given by the caller (the
service role's units pass each one from the role's defaults): no default
lives here. The options of serving on fewer rails go together; left out,
every rail always serves (their defaults say "off", nothing else)."""

from __future__ import annotations

import argparse
import json

from twinrail.guard import __doc__ as GUARD_DOC
from twinrail.guard.agent import WORKER_ENGINES, run_agent
from twinrail.guard.gpu import run_gpu
from twinrail.guard.memory import node_memory
from twinrail.guard.proxy import ENGINES, run_proxy
from twinrail.guard.textfile import run_transport


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="twinrail-guard", description=GUARD_DOC.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    agent = sub.add_parser("agent", help="on a worker: report its RPC servers and memory")
    agent.add_argument("--address", action="append", required=True, help="a rail address (repeat)")
    agent.add_argument("--port", type=int, required=True)
    agent.add_argument("--rpc-port", type=int, required=True)
    agent.add_argument("--engine", choices=sorted(WORKER_ENGINES), default="llamacpp",
                       help="what runs on the worker: RPC servers (llamacpp) or a headless vLLM")
    proxy = sub.add_parser("proxy", help="on the master: between nginx and the engine")
    proxy.add_argument("--listen-host", required=True)
    proxy.add_argument("--listen-port", type=int, required=True)
    proxy.add_argument("--upstream", required=True)
    proxy.add_argument("--workers", required=True, help="host@rail-address,...")
    proxy.add_argument("--agent-port", type=int, required=True)
    proxy.add_argument("--soft", type=float, required=True)
    proxy.add_argument("--hard", type=float, required=True)
    proxy.add_argument("--slots", type=int, required=True)
    proxy.add_argument("--interval", type=float, required=True)
    proxy.add_argument("--grace", type=float, required=True)
    proxy.add_argument("--probe-timeout", type=float, required=True)
    proxy.add_argument("--restart-grace", type=float, required=True)
    proxy.add_argument("--keys", required=True, help="the API keys' digests (JSON); '' for none")
    proxy.add_argument("--queue-max", type=int, required=True,
                       help="requests waiting for a slot at most, past it 429; -1 for no cap")
    proxy.add_argument("--stall-after", type=float, default=0.0,
                       help="s without a token relayed while requests are in flight before the engine's loop is "
                            "asked, and taken as stalled when it does not answer (0: off)")
    proxy.add_argument("--idle-probe", type=float, default=0.0,
                       help="s between the engine's probes while no request is in flight (0: off)")
    proxy.add_argument("--model", default="",
                       help="the served model's name: the label of the traffic's metrics (default unknown)")
    # serving on fewer rails (rails.py): all four, or none (every rail always serves)
    proxy.add_argument("--engine", choices=sorted(ENGINES), default="llamacpp",
                       help="the upstream: llama-server (llamacpp) or vLLM's OpenAI server")
    proxy.add_argument("--rpc-servers", default="", help="llama-server's --rpc list (the configuration's)")
    proxy.add_argument("--split", default="", help="its --tensor-split proportions (the configuration's)")
    proxy.add_argument("--server-devices", default="",
                       help="how many devices (GPUs) each RPC server exposes, in --rpc order (default one each)")
    proxy.add_argument("--master-devices", type=int, default=None,
                       help="how many of the master's own GPUs follow the servers' proportions (default one or none)")
    proxy.add_argument("--degrade-after", type=float, default=0.0,
                       help="s a rail stays down before llama-server is restarted without it (0: never)")
    proxy.add_argument("--restore-after", type=float, default=0.0,
                       help="s a rail left out stays healthy before every rail serves again")
    proxy.add_argument("--override", default=None,
                       help="the environment file llama-server's unit reads after its configuration")
    transport = sub.add_parser("transport", help="on a worker: write each RPC server's transport for node_exporter")
    transport.add_argument("--address", action="append", required=True, help="a rail address (repeat)")
    transport.add_argument("--out", required=True, help="the .prom file in node_exporter's textfile directory")
    gpu = sub.add_parser("gpu", help="on a node with GPUs: write each GPU's telemetry for node_exporter")
    gpu.add_argument("--out", required=True, help="the .prom file in node_exporter's textfile directory")
    gpu.add_argument("--nvidia-smi", required=True, help="the nvidia-smi to run")
    sub.add_parser("memory", help="print the node's memory as JSON")
    args = parser.parse_args(argv)
    if args.command == "proxy":
        given = [bool(args.rpc_servers), bool(args.split), args.degrade_after > 0, bool(args.override)]
        if any(given) and not all(given):
            parser.error("--rpc-servers, --split, --degrade-after (> 0) and --override go together")
    if args.command == "agent":
        run_agent(args)
    elif args.command == "proxy":
        run_proxy(args)
    elif args.command == "transport":
        run_transport(args)
    elif args.command == "gpu":
        run_gpu(args)
    else:
        print(json.dumps(node_memory()))
