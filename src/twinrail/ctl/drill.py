"""`twinrail drill`: the acceptance table's fault drills on the real
cluster, in a maintenance window. Each applies its fault with what a site
has (systemctl kill or stop on a worker, `ip link set down` on a rail of
the master, a bounded memory hog unit on the master), measures what a
client sees through the proxy (a new request's 503 after N s, the stream in
flight ended after N s), undoes the fault, measures the way back (the first
answer after N s), and saves the result beside the acceptance reports."""

from __future__ import annotations

import json
import shlex
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from .inventory import Cluster, InventoryError, Node

KINDS = ("kill-worker", "stop-worker", "cut-rail", "memory-hog")
HOG_UNIT = "twinrail-drill-hog.service"
# touches every page, so the memory is really used, and ends by itself
HOG = ("import sys, time\nb = bytearray(int(sys.argv[1]))\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n"
       "time.sleep(float(sys.argv[2]))\n")


def plan(cluster: Cluster, kind: str, rail: str | None, worker: str | None, guard: dict) -> dict:
    """What the drill does and undoes, on which node: shell commands (run as
    root), refused for an unknown rail or worker, naming the valid ones."""
    workers = [n for n in cluster.nodes if n.role == "worker"]
    target = workers[0] if worker is None else cluster.node(worker)
    if target.role != "worker":
        raise InventoryError(f"drill: {target.name} is the master; the workers: {', '.join(n.name for n in workers)}")
    rpc = [f"twinrail-rpc@{r.address}.service" for r in target.rails]
    if kind == "kill-worker":
        return {"node": target, "what": f"SIGKILL to {target.name}'s RPC servers (systemd restarts them)",
                "apply": "systemctl kill -s KILL " + " ".join(rpc), "undo": None}
    if kind == "stop-worker":
        units = " ".join(rpc + ["twinrail-agent.service"])
        return {"node": target, "what": f"{target.name}'s RPC servers and agent stopped",
                "apply": f"systemctl stop {units}", "undo": f"systemctl start {units}"}
    if kind == "cut-rail":
        names = [r.name for r in cluster.master.rails]
        if rail not in names:
            raise InventoryError(f"drill cut-rail: unknown rail {rail!r}; the master's rails: {', '.join(names)}")
        interface = next(r.interface for r in cluster.master.rails if r.name == rail)
        return {"node": cluster.master, "what": f"{rail} ({interface}) set down on {cluster.master.name}",
                "apply": f"ip link set dev {shlex.quote(interface)} down",
                "undo": f"ip link set dev {shlex.quote(interface)} up"}
    if kind == "memory-hog":
        mem = (guard.get("memory") or {}).get(cluster.master.name) or {}
        if cluster.settings.get("twinrail_memory_hard_watermark_pct") is None:
            raise InventoryError("drill memory-hog: twinrail_memory_hard_watermark_pct: expected a percentage in the "
                                 "inventory (the watermark the drill passes), got none")
        hard = float(cluster.settings["twinrail_memory_hard_watermark_pct"])
        if not mem.get("total"):
            raise InventoryError(f"drill memory-hog: the guard reports no memory for {cluster.master.name}")
        # past the hard watermark by 2 points of the node's memory, held 60 s at most
        size = max(0, int(mem["total"] * (hard + 2) / 100) - int(mem["used"]))
        return {"node": cluster.master, "what": f"{size >> 20} MiB held on {cluster.master.name} "
                                                f"(to {hard + 2:g} % of its memory, past the hard watermark {hard:g} %)",
                "apply": (f"systemd-run --unit={HOG_UNIT} --collect -p RuntimeMaxSec=90 -p MemoryMax={size + (64 << 20)} "
                          f"python3 -c {shlex.quote(HOG)} {size} 60"),
                "undo": f"systemctl stop {HOG_UNIT}"}
    raise InventoryError(f"drill: unknown drill {kind!r}; the drills: {', '.join(KINDS)}")


def _as_root(node: Node, command: str) -> str:
    return ("sudo -n sh -c " + shlex.quote(command)) if node.become else command


