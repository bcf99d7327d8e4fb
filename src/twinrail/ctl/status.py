"""`twinrail status`: the cluster's state in the order a person checks it,
judged into one verdict (HEALTH_OK, HEALTH_WARN, HEALTH_ERR) with an exit
code to match (0, 1, 2). Pure functions over the nodes' probes (probe.py)
and the controller's reports; the JSON schema is in docs/cli.md."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime, timezone
from pathlib import Path

from twinrail.guard import gpu as gpu_telemetry
from twinrail.guard.memory import parse_meminfo
from twinrail.guard.transport import parse_log, server_problem

from .. import loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.gpu import facts as gpu_facts
from ansible.module_utils.gpu import health as gpu_health
from .inventory import Cluster

SCHEMA = 1
CODES = {"HEALTH_OK": 0, "HEALTH_WARN": 1, "HEALTH_ERR": 2}
# the project's checkout (its reports/, its module_utils/)
REPO = Path(__file__).resolve().parents[3]


def _parse_rpc_log(text: str) -> dict:
    return parse_log(text)


def transport(journal: str, rdma_device: str) -> str:
    """tcp or rdma, from the RPC server's journal since it started: rdma
    only when the newest client connection activated RDMA; failed when the
    log shows the server failing."""
    log = _parse_rpc_log(journal or "")
    if log["failures"]:
        return "failed: " + server_problem(log).split(": ", 1)[1]
    connections = log["connections"]
    if not connections:
        return "no connection yet"
    return "rdma" if connections[-1]["rdma"] else "tcp"


def _metric(text: str, name: str) -> float | None:
    match = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})?\s+(\S+)", text or "", re.M)
    return float(match.group(1)) if match else None


def _age(stamp: str | None, now: float) -> str:
    if not stamp:
        return ""
    try:
        then = datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return ""
    hours = (now - then) / 3600
    return f"{hours:.1f} h ago" if hours < 48 else f"{hours / 24:.0f} days ago"


def reports_of(directory: Path) -> dict:
    """The last bandwidth baseline and acceptance verdict on the controller."""
    out = {"bandwidth": None, "acceptance": None}
    baseline = directory / "latest" / "bandwidth.json"
    if baseline.exists():
        data = json.loads(baseline.read_text())
        out["bandwidth"] = {"run": data.get("run"), "passed": bool(data.get("passed")),
                            "failures": data.get("failures", [])}
    found = sorted(directory.glob("*/acceptance.json")) if directory.exists() else []
    if found:
        data = json.loads(found[-1].read_text())
        out["acceptance"] = {"run": (data.get("context") or {}).get("run"), "passed": not data.get("failures"),
                             "failures": data.get("failures", [])}
    return out


def last_minute(prometheus: dict) -> tuple[float | None, list[dict] | None]:
    """(tokens generated per second over the last minute, the alerts
    firing) from the master's Prometheus answers; None where it did not
    answer."""
    tokens = alerts = None
    try:
        result = json.loads(prometheus["tokens"]["body"])["data"]["result"]
        tokens = float(result[0]["value"][1]) if result else 0.0
    except (KeyError, ValueError, TypeError, IndexError):
        pass
    try:
        found = json.loads(prometheus["alerts"]["body"])["data"]["alerts"]
        alerts = sorted(({"name": a["labels"].get("alertname"), "severity": a["labels"].get("severity", ""),
                          "summary": (a.get("annotations") or {}).get("summary", ""), "since": a.get("activeAt")}
                         for a in found if a.get("state") == "firing"), key=lambda a: (a["name"], a["summary"]))
    except (KeyError, ValueError, TypeError):
        pass
    return tokens, alerts


def judge(cluster: Cluster, probes: dict, reports: dict, now: float | None = None) -> dict:
    """The status document: nodes (units, rails, memory), the service, the
    deployment, the reports, and the checks that set the verdict."""
    now = now or time.time()
    checks = []

    def check(severity, node, what, message):
        checks.append({"severity": severity, "node": node, "what": what, "message": message})

    s = cluster.settings
    unset = [k for k in ("twinrail_memory_soft_watermark_pct", "twinrail_memory_hard_watermark_pct") if s.get(k) is None]
    if unset:
        check("WARN", None, "inventory", f"the inventory sets no {' or '.join(unset)}: memory is not judged")
    soft, hard = (None, None) if unset else (float(s["twinrail_memory_soft_watermark_pct"]),
                                             float(s["twinrail_memory_hard_watermark_pct"]))
    guard = {}
    master_probe = probes.get(cluster.master.name, {})
    if master_probe.get("guard", {}).get("status") in (200, 503):
        try:
            guard = json.loads(master_probe["guard"]["body"])
        except ValueError:
            guard = {}
    nodes = []
    for node in cluster.nodes:
        # a node without a probe was not read: unreachable, never a healthy default
        probe = probes.get(node.name) or {"unreachable": "not probed"}
        entry = {"name": node.name, "role": node.role, "host": node.host, "reachable": "unreachable" not in probe,
                 "units": [], "rails": [], "memory": None}
        nodes.append(entry)
        if not entry["reachable"]:
            entry["error"] = probe.get("unreachable")
            check("ERR", node.name, "node", f"{node.name} ({node.host}) unreachable: {probe.get('unreachable')}")
            continue
        for unit, monitoring in ([(u, False) for u in node.units(cluster.engine)]
                                 + [(u, True) for u in node.monitoring_units()]):
            shown = probe["units"].get(unit, {})
            state = shown.get("ActiveState", "not installed")
            row = {"unit": unit, "active": state, "sub": shown.get("SubState"),
                   "since": shown.get("ActiveEnterTimestamp") or None, "restarts": int(shown.get("NRestarts") or 0)}
            entry["units"].append(dict(row, monitoring=True) if monitoring else row)
            if state != "active" and monitoring:
                check("WARN", node.name, unit, f"{node.name}: {unit} (monitoring) is {state}")
            elif state != "active":
                check("ERR", node.name, unit, f"{node.name}: {unit} is {state}")
        links = {link["ifname"]: link for link in probe.get("links", [])}
        addresses = {a["ifname"]: [i["local"] for i in a.get("addr_info", [])] for a in probe.get("addresses", [])}
        for rail in node.rails:
            link = links.get(rail.interface)
            rpc_unit = f"twinrail-rpc@{rail.address}.service"
            row = {"rail": rail.name, "interface": rail.interface, "address": rail.address,
                   "link": "absent" if link is None else link.get("operstate", "UNKNOWN"),
                   "mtu": link.get("mtu") if link else None, "speed_mbps": probe.get("speeds", {}).get(rail.interface),
                   "addressed": rail.address in addresses.get(rail.interface, []),
                   "transport": (transport(probe.get("journals", {}).get(rpc_unit, ""), rail.rdma_device)
                                 if node.role == "worker" else None)}
            entry["rails"].append(row)
            if row["link"] != "UP":
                check("ERR", node.name, rail.name, f"{node.name}: {rail.name} ({rail.interface}) link {row['link']}")
            elif not row["addressed"]:
                check("ERR", node.name, rail.name, f"{node.name}: {rail.name} ({rail.interface}) lacks its address "
                                                   f"{rail.address}")
            if row["mtu"] and s.get("twinrail_rail_mtu") and int(row["mtu"]) != int(s["twinrail_rail_mtu"]):
                check("WARN", node.name, rail.name, f"{node.name}: {rail.name} MTU {row['mtu']}, the inventory says "
                                                    f"{s['twinrail_rail_mtu']}")
            if (row["transport"] or "").startswith("failed"):
                check("ERR", node.name, rail.name, f"{node.name}: {rail.name}'s RPC server {row['transport']}")
            if rail.rdma_device and row["transport"] == "tcp":
                check("WARN", node.name, rail.name, f"{node.name}: {rail.name}'s RPC server serves over TCP although "
                                                    f"the rail has RDMA device {rail.rdma_device}")
        if probe.get("gpu"):
            entry["gpus"] = gpus(node.name, probe["gpu"], check)
        memory = (guard.get("memory") or {}).get(node.name)
        if memory and soft is not None:
            entry["memory"] = {"percent": memory.get("percent"), "used": memory.get("used"),
                               "total": memory.get("total"), "soft_pct": soft, "hard_pct": hard}
            pct = float(memory.get("percent") or 0)
            if pct >= hard:
                check("ERR", node.name, "memory", f"{node.name}: memory {pct:.1f} %, past the hard watermark {hard} %")
            elif pct >= soft:
                check("WARN", node.name, "memory", f"{node.name}: memory {pct:.1f} %, past the soft watermark {soft} %")

    metrics = (master_probe.get("llama_metrics") or {}).get("body", "")
    proxy = master_probe.get("proxy") or {}
    service = {"available": guard.get("available"), "reason": guard.get("reason"), "slots_busy": guard.get("active"),
               "slots": guard.get("slots"), "queued": guard.get("waiting"), "queue_max": guard.get("queue_max"),
               "proxy_http": proxy.get("status"),
               "decode_tps": _metric(metrics, "llamacpp:predicted_tokens_seconds"),
               "requests_processing": _metric(metrics, "llamacpp:requests_processing"),
               "requests_deferred": _metric(metrics, "llamacpp:requests_deferred"),
               "tokens_per_s_1m": None, "alerts": None, "degraded": guard.get("degraded")}
    prometheus = master_probe.get("prometheus")
    if prometheus:
        service["tokens_per_s_1m"], service["alerts"] = last_minute(prometheus)
        for alert in service["alerts"] or []:
            check("ERR" if alert["severity"] == "critical" else "WARN", None, "alert",
                  f"alert {alert['name']}: {alert['summary']}")
    if master_probe and "unreachable" not in master_probe:
        if not guard:
            check("ERR", cluster.master.name, "service", f"{cluster.master.name}: the guard does not answer "
                                                         f"({master_probe.get('guard', {}).get('error', 'no status')})")
        elif not guard.get("available"):
            check("ERR", cluster.master.name, "service", f"service unavailable: {guard.get('reason')}")
        if guard.get("degraded"):
            check("WARN", cluster.master.name, "service", f"service degraded: {guard['degraded']}")
        if proxy.get("status") is None:
            check("ERR", cluster.master.name, "proxy", f"{cluster.master.name}: the proxy does not answer on port "
                                                       f"{s['inference_service_proxy_port']} ({proxy.get('error')})")

    records = {n: (p.get("record") or {}) for n, p in probes.items() if "unreachable" not in p}
    deployment = {"nodes": {n: {"digest": r.get("digest"), "config_version": r.get("config_version"),
                                "runtime": (r.get("runtime") or {}).get("release"),
                                "guard": (r.get("guard") or {}).get("release"),
                                "weights": {m: (w or {}).get("revision") for m, w in sorted((r.get("models") or {}).items())},
                                "recorded": r.get("recorded")}
                            for n, r in sorted(records.items())}}
    # a node not read agrees with nobody: with one, agreement is unknown (None)
    deployment["unread"] = [n.name for n in cluster.nodes if n.name not in records]
    for key in ("config_version", "runtime", "guard", "weights"):
        values = {n: json.dumps(d[key], sort_keys=True) if key == "weights" else d[key]
                  for n, d in deployment["nodes"].items()}
        deployment[f"{key}_agree"] = None if deployment["unread"] else len(set(values.values())) <= 1
        if len(set(values.values())) > 1:
            check("WARN", None, "deployment", f"the nodes disagree on the {key.replace('_', ' ')}: "
                                              + ", ".join(f"{n} {v}" for n, v in values.items()))
    missing = [n for n, d in deployment["nodes"].items() if not d["digest"]]
    if missing:
        check("WARN", None, "deployment", f"no deployment record on {', '.join(missing)}")

    for name, label in (("bandwidth", "bandwidth baseline"), ("acceptance", "acceptance verdict")):
        found = reports.get(name)
        if not found:
            check("WARN", None, name, f"no {label} on the controller")
        else:
            found["age"] = _age(found.get("run"), now)
            if not found["passed"]:
                check("WARN", None, name, f"the last {label} ({found['run']}) failed: "
                                          + "; ".join(found.get("failures", [])[:2]))
    worst = "ERR" if any(c["severity"] == "ERR" for c in checks) else "WARN" if checks else "OK"
    return {"schema": SCHEMA, "health": f"HEALTH_{worst}", "checks": checks, "nodes": nodes, "service": service,
            "deployment": deployment, "reports": reports,
            "time": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")}


def gpus(name: str, probe: dict, check) -> list[dict]:
    """A node's GPUs as the GPU gate reads them (nvidia-smi -q and the
    kernel's Xid lines since boot): a row per GPU, ERR for a GPU that needs
    a reset or a replacement, WARN for a past or an application's error,
    ERR naming what nvidia-smi's failure means."""
    text = probe.get("detail") or ""
    try:
        detail = gpu_facts.parse_detail(text)
    except gpu_facts.ParseError:
        check("ERR", name, "gpu", f"{name}: " + gpu_health.smi_failure(probe.get("rc"), (probe.get("stderr") or "") + "\n"
                                                                   + text, bool(probe.get("loaded"))))
        return []
    for problem in detail["problems"]:
        check("ERR", name, "gpu", f"{name}: {problem}")
    refused, warned = gpu_health.node_health(name, {"detail": detail, "xids": gpu_health.parse_xids(probe.get("xid") or "")})
    for sentence in refused:
        check("ERR", name, "gpu", sentence)
    for sentence in warned:
        check("WARN", name, "gpu", sentence)
    figures = telemetry_by_index(name, probe, check)
    return [{"index": g["index"], "name": g["name"], "bus_id": g["bus_id"],
             "well": not any(f"GPU {g['index']} (" in s for s in refused),
             "telemetry": figures.get(str(g["index"]))} for g in detail["gpus"]]


