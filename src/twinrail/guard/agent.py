"""The agent on each worker: GET /status on every rail address, with the
state of the RPC server bound to that address and the node's memory."""

from __future__ import annotations

import http.server
import socket
import threading

from twinrail.guard.memory import node_memory
from twinrail.guard.procs import rpc_server_state
from twinrail.guard.web import _JSONHandler, log

def agent_status(addresses: list[str], rpc_port: int) -> dict:
    rpc = [rpc_server_state(a, rpc_port) for a in addresses]
    return {"host": socket.gethostname(), "memory": node_memory(), "rpc": rpc,
            "ok": all(r["ok"] for r in rpc)}


def run_agent(args) -> None:
    addresses = args.address

    class Handler(_JSONHandler):
        def do_GET(self):
            if self.path != "/status":
                self.send_json(404, {"error": "GET /status"})
                return
            self.send_json(200, agent_status(addresses, args.rpc_port))

    servers = []
    for address in addresses:
        server = http.server.ThreadingHTTPServer((address, args.port), Handler)
        server.daemon_threads = True
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    log(f"agent: answering on {', '.join(f'{a}:{args.port}' for a in addresses)} "
        f"for the RPC servers on port {args.rpc_port}")
    threading.Event().wait()
