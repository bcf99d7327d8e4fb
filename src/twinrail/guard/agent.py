"""The agent on each worker: GET /status on every rail address, with the
state of the RPC server bound to that address and the node's memory;
POST /engine/restart on a rail address restarts the engine's process bound
to it: llama.cpp's RPC server on that address, vLLM's headless node (the
master's guard asks before it serves on that rail again, or to restart a
vLLM group whole). POST /rpc/restart, its name before, answers the same for
the guards of the release before this one."""

from __future__ import annotations

import http.server
import os
import signal
import socket
import threading
import time

from twinrail.guard.memory import node_memory
from twinrail.guard.procs import VLLM_UNIT, rpc_server_state, unit_processes, vllm_state
from twinrail.guard.web import _JSONHandler, log


# the path the guard asks a restart of the worker's engine on; the old name
# answers too, for one release (a guard of the release before asks it)
RESTART_PATH = "/engine/restart"
RESTART_PATHS = (RESTART_PATH, "/rpc/restart")


def agent_status(addresses: list[str], rpc_port: int, engine: str = "llamacpp") -> dict:
    """What the guard asks of a worker: with llama.cpp the RPC server on each
    rail address, with vLLM the node's headless process (its group runs over
    rail0)."""
    rpc = [WORKER_ENGINES[engine]["state"](a, rpc_port) for a in addresses]
    return {"host": socket.gethostname(), "memory": node_memory(), "rpc": rpc,
            "ok": all(r["ok"] for r in rpc)}


def restart_rpc(address: str, rpc_port: int, wait: float = 25.0, proc: str = "/proc") -> dict:
    """SIGKILL the RPC server bound to ``address`` (the same account: no
    privilege) and wait until another one listens there (its unit's
    Restart=always starts it). A server killed while the rail was cut
    still holds that llama-server's connection, and takes one client at a
    time: a new llama-server would wait behind it forever."""
    before = rpc_server_state(address, rpc_port, proc)
    old = before.get("pid")
    if old:
        try:
            os.kill(old, signal.SIGKILL)
        except OSError as exc:
            return {"address": address, "ok": False, "problem": f"ggml-rpc-server (pid {old}): {exc}"}
    deadline = time.monotonic() + wait
    while True:
        state = rpc_server_state(address, rpc_port, proc)
        if state["ok"] and state.get("pid") != old:
            return {"address": address, "ok": True, "old_pid": old, "pid": state["pid"]}
        if time.monotonic() >= deadline:
            return {"address": address, "ok": False, "old_pid": old,
                    "problem": f"no new ggml-rpc-server listens on {address}:{rpc_port} {wait:g} s after "
                               f"{'pid ' + str(old) + ' was killed' if old else 'none was found'}: "
                               f"{state.get('problem')}"}
        time.sleep(0.25)


def restart_vllm(address: str, proc: str = "/proc") -> dict:
    """SIGKILL the node's vLLM (its unit's main process, the same account;
    systemd stops the rest and starts it again, and it waits for rank 0 at
    the rendezvous): the master's guard restarts the whole group."""
    processes = unit_processes(VLLM_UNIT, proc)
    if not processes:
        return {"address": address, "ok": True, "problem": None, "pid": None}
    try:
        os.kill(processes[0]["pid"], signal.SIGKILL)
    except OSError as exc:
        return {"address": address, "ok": False, "problem": f"vLLM (pid {processes[0]['pid']}): {exc}"}
    return {"address": address, "ok": True, "old_pid": processes[0]["pid"]}


# Each engine's process on a worker: how the agent reads its state on a
# rail address and restarts it (the names are looked up when called, so a
# test can stand in for them).
WORKER_ENGINES = {
    "llamacpp": {"state": lambda address, rpc_port: rpc_server_state(address, rpc_port),
                 "restart": lambda address, rpc_port: restart_rpc(address, rpc_port)},
    "vllm": {"state": lambda address, rpc_port: vllm_state(address),
             "restart": lambda address, rpc_port: restart_vllm(address)},
}


def run_agent(args) -> None:
    addresses = args.address

    class Handler(_JSONHandler):
        def do_GET(self):
            if self.path != "/status":
                self.send_json(404, {"error": f"GET /status, POST {RESTART_PATH}"})
                return
            self.send_json(200, agent_status(addresses, args.rpc_port, args.engine))

        def do_POST(self):
            if self.path not in RESTART_PATHS:
                self.send_json(404, {"error": f"GET /status, POST {RESTART_PATH}"})
                return
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            address = self.connection.getsockname()[0]  # the rail it was asked over
            result = WORKER_ENGINES[args.engine]["restart"](address, args.rpc_port)
            log(f"agent: restart of the engine ({args.engine}) on {address} asked by {self.client_address[0]}: {result}")
            self.send_json(200 if result["ok"] else 500, result)

    servers = []
    for address in addresses:
        server = http.server.ThreadingHTTPServer((address, args.port), Handler)
        server.daemon_threads = True
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    log(f"agent: answering on {', '.join(f'{a}:{args.port}' for a in addresses)} "
        f"for the RPC servers on port {args.rpc_port}")
    threading.Event().wait()