def telemetry_by_index(name: str, probe: dict, check) -> dict:
    """Each GPU's figures by its index, read as the telemetry reads them
    (twinrail.guard.gpu: nvidia-smi's CSV query; a GB10's memory the
    node's); WARN, and no figures, when the query's answer is not its CSV."""
    if not probe.get("query"):
        return {}
    try:
        rows = gpu_telemetry.parse_query(probe["query"])
    except gpu_telemetry.QueryError as exc:
        check("WARN", name, "gpu", f"{name}: the GPUs' figures: {exc}")
        return {}
    meminfo = parse_meminfo(probe.get("meminfo") or "")
    figures = gpu_telemetry.telemetry(rows, meminfo or None)
    for g in figures:
        if g["broken"]:
            which = g["bus_id"] or g["name"]
            check("ERR", name, "gpu", f"{name}: GPU {g['gpu']}{f' ({which})' if which else ''} is in error: "
                                      f"nvidia-smi reads {'; '.join(g['broken'])}: reset it (nvidia-smi -r) or reboot "
                                      "the node")
    return {g["gpu"]: {k: v for k, v in g.items() if k not in ("gpu", "bus_id", "name", "broken")}
            for g in figures}


def figures(telemetry: dict | None) -> str:
    """A GPU's figures on one line: what was not read is unknown."""
    if not telemetry:
        return ""

    def num(value, scale: float = 1.0, form: str = "g") -> str:
        return _shown(None if value is None else format(value / scale, form))

    t = telemetry
    memory = (f"memory {'(unified) ' if t['memory_unified'] else ''}{num(t['memory_used_bytes'], 2**30, '.1f')} of "
              f"{num(t['memory_total_bytes'], 2**30, '.1f')} GiB")
    limit = f" of {num(t['power_limit_watts'])} W" if t["power_limit_watts"] is not None else ""
    return (f", {memory}, busy {num(t['utilization_ratio'], 0.01, '.0f')} %, {num(t['power_watts'])} W{limit}, "
            f"{num(t['temperature_celsius'])} C")