class Client:
    """What a client sees, through the proxy with the openai SDK."""

    def __init__(self, url: str, key: str, verify: bool):
        import openai  # pylint: disable=import-outside-toplevel

        self.openai = openai
        self.api = openai.OpenAI(base_url=url.rstrip("/") + "/v1", api_key=key, max_retries=0, timeout=30,
                                 http_client=openai.DefaultHttpxClient(verify=verify))
        self.model = self.api.models.list().data[0].id

    def ask(self) -> tuple[int, str]:
        """A short chat: (HTTP status, the error's message or '')."""
        try:
            self.api.chat.completions.create(model=self.model, max_tokens=4, temperature=0,
                                             messages=[{"role": "user", "content": "Say yes."}])
            return 200, ""
        except self.openai.APIStatusError as exc:
            return exc.status_code, str((exc.body or {}).get("message", exc) if isinstance(exc.body, dict) else exc)
        except self.openai.APIError as exc:
            return 0, f"{type(exc).__name__}: {exc}"

    def stream(self, outcome: dict, started: threading.Event) -> None:
        """A long stream; when and how it ended."""
        try:
            stream = self.api.chat.completions.create(
                model=self.model, max_tokens=2048, temperature=0.7, stream=True, timeout=300,
                extra_body={"ignore_eos": True},
                messages=[{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}])
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    started.set()
                if chunk.choices and chunk.choices[0].finish_reason:
                    outcome["finished"] = chunk.choices[0].finish_reason
            outcome.setdefault("error", None)
        except Exception as exc:  # pylint: disable=broad-except  # how the stream ended is the measurement
            outcome["error"] = f"{type(exc).__name__}: {exc}"[:300]
        outcome["ended"] = time.monotonic()
        started.set()


def run(cluster: Cluster, conn, client: Client, drill: dict, sla: float = 10.0, limit: float = 120) -> dict:
    """Apply, measure, undo, measure the way back."""
    node = drill["node"]
    outcome, streaming = {}, threading.Event()
    thread = threading.Thread(target=client.stream, args=(outcome, streaming), daemon=True)
    thread.start()
    streaming.wait(60)
    applied = time.monotonic()
    result = {"drill": drill["kind"], "what": drill["what"], "node": node.name, "sla_s": sla,
              "started": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    done = conn.run(_as_root(node, drill["apply"]), hide=True, warn=True, timeout=60)
    if done.exited != 0:
        result["failures"] = [f"drill: {node.name}: the fault could not be applied ({drill['apply']}): "
                              f"{done.stderr.strip()[-300:]}"]
        return result
    refused = None
    while time.monotonic() - applied < limit:
        status, message = client.ask()
        if status == 503:
            refused = (round(time.monotonic() - applied, 2), message)
            break
        time.sleep(0.25)
    thread.join(max(0.0, limit - (time.monotonic() - applied)))
    result["new_request_503_s"], result["reason"] = refused if refused else (None, None)
    result["in_flight_end_s"] = round(outcome["ended"] - applied, 2) if "ended" in outcome else None
    result["in_flight_error"] = outcome.get("error")
    undone = time.monotonic()
    if drill["undo"]:
        conn.run(_as_root(node, drill["undo"]), hide=True, warn=True, timeout=60)
    back = None
    while time.monotonic() - undone < limit:
        if client.ask()[0] == 200:
            back = round(time.monotonic() - undone, 2)
            break
        time.sleep(0.5)
    result["recovery_s"] = back
    failures = []
    if refused is None or refused[0] > sla:
        failures.append(f"drill {drill['kind']}: no 503 for a new request within {sla:g} s "
                        f"({'none' if refused is None else f'{refused[0]} s'})")
    # a worker lost ends the streams in flight; a memory watermark only refuses new requests
    if drill["kind"] != "memory-hog" and (result["in_flight_end_s"] is None or result["in_flight_end_s"] > sla):
        failures.append(f"drill {drill['kind']}: the stream in flight did not end within {sla:g} s "
                        f"({result['in_flight_end_s']})")
    if back is None:
        failures.append(f"drill {drill['kind']}: the service did not answer within {limit:g} s of the undo")
    result["failures"] = failures
    return result


def save(result: dict, reports: Path) -> Path:
    run_dir = reports / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"drill-{result['drill']}.json"
    path.write_text(json.dumps(result, indent=2))
    return path


def render(result: dict) -> str:
    lines = [f"drill {result['drill']}: {result['what']}",
             f"  new request: HTTP 503 after {result.get('new_request_503_s')} s: {result.get('reason')}",
             f"  stream in flight ended after {result.get('in_flight_end_s')} s: {result.get('in_flight_error')}",
             f"  service answering again {result.get('recovery_s')} s after the fault was undone"]
    lines += [f"FAILED: {f}" for f in result.get("failures", [])] or ["PASSED (SLA %g s)" % result["sla_s"]]
    return "\n".join(lines)
