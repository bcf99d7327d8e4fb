"""Serving on fewer rails: which of the workers' RPC servers llama-server
uses, and the split of the layers over them.

Each rail of a worker has its own RPC server holding its share of the
layers (--tensor-split, planned by module_utils/engines/llamacpp/tensor_split.py). With one
rail cut, llama-server cannot go on: it needs every server it loaded onto.
It can be started again without the cut rail's server, the worker's share
moved onto its other rails' servers (the same node, the same memory; the
servers' tensor caches make the reload fast). The guard does that when a
rail stays down for ``degrade_after`` seconds, and returns to every rail
once the cut one has been healthy for ``restore_after`` seconds.

A worker with several GPUs runs the same servers, each exposing every one
of its GPUs (ggml-rpc-server --device), each GPU one device of llama.cpp
with its own proportion: a GPU's proportion sits on one rail's server and
is 0 on the others. Left out, a rail's GPUs keep their layers, reached
through another rail's server: the same GPUs, the same memory.

The guard tells llama-server's unit through an environment file in its
runtime directory (``EnvironmentFile=-/run/twinrail-guard/rails.env`` in the
unit, after the service configuration): the --rpc list and the split of
the rails that serve. No file: every rail serves (the configuration's own
list). Pure Python, no I/O but the file's."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rail:
    host: str  # the worker
    address: str  # its rail address (the agent answers there, the RPC server listens there)
    name: str  # rail0, rail1 ... (the inventory's twinrail_rails[].name)
    endpoint: str  # address:port, as in llama-server's --rpc
    share: float  # its proportions in --tensor-split, summed
    shares: tuple = ()  # one proportion per device the server exposes (its GPUs), in --tensor-split order

    @property
    def devices(self) -> tuple:
        return self.shares or (self.share,)


def parse_split(text: str) -> list[float]:
    """The proportions of ``--tensor-split 0.25,0.25,0.5`` (or of the list
    alone)."""
    text = text.strip()
    if text.startswith("--tensor-split"):
        text = text[len("--tensor-split"):].strip()
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--tensor-split: expected proportions such as 0.25,0.25,0.5, got {text!r}") from None
    if not values or any(v < 0 for v in values) or sum(values) <= 0:
        raise ValueError(f"--tensor-split: expected proportions such as 0.25,0.25,0.5, got {text!r}")
    return values


def parse_counts(text: str) -> list[int] | None:
    """``--server-devices 8,8``: the devices each RPC server exposes; None
    for '' (one each)."""
    if not (text or "").strip():
        return None
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"--server-devices: expected counts such as 8,8, got {text!r}") from None
    return counts


def build_rails(workers: list[tuple[str, str, str]], rpc_servers: list[str],
                split: list[float], server_devices: list[int] | None = None,
                master_devices: int | None = None) -> tuple[list[Rail], float | None]:
    """The rails in --rpc order, each with its share, and the master's own
    share (its GPU's proportion after the RPC servers' ones; with several
    GPUs, their proportions as a tuple) or None (a CPU master: its layers are set by -ngl, not by the split).

    ``workers``: (host, rail address, rail name) per worker rail;
    ``server_devices``: how many devices each server exposes, in --rpc
    order (one each when not given); ``master_devices``: how many of the
    master's own GPUs follow (none given: one or none)."""
    counts = list(server_devices) if server_devices else [1] * len(rpc_servers)
    if len(counts) != len(rpc_servers) or any(int(c) < 1 for c in counts):
        raise ValueError(f"--server-devices: expected one count of 1 or more per RPC server ({len(rpc_servers)}), "
                         f"got {','.join(map(str, counts))}")
    needed = sum(counts)
    extra = len(split) - needed
    if extra < 0 or (extra > 1 if master_devices is None else extra not in (0, int(master_devices))):
        raise ValueError(f"--tensor-split has {len(split)} proportion(s) for {len(rpc_servers)} RPC server(s) "
                         f"with {needed} device(s) (expected one per device, then one per GPU of the master's"
                         f"{'' if master_devices is None else f', {int(master_devices)}'})")
    by_address = {address: (host, name) for host, address, name in workers}
    rails, at = [], 0
    for endpoint, count in zip(rpc_servers, counts):
        address = endpoint.rpartition(":")[0]
        if address not in by_address:
            raise ValueError(f"--rpc-servers: {endpoint} is no worker rail of --workers "
                             f"({', '.join(sorted(by_address))})")
        host, name = by_address[address]
        shares = tuple(split[at:at + int(count)])
        at += int(count)
        rails.append(Rail(host, address, name, endpoint, sum(shares), shares if int(count) > 1 else ()))
    rest = tuple(split[at:])
    master = None if not rest else rest[0] if len(rest) == 1 else rest
    return rails, master


