# -*- coding: utf-8 -*-
"""When a measurement means something: the bandwidth baseline and the
acceptance verdict, kept on the controller, and what would make them stale.

A re-run of site.yml on a serving cluster must not load its rails or its
service for nothing. The bandwidth stage measures when the rails'
configuration, their driver, firmware or PCIe link, a node's kernel, the
gate's own settings or the nodes changed since the kept baseline, when the
baseline is older than a set age, failed, or when the error counters grew
since it was taken; the acceptance stage when what is deployed (runtime,
guard, weights, service configuration, the node itself) or its own
settings changed, or the last verdict failed. Either runs when asked. Each
decision comes with its reasons, in words, for the run's output.
"""

from __future__ import annotations

import calendar
import time

# the report's run name: reports/<run>/ (date -u +%Y%m%dT%H%M%SZ)
RUN_FORMAT = "%Y%m%dT%H%M%SZ"
MODES = ("auto", "always")
# the options every measuring judge takes (doc fragment twinrail_measure)
MEASURE_OPTIONS = {
    "mode": {"type": "str", "choices": list(MODES), "default": "auto"},
    "asked": {"type": "bool", "default": False},
}


def asked_reasons(stage: str, setting: str, mode: str, asked: bool) -> list[str]:
    """The reasons a run was asked to measure: the stage run alone
    (--tags <stage>), or its setting at always."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return ((["asked for (--tags " + stage + " alone)"] if asked else [])
            + ([f"asked for ({setting}=always)"] if mode == "always" else []))


def decision(stage: str, reasons: list[str], held: str) -> dict:
    """measure, reasons and msg: measuring, with every reason, or ``held``
    (why the kept result still holds)."""
    return {"measure": bool(reasons), "reasons": reasons,
            "msg": f"{stage}: measuring: " + "; ".join(reasons) if reasons else held}


def run_time(run: str) -> float | None:
    """Seconds since the epoch of a run named like 20261201T103000Z."""
    try:
        return float(calendar.timegm(time.strptime(run, RUN_FORMAT)))
    except (TypeError, ValueError):
        return None


def run_date(run: str) -> str:
    when = run_time(run)
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(when)) if when is not None else str(run)


def _age(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


def _diff(prefix: str, old: dict, new: dict) -> list[str]:
    """Every key whose value differs, as "prefix key old -> new", sorted."""
    out = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            out.append(f"{prefix}{key} {old.get(key)!r} -> {new.get(key)!r}")
    return out


# --------------------------------------------------------------------------
# bandwidth

def bandwidth_fingerprint(rails: dict, links: dict) -> dict:
    """What a bandwidth baseline is valid for, per host: the node itself
    (machine-id), its kernel and, per
    rail, the configuration (interface, address, RDMA device, MTU asked) and
    what the link shows (negotiated rate, MTU, driver, firmware, PCIe link).

    rails: {host: twinrail_rails}; links: {host: rdma_link_facts result}.
    """
    out = {}
    for host in sorted(rails):
        facts = links.get(host) or {}
        states = facts.get("rails") or {}
        per_rail = {}
        for rail in sorted(rails[host] or [], key=lambda r: r["name"]):
            state = states.get(rail["name"]) or {}
            net = state.get("netdev") or {}
            port = state.get("port") or {}
            per_rail[rail["name"]] = {
                "interface": rail.get("interface"),
                "address": rail.get("address"),
                "rdma_device": rail.get("rdma_device") or "",
                "mtu": net.get("mtu"),
                "rate_gbps": state.get("rate_gbps"),
                "driver": net.get("driver"),
                "firmware": port.get("fw_ver") or net.get("firmware"),
                "pci_link": net.get("pci_link"),
            }
        out[host] = {"machine_id": facts.get("machine_id"), "kernel": facts.get("kernel"), "rails": per_rail}
    return out


# Counted as "dropped" without anything being wrong with the link: rx for
# frames of a protocol nobody listens to (LLDP, a peer's IPv6 multicast),
# tx for packets a veth or a stopped peer could not take while a service
# restarted. They do not make a baseline stale (a measurement's own verdict
# still reads them, before and after, with the rails otherwise quiet).
NOT_LINK_ERRORS = ("netdev.rx_dropped", "netdev.tx_dropped")


def _grown(before: dict, after: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in sorted(after)
            if k not in NOT_LINK_ERRORS and isinstance(after[k], int) and after[k] > before.get(k, 0)}


def bandwidth_due(baseline: dict | None, fingerprint: dict, settings: dict, counters: dict,
                  now: float, max_age_s: float, mode: str, asked: bool) -> dict:
    """Whether the bandwidth stage measures, and why (or why not).

    baseline: the kept report (reports/latest/bandwidth.json) or None;
    counters: {host: {rail: {counter: value}}} read now.
    """
    reasons = asked_reasons("bandwidth", "bandwidth_gate_measure", mode, asked)
    run = (baseline or {}).get("run")
    if not baseline:
        reasons.append("no baseline kept on the controller")
    elif "fingerprint" not in baseline:
        reasons.append(f"the baseline of {run_date(run)} does not say what it was measured on")
    else:
        if not baseline.get("passed"):
            reasons.append(f"the baseline of {run_date(run)} failed its gate")
        taken = run_time(run)
        if taken is None:
            reasons.append(f"the baseline's date is unreadable ({run!r})")
        elif now - taken > max_age_s:
            reasons.append(f"the baseline is {_age(now - taken)} old (at most {_age(max_age_s)})")
        old = baseline["fingerprint"]
        for host in sorted(set(old) | set(fingerprint)):
            if host not in old:
                reasons.append(f"{host} is not in the baseline")
                continue
            if host not in fingerprint:
                reasons.append(f"{host} was in the baseline and is not in this run")
                continue
            if old[host].get("machine_id") != fingerprint[host].get("machine_id"):
                reasons.append(f"{host}: not the node the baseline was measured on (machine-id "
                               f"{old[host].get('machine_id')} -> {fingerprint[host].get('machine_id')})")
            if old[host].get("kernel") != fingerprint[host].get("kernel"):
                reasons.append(f"{host}: kernel {old[host].get('kernel')} -> {fingerprint[host].get('kernel')}")
            old_rails, new_rails = old[host].get("rails", {}), fingerprint[host].get("rails", {})
            for rail in sorted(set(old_rails) | set(new_rails)):
                if rail not in old_rails or rail not in new_rails:
                    reasons.append(f"{host}: {rail} {'added' if rail not in old_rails else 'removed'}")
                    continue
                reasons.extend(_diff(f"{host}: {rail} ", old_rails[rail], new_rails[rail]))
        reasons.extend(_diff("setting ", baseline.get("settings", {}), settings))
        kept = baseline.get("counters", {})
        for host in sorted(counters):
            for rail in sorted(counters[host]):
                grown = _grown(kept.get(host, {}).get(rail, {}), counters[host][rail])
                if grown:
                    reasons.append(f"{host}: {rail} error counters grew since the baseline: "
                                   + ", ".join(f"{k} +{v}" for k, v in grown.items()))
    held = "" if reasons else (
        f"bandwidth: baseline of {run_date(run)} still valid (same kernel, rails, driver, firmware, "
        f"links and settings on {', '.join(sorted(fingerprint))}; no error counter grew; "
        f"{_age(now - run_time(run))} old, at most {_age(max_age_s)}): nothing measured")
    return {**decision("bandwidth", reasons, held), "baseline_run": run}


# --------------------------------------------------------------------------
# acceptance

def deployed_key(record: dict) -> dict:
    """What an acceptance verdict is valid for on one node: the node itself
    and what it serves (from its deployment record)."""
    return {
        "machine_id": record.get("machine_id"),
        "runtime": (record.get("runtime") or {}).get("release"),
        "guard": (record.get("guard") or {}).get("sha256"),
        "models": {name: (model or {}).get("manifest_sha256")
                   for name, model in sorted((record.get("models") or {}).items())},
        "config_version": record.get("config_version"),
    }


def acceptance_due(last: dict | None, records: dict, settings: dict, mode: str, asked: bool) -> dict:
    """Whether the acceptance stage measures, and why (or why not).

    last: the newest acceptance report (reports/<run>/acceptance.json) or
    None; records: {host: deployment record read in this run, or None}.
    """
    reasons = asked_reasons("acceptance", "acceptance_measure", mode, asked)
    deployed = {}
    for host in sorted(records):
        if not records[host]:
            reasons.append(f"{host}: what is deployed was not read in this run")
        else:
            deployed[host] = deployed_key(records[host])
    context = (last or {}).get("context") or {}
    run = context.get("run")
    if not last:
        reasons.append("no acceptance report kept on the controller")
    elif "deployed" not in context:
        reasons.append(f"the report of {run_date(run)} does not say what it was measured on")
    else:
        if last.get("failures"):
            reasons.append(f"the report of {run_date(run)} failed {len(last['failures'])} check(s)")
        old = context["deployed"]
        for host in sorted(set(old) | set(deployed)):
            if host not in deployed:
                continue  # not read: said above
            if host not in old:
                reasons.append(f"{host} is not in the last report")
                continue
            for key in ("machine_id", "runtime", "guard", "models", "config_version"):
                if old[host].get(key) != deployed[host].get(key):
                    what = {"machine_id": "the node itself (machine-id)", "runtime": "runtime release",
                            "guard": "guard", "models": "weights", "config_version": "service configuration"}[key]
                    reasons.append(f"{host}: {what} {old[host].get(key)!r} -> {deployed[host].get(key)!r}")
        reasons.extend(_diff("setting ", context.get("settings", {}), settings))
    held = (f"acceptance: verdict of {run_date(run)} still valid (PASS; same runtime, guard, weights, "
            f"configuration and settings on {', '.join(sorted(deployed))}): nothing measured")
    return {**decision("acceptance", reasons, held), "last_run": run, "deployed": deployed}


# --------------------------------------------------------------------------
# the group's collectives (NCCL on GPU nodes, gloo on CPU nodes)

def starting_nodes(running: dict, restart: bool) -> list[str]:
    """The nodes whose engine starts in this run: every node when the group
    restarts, else those whose unit is not active (``running``: {node:
    what `systemctl is-active` said})."""
    return sorted(running) if restart else sorted(n for n, said in running.items() if said != "active")


def collective_due(kept: dict | None, fingerprint: dict, starting: list[str], mode: str, asked: bool) -> dict:
    """Whether the engine's collectives are measured before the group
    (re)starts, and why (or why not).

    kept: the last report (reports/<site>/collectives.json) or None;
    fingerprint: what this run's group is (each node's engine environment,
    the runtime release, the bandwidth report the requirement comes from,
    the settings); starting: the nodes whose engine is not running now or
    is restarted by this run (its configuration changed): the group loads
    its model after the measurement, so a group that starts is measured.
    """
    reasons = asked_reasons("collectives", "inference_service_measure", mode, asked)
    run = (kept or {}).get("run")
    if starting:
        reasons.append(f"the group starts on {', '.join(sorted(starting))} (its engine is not running or its "
                       "configuration changed)")
    if not kept:
        reasons.append("no collectives report kept on the controller")
    elif "fingerprint" not in kept:
        reasons.append(f"the report of {run_date(run)} does not say what it was measured on")
    else:
        if not kept.get("passed"):
            reasons.append(f"the report of {run_date(run)} failed its gate")
        old = kept["fingerprint"]
        for key in sorted(set(old) | set(fingerprint)):
            if key == "hosts":
                for host in sorted(set(old.get(key) or {}) | set(fingerprint.get(key) or {})):
                    before, now = (old.get(key) or {}).get(host), (fingerprint.get(key) or {}).get(host)
                    if before is None or now is None:
                        reasons.append(f"{host} {'is not in' if before is None else 'left'} the last report")
                    else:
                        reasons.extend(_diff(f"{host}: ", before, now))
            elif key == "settings":
                reasons.extend(_diff("setting ", old.get(key) or {}, fingerprint.get(key) or {}))
            elif old.get(key) != fingerprint.get(key):
                reasons.append(f"{key} {old.get(key)!r} -> {fingerprint.get(key)!r}")
    held = (f"collectives: the report of {run_date(run)} still holds (PASS; the group serves with the same "
            f"environment, runtime, rails and settings on {', '.join(sorted(fingerprint.get('hosts') or {}))}): "
            "nothing measured")
    return {**decision("collectives", reasons, held), "last_run": run}
