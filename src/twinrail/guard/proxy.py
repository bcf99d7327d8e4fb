"""The proxy on the master, between nginx and llama-server: who may ask
what (API keys, the operators' accounts: access.py), the cluster's state
from every worker's agent, 503s when a worker is lost, the restart of a
hung llama-server, the memory watermarks, a bounded queue (429 past it),
serving on a worker's other rails when one stays down (rails.py).
The Guard here holds that state; each request is admitted by the
handler (handler.py) and forwarded by the relay (relay.py).
Every answer of its own is JSON in the OpenAI API's error shape."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request

from twinrail.guard import access, agent, metrics, rails as rails_mod
from twinrail.guard.handler import make_proxy_handler
from twinrail.guard.memory import node_memory
from twinrail.guard.procs import VLLM_UNIT, find_processes, unit_processes
from twinrail.guard.web import log


# What the guard needs of each engine, in one place: its name in messages,
# the one-token probe (a completion through the whole group), and how to ask
# whether its loop still turns while requests are in flight without a token
# (llama-server's /slots is answered by its main loop between batches, so a
# wedged loop leaves it unanswered; vLLM's API server answers on its own,
# so its loop is asked with the probe, which joins the running batch); the
# processes a restart kills; and whether it runs as a group (vLLM: a rank
# cannot rejoin, so a restart is every node's, and a group that stays
# unavailable with every worker up is restarted whole). The stages' table of
# the engines is module_utils/engines/registry.py's; a unit test holds the two to the
# same engines.
ENGINES = {
    "llamacpp": {"name": "llama-server", "probe": ("/completion", {"prompt": "ok", "n_predict": 1}),
                 "probe_names_model": False, "loop": ("GET", "/slots", None),
                 "processes": lambda: find_processes("llama-server"), "group": False},
    "vllm": {"name": "vLLM", "probe": ("/v1/completions", {"prompt": "ok", "max_tokens": 1}),
             "probe_names_model": True, "loop": None,
             "processes": lambda: unit_processes(VLLM_UNIT), "group": True},
}


def engine_facts(engine: str) -> dict:
    """The engine's row of ENGINES; an engine without one is refused."""
    if engine not in ENGINES:
        raise SystemExit(f"twinrail-guard: --engine {engine!r}: the guard knows {', '.join(sorted(ENGINES))}")
    return ENGINES[engine]