def plan(rails: list[Rail], serving: set[str], master_share) -> tuple[list[str], list[float]]:
    """The --rpc list and the proportions with only ``serving`` (rail
    addresses): each device's share of a worker (device j: its GPU j, the
    one device of a server without GPUs of its own) spread over the rails
    that serve, in the ratio of their own shares of it, or evenly where
    only left-out rails held it (a GPU whose layers came through the cut
    rail now comes through another). A worker with no rail serving keeps
    none (the caller never asks for that: see ``target``).
    ``master_share``: the master's proportion, or its GPUs' list, or None."""
    total: dict[tuple[str, int], float] = {}
    kept: dict[tuple[str, int], float] = {}
    serving_rails: dict[str, int] = {}
    for rail in rails:
        if rail.address in serving:
            serving_rails[rail.host] = serving_rails.get(rail.host, 0) + 1
        for j, share in enumerate(rail.devices):
            total[rail.host, j] = total.get((rail.host, j), 0.0) + share
            if rail.address in serving:
                kept[rail.host, j] = kept.get((rail.host, j), 0.0) + share
    endpoints, proportions = [], []
    for rail in rails:
        if rail.address not in serving:
            continue
        endpoints.append(rail.endpoint)
        for j, share in enumerate(rail.devices):
            held = kept.get((rail.host, j), 0.0)
            proportions.append(share * total[rail.host, j] / held if held > 0
                               else total[rail.host, j] / serving_rails[rail.host])
    if master_share is not None:
        proportions.extend(master_share if isinstance(master_share, (list, tuple)) else [master_share])
    whole = sum(proportions)
    return endpoints, [round(p / whole, 4) for p in proportions]


def spare_rails(rails: list[Rail], address: str, serving: set[str], down) -> list[Rail]:
    """The rails of the same worker as ``address`` that serve and are not
    ``down``: what would carry its share if it were left out (none: it
    cannot be)."""
    host = next((r.host for r in rails if r.address == address), None)
    return [r for r in rails if r.host == host and r.address != address
            and r.address in serving and r.address not in down]


def target(rails: list[Rail], serving: set[str], problem_since: dict[str, float],
           healthy_since: dict[str, float], now: float, degrade_after: float,
           restore_after: float) -> set[str]:
    """The rails that should serve now.

    A serving rail whose problem has lasted ``degrade_after`` seconds is
    left out, when its worker keeps another rail that serves and has no
    problem (a worker with every rail down leaves nothing to serve on: the
    guard refuses, as before). A rail left out comes back once healthy for
    ``restore_after`` seconds. ``degrade_after`` <= 0: never leave one
    out."""
    wanted = set(serving)
    for rail in rails:
        if rail.address not in serving and rail.address in healthy_since \
                and now - healthy_since[rail.address] >= restore_after:
            wanted.add(rail.address)
    if degrade_after <= 0:
        return wanted
    for rail in rails:
        since = problem_since.get(rail.address)
        if rail.address not in wanted or since is None or now - since < degrade_after:
            continue
        if spare_rails(rails, rail.address, wanted, problem_since):
            wanted.discard(rail.address)
    return wanted


def describe(rails: list[Rail], serving: set[str]) -> str | None:
    """"serving on rail0 only (lab-worker1 rail1 left out)", or None when
    every rail serves."""
    out = [r for r in rails if r.address not in serving]
    if not out:
        return None
    hosts = {r.host for r in out}
    names = sorted({r.name for r in rails if r.host in hosts and r.address in serving})
    left = ", ".join(f"{r.host} {r.name} ({r.address})" for r in out)
    return f"serving on {' and '.join(names)} only ({left} left out)"


def override_env(rails: list[Rail], serving: set[str], master_share: float | None) -> str | None:
    """The environment file's text for llama-server's unit, or None when
    every rail serves (no file: the configuration's own list)."""
    reason = describe(rails, serving)
    if reason is None:
        return None
    endpoints, proportions = plan(rails, serving, master_share)
    return (f"# written by twinrail-guard: {reason}; removed when every rail serves again\n"
            f"TWINRAIL_RPC_SERVERS={','.join(endpoints)}\n"
            f"TWINRAIL_SPLIT_ARGS=\"--tensor-split {','.join(f'{p:g}' for p in proportions)}\"\n")


_SERVERS = re.compile(r"^TWINRAIL_RPC_SERVERS=(?P<list>\S*)\s*$", re.M)


def read_override(path: str, rails: list[Rail]) -> set[str] | None:
    """The rails serving according to the file a guard wrote before (a
    restarted guard goes on where it was), or None: no file, or one naming
    a server not in today's list (a changed configuration: ignored)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    match = _SERVERS.search(text)
    if not match:
        return None
    by_endpoint = {r.endpoint: r.address for r in rails}
    endpoints = [e for e in match.group("list").split(",") if e]
    if not endpoints or any(e not in by_endpoint for e in endpoints):
        return None
    serving = {by_endpoint[e] for e in endpoints}
    if {r.host for r in rails} - {r.host for r in rails if r.address in serving}:
        return None  # a worker with no rail: not a file this guard writes
    return serving


def write_override(path: str, text: str | None) -> None:
    """Write the file atomically, or remove it (text None)."""
    if text is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)