def _shown(value, unknown: str = "unknown") -> str:
    """A figure as the screen shows it: a value not read is unknown, never
    Python's None."""
    return unknown if value is None else str(value)


def render(status: dict) -> str:
    """The one screen: the verdict and why first, then nodes, rails,
    service, deployment and reports."""
    ordered = sorted(status["checks"], key=lambda c: c["severity"] != "ERR")  # errors first, each in its order
    lines = [status["health"] + (": " + "; ".join(c["message"] for c in ordered) if ordered else "")]
    lines.append(f"  as of {status['time']}")
    lines.append("nodes")
    for node in status["nodes"]:
        if not node["reachable"]:
            lines.append(f"  {node['name']:<14} {node['role']:<7} UNREACHABLE  {node.get('error')}")
            continue
        memory = node["memory"]
        mem = (f"memory {memory['percent']} % (soft {memory['soft_pct']:g}, hard {memory['hard_pct']:g})"
               if memory else "memory: not reported by the guard")
        lines.append(f"  {node['name']:<14} {node['role']:<7} {node['host']:<15} {mem}")
        for unit in node["units"]:
            since = f" since {unit['since']}" if unit["since"] and unit["active"] == "active" else ""
            restarts = f", {unit['restarts']} restarts" if unit["restarts"] else ""
            lines.append(f"    {unit['unit']:<38} {unit['active']}{since}{restarts}")
        for gpu in node.get("gpus") or []:
            lines.append(f"    GPU {gpu['index']:<3} {gpu['name']:<34} {gpu['bus_id']:<16} "
                         f"{'healthy' if gpu['well'] else 'SICK (see above)'}{figures(gpu.get('telemetry'))}")
        for rail in node["rails"]:
            speed = f"{rail['speed_mbps'] / 1000:g} Gb/s" if rail["speed_mbps"] and rail["speed_mbps"] > 0 else "speed n/a"
            extra = f", transport {rail['transport']}" if rail["transport"] else ""
            lines.append(f"    {rail['rail']:<6} {rail['interface']:<12} {rail['link']:<6} MTU {rail['mtu']}, {speed}, "
                         f"{rail['address']}{'' if rail['addressed'] else ' MISSING'}{extra}")
    svc = status["service"]
    lines.append("service")
    state = ("available" if svc["available"] else "unknown: the master's guard was not read"
             if svc["available"] is None else f"UNAVAILABLE: {svc['reason']}")
    if svc.get("degraded"):
        state += f", DEGRADED: {svc['degraded']}"
    if svc.get("tokens_per_s_1m") is not None:
        rate = f"{svc['tokens_per_s_1m']:.1f} tokens/s over the last minute (Prometheus)"
    else:
        rate = ("decode " + ("n/a" if svc["decode_tps"] is None else str(round(svc["decode_tps"], 1)))
                + " tokens/s (llama-server's average; no Prometheus answered)")
    lines.append(f"  {state}; slots {_shown(svc['slots_busy'])}/{_shown(svc['slots'])} busy, "
                 f"{_shown(svc['queued'])} queued (cap {_shown(svc['queue_max'])}); "
                 f"proxy HTTP {_shown(svc['proxy_http'], 'unknown (not read)')}; {rate}")
    if svc.get("alerts") is not None:
        lines.append("  alerts firing: " + ("none" if not svc["alerts"] else
                                           "; ".join(f"{a['name']} ({a['severity']}): {a['summary']}"
                                                     for a in svc["alerts"])))
    dep = status["deployment"]
    lines.append("deployment")
    for name, node in dep["nodes"].items():
        weights = ", ".join(f"{m} {r}" for m, r in (node["weights"] or {}).items())
        if not node["digest"]:
            lines.append(f"  {name:<14} no deployment record")
            continue
        lines.append(f"  {name:<14} record {node['digest']} ({_shown(node['recorded'])}), configuration "
                     f"{_shown(node['config_version'])}, runtime {_shown(node['runtime'])}, guard "
                     f"{_shown(node['guard'])}, weights {weights or 'none'}")
    for name in dep["unread"]:
        lines.append(f"  {name:<14} unknown: not read")
    agree = [k for k in ("config_version", "runtime", "guard", "weights") if dep.get(f"{k}_agree")]
    if dep["unread"]:
        lines.append(f"  agreement unknown: {', '.join(dep['unread'])} not read")
    else:
        lines.append(f"  {'every node agrees' if len(agree) == 4 else 'the nodes DISAGREE'} on the deployed "
                     f"configuration, runtime, guard and weights")
    lines.append("reports")
    for name in ("bandwidth", "acceptance"):
        found = status["reports"].get(name)
        lines.append(f"  {name:<11} " + ("none" if not found else
                                         f"{'PASS' if found['passed'] else 'FAIL'} {found['run']} ({found.get('age')})"))
    return "\n".join(lines)