class Guard:
    """The cluster's state, as the proxy sees it."""

    def __init__(self, workers: list[tuple[str, str]], agent_port: int, upstream: tuple[str, int],
                 soft: float, hard: float, slots: int, *, interval: float,
                 grace: float, probe_timeout: float, restart_grace: float,
                 keys: access.Keys | None = None, queue_max: int | None = None,
                 rails: list[rails_mod.Rail] | None = None, master_share: float | None = None,
                 degrade_after: float = 0.0, restore_after: float = 0.0, override: str | None = None,
                 drain_limit: float = 60.0, model: str = "", engine: str = "llamacpp",
                 stall_after: float = 0.0, idle_probe: float = 0.0):
        self.workers = workers  # (host, rail address)
        self.engine, self.model = engine, model  # llamacpp or vllm; the served model's name
        self.facts = engine_facts(engine)
        # the stall watchdog: no token relayed for stall_after s while requests
        # are in flight (and the engine's loop does not answer), or the probe
        # failing while idle, probed every idle_probe s (0: off)
        self.stall_after, self.idle_probe = stall_after, idle_probe
        self.last_progress = time.monotonic()  # a request admitted, or a token relayed
        self.last_probe = time.monotonic()
        self.stall: str | None = None  # why the engine is taken as stalled, until it answers again
        self.stalls = 0
        self.unavailable_since: float | None = None  # vLLM: since when the probe fails
        self.agent_port = agent_port
        self.upstream = upstream
        self.soft, self.hard = soft, hard
        self.slots = slots
        self.interval, self.grace = interval, grace
        self.probe_timeout, self.restart_grace = probe_timeout, restart_grace
        self.keys = keys or access.Keys(None)
        self.queue_max = queue_max  # requests waiting for a slot at most (None: no cap)
        self.waiting = 0
        self.lock = threading.Condition()
        self.last_ok = {address: time.monotonic() for _, address in workers}
        self.worker_problems: dict[str, str] = {}
        self.memory: dict[str, dict] = {}
        self.needs_probe = True  # the engine not yet seen answering
        self.engine_problem = f"{self.facts['name']} not yet answering"
        self.active = 0
        self.last_kill = 0.0
        self.events: list[dict] = []
        self.refusals: dict[str, int] = {}  # by metrics.REFUSAL_REASONS
        self.traffic = metrics.Traffic(model or "unknown")  # what the clients saw
        # serving on fewer rails (rails.py): without rails, every worker rail serves, always
        self.rails = rails or []
        self.master_share = master_share
        self.degrade_after, self.restore_after = degrade_after, restore_after
        self.override = override
        self.drain_limit = drain_limit  # s a return to every rail waits for requests in flight
        self.problem_since: dict[str, float] = {}
        self.healthy_since: dict[str, float] = {}
        self.serving = {address for _, address in workers}
        if self.rails and override:
            kept = rails_mod.read_override(override, self.rails)
            if kept is not None:  # a guard restarted while serving on fewer rails goes on from there
                self.serving = kept
        self.switching: str | None = None  # a change of rails waiting for requests to end
        self.switch_wait_since: float | None = None
        self.next_switch = 0.0

    # ---- state
    def event(self, kind: str, detail: str) -> None:
        entry = {"time": time.time(), "event": kind, "detail": detail}
        with self.lock:
            self.events = (self.events + [entry])[-50:]
        log(f"{kind}: {detail}")

    def memory_level(self) -> tuple[str, str]:
        worst = ("ok", "")
        for host, mem in sorted(self.memory.items()):
            pct = mem["percent"]
            detail = (f"{host} uses {pct}% of {mem['total'] / 2**30:.2f} GiB "
                      f"(soft watermark {self.soft}%, hard {self.hard}%)")
            if pct >= self.hard:
                return "hard", detail
            if pct >= self.soft and worst[0] == "ok":
                worst = ("soft", detail)
        return worst

    def serving_problems(self) -> dict[str, str]:
        """The problems of the rails llama-server uses now (a rail left
        out is no reason to refuse)."""
        with self.lock:
            return {a: p for a, p in self.worker_problems.items() if a in self.serving}

    def degraded(self) -> str | None:
        """"serving on rail0 only (...)", or None."""
        with self.lock:
            serving = set(self.serving)
        return rails_mod.describe(self.rails, serving)

    def may_degrade(self, problems: dict[str, str]) -> bool:
        """Whether leaving out these rails would let the service go on: each
        has a sibling rail on its worker that serves and has no problem."""
        if not self.rails or self.degrade_after <= 0:
            return False
        with self.lock:
            serving = set(self.serving)
        return all(rails_mod.spare_rails(self.rails, a, serving, problems) for a in problems)

    def refusal(self, queued: bool = False) -> str | None:
        """Why a request must get a 503 now, or None."""
        problems = self.serving_problems()
        with self.lock:
            needs_probe, engine_problem = self.needs_probe, self.engine_problem
            switching = self.switching
        if problems:
            reason = "worker unavailable: " + "; ".join(problems[a] for a in sorted(problems))
            if self.may_degrade(problems):
                reason += (f" (the service goes on over the worker's other rail(s) if this lasts "
                           f"{self.degrade_after:g} s)")
            return reason
        if needs_probe:
            return f"recovering: {engine_problem}"
        if switching and not queued:
            return f"recovering: {switching}"
        level, detail = self.memory_level()
        if level == "hard":
            return (f"memory above the hard watermark, {'queued request failed' if queued else 'request refused'}: "
                    f"{detail}")
        if level == "soft" and not queued:
            return f"memory above the soft watermark, new requests refused: {detail}"
        return None

    def abort_reason(self) -> str | None:
        """Why in-flight requests must end now (a worker is gone, the engine
        stalled), or None."""
        problems = self.serving_problems()
        if problems:
            return "worker unavailable: " + "; ".join(problems[a] for a in sorted(problems))
        with self.lock:
            stall = self.stall
        return f"recovering: {stall}" if stall else None

    def status(self) -> dict:
        level, detail = self.memory_level()
        with self.lock:
            names = {r.address: r.name for r in self.rails}
            return {"available": self.refusal() is None, "reason": self.refusal(),
                    "workers": [{"host": h, "address": a, "rail": names.get(a), "serving": a in self.serving,
                                 "problem": self.worker_problems.get(a)}
                                for h, a in self.workers],
                    "degraded": rails_mod.describe(self.rails, self.serving),
                    "memory": self.memory, "memory_level": level, "memory_detail": detail,
                    "active": self.active, "waiting": self.waiting, "queue_max": self.queue_max,
                    "slots": self.limit(), "soft": self.soft, "hard": self.hard,
                    "stalls": self.stalls, "stalled": self.stall,
                    "events": self.events[-20:]}

    def count_refusal(self, status: int, reason: str) -> None:
        kind = metrics.refusal_reason(status, reason)
        if kind:
            with self.lock:
                self.refusals[kind] = self.refusals.get(kind, 0) + 1

    def slots_now(self) -> list[dict] | None:
        """llama-server's /slots, None when it does not answer in time."""
        conn = http.client.HTTPConnection(*self.upstream, timeout=2)
        try:
            conn.request("GET", "/slots")
            response = conn.getresponse()
            data = response.read()
            return json.loads(data) if response.status == 200 else None
        except (OSError, ValueError):
            return None
        finally:
            conn.close()

    def metrics_text(self) -> str:
        status = self.status()
        with self.lock:
            refusals = dict(self.refusals)
        slots = self.slots_now()
        return metrics.render(status, refusals, metrics.kv_cache(slots if isinstance(slots, list) else None),
                              self.traffic)

    def limit(self) -> int:
        # past the soft watermark, one generation at a time
        return 1 if self.memory_level()[0] != "ok" else self.slots

    # ---- slots
    def acquire(self, cancelled) -> tuple[int, str] | None:
        """Wait for a slot; (status, reason) instead when the request must
        fail: 429 when the queue is full, 503 when the cluster is not whole."""
        with self.lock:
            if (self.active >= self.limit() and self.queue_max is not None
                    and self.waiting >= self.queue_max):
                return 429, (f"too many requests: {self.active} generating, {self.waiting} waiting "
                             f"(the queue holds {self.queue_max}); retry later")
            self.waiting += 1
            try:
                while self.active >= self.limit():
                    self.lock.wait(0.25)
                    reason = self.refusal(queued=True)
                    if reason:
                        return 503, reason
                    if cancelled():
                        return 503, "client went away"
            finally:
                self.waiting -= 1
            self.active += 1
        return None

    def progress(self) -> None:
        """A request was admitted or a token relayed: the engine moves."""
        with self.lock:
            self.last_progress = time.monotonic()

    def release(self) -> None:
        with self.lock:
            self.active -= 1
            self.lock.notify_all()

    # ---- monitor
    def poll_worker(self, host: str, address: str, results: dict) -> None:
        url = f"http://{address}:{self.agent_port}/status"
        try:
            with urllib.request.urlopen(url, timeout=min(self.grace, 1.5)) as response:
                status = json.loads(response.read())
        except (OSError, ValueError):
            return  # counted by the silence
        problem = next((r["problem"] for r in status.get("rpc", []) if r["address"] == address and not r["ok"]),
                       None)
        results[address] = (status.get("memory"), problem)

    def check_workers(self) -> None:
        results: dict = {}
        threads = [threading.Thread(target=self.poll_worker, args=(*w, results), daemon=True)
                   for w in self.workers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=self.grace)
        now = time.monotonic()
        problems = {}
        for host, address in self.workers:
            if address in results:
                memory, problem = results[address]
                self.last_ok[address] = now
                if memory:
                    self.memory[host] = memory
                if problem:
                    problems[address] = f"{host} rail {address}: {problem}"
            elif now - self.last_ok[address] > self.grace:
                problems[address] = (f"{host} rail {address}: its agent has not answered for "
                                     f"{now - self.last_ok[address]:.1f} s (node paused, powered off or the rail cut)")
        with self.lock:
            lost = sorted(set(problems) - set(self.worker_problems))
            back = sorted(set(self.worker_problems) - set(problems))
            gone = dict(self.worker_problems)
            self.worker_problems = problems
            for _, address in self.workers:
                if address in problems:
                    self.problem_since.setdefault(address, now)
                    self.healthy_since.pop(address, None)
                else:
                    self.healthy_since.setdefault(address, now)
                    self.problem_since.pop(address, None)
            if set(lost) & self.serving:
                self.needs_probe = True
                self.engine_problem = f"waiting for {self.facts['name']} after the worker came back"
                self.lock.notify_all()
        for address in lost:
            self.event("worker lost", problems[address])
        for address in back:
            self.event("worker back", gone[address])

    def probe(self) -> str | None:
        """A one-token completion; None when it answered."""
        path, body = self.facts["probe"]
        body = dict(body, model=self.model) if self.facts["probe_names_model"] else body
        return self._ask("POST", path, json.dumps(body), self.probe_timeout, need_ok=True)

    def loop_answers(self) -> str | None:
        """None when the engine's loop answers, else what it did (ENGINES'
        "loop": llama-server's /slots, answered between two batches, so it
        is given stall_after s: a long prompt's batch may take longer than
        the probe's time on a slow node; vLLM's probe)."""
        if self.facts["loop"] is None:
            return self.probe()
        method, path, body = self.facts["loop"]
        return self._ask(method, path, body, max(self.probe_timeout, self.stall_after), need_ok=False)

    def _ask(self, method: str, path: str, body: str | None, timeout: float, need_ok: bool) -> str | None:
        """One request to the engine: None when it answered (with 200 where
        need_ok), "hung" when it did not within timeout, else what it did."""
        name = self.facts["name"]
        conn = http.client.HTTPConnection(*self.upstream, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"} if body else {})
            response = conn.getresponse()
            response.read()
            if need_ok and response.status != 200:
                return f"{name} answered {response.status}"
            return None
        except (socket.timeout, TimeoutError):
            return "hung"
        except OSError as exc:
            return f"{name} not answering ({exc})"
        finally:
            conn.close()

    def stall_check(self) -> str | None:
        """Why the engine is stalled, or None: no token relayed for
        stall_after s while requests are in flight and its loop does not
        answer (a long prompt's first token takes long, but its loop turns),
        or, while idle, its probe hanging. A probe refused or answered with
        an error is an engine down, not stalled: 503 until it answers."""
        now = time.monotonic()
        with self.lock:
            active, quiet = self.active, now - self.last_progress
        if active and self.stall_after > 0 and quiet > self.stall_after:
            problem = self.loop_answers()
            if problem is None:
                self.progress()  # it turns: look again after another stall_after
                return None
            return (f"no token relayed for {quiet:.0f} s while {active} request(s) in flight, and its loop "
                    f"does not answer ({problem})")
        if active or self.idle_probe <= 0 or now - max(self.last_probe, self.last_progress) < self.idle_probe:
            return None
        self.last_probe = now
        problem = self.probe()
        if problem is None:
            return None
        if problem != "hung":
            # not a stall: the engine refused or answered an error (restarting,
            # loading, or its process gone: systemd starts it again); 503 with
            # that until it answers, unless a lost worker is the reason
            self.check_workers()
            if not self.serving_problems():
                self.upstream_failed(f"{problem} (the guard's idle probe)")
            return None
        return f"its probe failed while idle ({problem})"

    def stalled(self, why: str) -> None:
        """Refuse and end requests naming why, count it, restart the engine
        in order (its main process; systemd brings it back, the probe sees
        it answer)."""
        name = self.facts["name"]
        with self.lock:
            self.stall = f"{name} stalled: {why}"
            self.needs_probe = True
            self.engine_problem = self.stall
            self.stalls += 1
            self.lock.notify_all()
        self.event("stall", f"{name}: {why}")
        # not held back by restart_grace (which spares an engine still
        # loading after the last kill): a stall is only looked for once the
        # engine answered its probe since then, so it loaded and wedged
        self.restart_engine(f"stalled ({why})")

    def restart_engine(self, why: str = "hung after the workers came back") -> None:
        """Kill the engine's main process on the master for systemd to start
        again; an engine that runs as a group (ENGINES' "group": vLLM, whose
        rank cannot rejoin a running group) has every worker's restarted
        too, through its agent."""
        name = self.facts["name"]
        for process in self.facts["processes"]()[:1 if self.facts["group"] else None]:
            try:
                os.kill(process["pid"], signal.SIGKILL)
                self.event("restart", f"{name} (pid {process['pid']}) {why}: killed, systemd starts it again"
                                      + ("" if self.facts["group"] else " once every worker answers"))
            except OSError as exc:
                self.event("restart failed", f"{name} (pid {process['pid']}): {exc}")
        if self.facts["group"]:
            for host, address in self.workers:
                problem = self.restart_worker(address)
                self.event("restart" if problem is None else "restart failed",
                           f"{name} on {host}: {'killed, systemd starts it again' if problem is None else problem}")
        self.last_kill = time.monotonic()

    def monitor(self, stop: threading.Event) -> None:
        while not stop.is_set():
            started = time.monotonic()
            self.memory[socket.gethostname()] = node_memory()
            self.check_workers()
            if self.rails:
                self.reroute()
            workers_ok = not self.serving_problems()
            with self.lock:
                needs_probe = self.needs_probe
            if workers_ok and not needs_probe:
                why = self.stall_check()
                if why:
                    self.stalled(why)
                    needs_probe = False  # probed again on the next turn, after the restart began
            elif workers_ok and needs_probe:
                problem = self.probe()
                with self.lock:
                    if problem is None:
                        self.needs_probe = False
                        self.stall = None
                        self.last_progress = self.last_probe = time.monotonic()
                        self.lock.notify_all()
                    elif self.stall is None:
                        self.engine_problem = f"{self.facts['name']}: {problem}"
                if problem is None:
                    degraded = self.degraded()
                    self.event("available", f"{self.facts['name']} answers, {degraded}" if degraded
                               else f"{self.facts['name']} answers and every worker is up")
                elif problem == "hung" and workers_ok \
                        and time.monotonic() - self.last_kill > self.restart_grace:
                    self.restart_engine()
                elif self.facts["group"] and workers_ok:
                    # a group that lost a rank does not form again by itself (the
                    # others wait at the rendezvous or hold a broken group):
                    # restarted whole once it stays unavailable past the grace
                    self.unavailable_since = self.unavailable_since or time.monotonic()
                    if time.monotonic() - max(self.unavailable_since, self.last_kill) > self.restart_grace:
                        self.restart_engine(f"not available for {self.restart_grace:g} s with every worker up")
                if problem is None:
                    self.unavailable_since = None
            stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    # ---- serving on fewer rails
    def restart_worker(self, address: str) -> str | None:
        """Ask the worker's agent, over the rail, to restart the engine's
        process on it: llama.cpp's RPC server (it may hold the connection of
        a llama-server killed while the rail was cut: a one-client server
        never sees that end), vLLM's headless node. None when a new one
        listens."""
        request = urllib.request.Request(f"http://{address}:{self.agent_port}{agent.RESTART_PATH}", data=b"{}",
                                         method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return f"its agent answered {exc.code}: {exc.read().decode(errors='replace')[:200]}"
        except (OSError, ValueError) as exc:
            return f"its agent did not answer ({exc})"
        return None if answer.get("ok") else answer.get("problem", "not restarted")

    def reroute(self) -> None:
        """Leave out a rail that stayed down, take back one that stayed
        healthy: llama-server restarted on the rails that serve (rails.py)."""
        now = time.monotonic()
        with self.lock:
            serving = set(self.serving)
            wanted = rails_mod.target(self.rails, serving, dict(self.problem_since), dict(self.healthy_since),
                                      now, self.degrade_after, self.restore_after)
        if wanted == serving or now < self.next_switch:
            return
        added = sorted(wanted - serving)
        after = rails_mod.describe(self.rails, wanted)
        if added:
            # back to more rails: a restart of a serving llama-server; new requests wait, those in flight end
            with self.lock:
                if self.switch_wait_since is None:
                    self.switch_wait_since = now
                self.switching = f"returning to {after or 'every rail'}"
                busy = self.active + self.waiting
            if busy and now - self.switch_wait_since < self.drain_limit:
                return
            for address in added:
                problem = self.restart_worker(address)
                if problem:
                    self.event("switch failed", f"the RPC server on {address} was not restarted: {problem}; "
                                                "trying again in 10 s")
                    self.next_switch = now + 10
                    with self.lock:
                        self.switching, self.switch_wait_since = None, None
                    return
                self.event("rpc restarted", f"the RPC server on {address}: a new one listens")
        try:
            rails_mod.write_override(self.override, rails_mod.override_env(self.rails, wanted, self.master_share))
        except OSError as exc:
            self.event("switch failed", f"{self.override}: {exc}; trying again in 10 s")
            self.next_switch = now + 10
            return
        with self.lock:
            self.serving = wanted
            self.switching, self.switch_wait_since = None, None
            self.needs_probe = True
            self.engine_problem = f"llama-server restarting, {after or 'on every rail again'}"
            self.lock.notify_all()
        if after:
            self.event("degraded", f"{after}: a rail down for {self.degrade_after:g} s; llama-server restarted "
                                   "without it")
        else:
            self.event("restored", f"every rail serves again (healthy for {self.restore_after:g} s)")
        self.restart_engine("restarted on the rails that serve" if after else "restarted on every rail")

    def upstream_failed(self, detail: str) -> None:
        with self.lock:
            if not self.needs_probe:
                self.needs_probe = True
                self.engine_problem = detail
        self.event("upstream failed", detail)


def parse_workers(spec: str) -> list[tuple[str, str, str]]:
    """host@address[=rail name], comma separated: (host, address, name)."""
    workers = []
    for item in spec.split(","):
        host, sep, rest = item.strip().partition("@")
        address, _, name = rest.partition("=")
        if not sep or not host or not address:
            raise SystemExit(f"twinrail-guard: --workers: expected host@address[=rail][,host@address[=rail]...], "
                             f"got {spec!r}")
        workers.append((host, address, name))
    return workers


def run_proxy(args) -> None:
    host, _, port = args.upstream.rpartition(":")
    workers = parse_workers(args.workers)
    rails, master_share = None, None
    if args.rpc_servers and args.split:
        try:
            rails, master_share = rails_mod.build_rails(workers, args.rpc_servers.split(","),
                                                        rails_mod.parse_split(args.split),
                                                        rails_mod.parse_counts(args.server_devices),
                                                        args.master_devices)
        except ValueError as exc:
            raise SystemExit(f"twinrail-guard: {exc}") from None
    guard = Guard([(h, a) for h, a, _ in workers], args.agent_port, (host, int(port)),
                  args.soft, args.hard, args.slots, interval=args.interval, grace=args.grace,
                  probe_timeout=args.probe_timeout, restart_grace=args.restart_grace,
                  keys=access.Keys(args.keys or None), queue_max=args.queue_max if args.queue_max >= 0 else None,
                  rails=rails, master_share=master_share, degrade_after=args.degrade_after or 0.0,
                  restore_after=args.restore_after or 0.0, override=args.override, model=args.model,
                  engine=args.engine, stall_after=args.stall_after, idle_probe=args.idle_probe)
    stop = threading.Event()
    threading.Thread(target=guard.monitor, args=(stop,), daemon=True).start()
    server = http.server.ThreadingHTTPServer((args.listen_host, args.listen_port), make_proxy_handler(guard))
    server.daemon_threads = True
    log(f"proxy: {args.listen_host}:{args.listen_port} -> {args.upstream}; workers "
        f"{', '.join(f'{h}@{a}' for h, a in guard.workers)}; watermarks {args.soft}% / {args.hard}%; "
        f"API keys {', '.join(guard.keys.names()) or 'none'} ({args.keys or 'no file'}); "
        f"queue {'unbounded' if guard.queue_max is None else guard.queue_max}; "
        + (f"a rail down {guard.degrade_after:g} s is left out, back after {guard.restore_after:g} s healthy "
           f"({args.override})" if rails and guard.degrade_after > 0 else "every rail always serves")
        + (f"; now {guard.degraded()}" if guard.degraded() else "")
        + (f"; stall watchdog: no token for {guard.stall_after:g} s in flight, probe every {guard.idle_probe:g} s "
           "idle" if guard.stall_after > 0 or guard.idle_probe > 0 else "; stall watchdog off"))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    stop.set()
