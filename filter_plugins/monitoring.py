# -*- coding: utf-8 -*-
"""The monitoring stage's filters: what Prometheus scrapes (every node's
node_exporter, in a stable order) and the stage's own textfile metrics
(each node's rails, the last bandwidth gate), written with
prometheus_client's exposition on the controller. Unit-tested in
tests/unit/test_monitoring.py."""

from __future__ import annotations

from datetime import datetime, timezone

DOCUMENTATION = r"""
name: monitoring
short_description: twinrail's monitoring filters (scrape targets, textfile metrics)
description:
  - "C(twinrail_node_targets): node_exporter's scrape targets, each node's management address and port labelled with its name and role."
  - "C(twinrail_rails_textfile): a node's rails for node_exporter's textfile collector (which device carries which rail, the MTU and rate each must show)."
  - "C(twinrail_bandwidth_textfile): the bandwidth gate's kept baseline as textfile metrics (measured, required, passed, when)."
"""


def _bare(address: str) -> str:
    return str(address).split("/", 1)[0]


def node_targets(hosts: list[str], hostvars: dict, master: str, port: int) -> list[dict]:
    """node_exporter's scrape targets: each node's management address and
    port, labelled with the node's name and role, sorted by name."""
    out = []
    for host in sorted(hosts):
        address = _bare(hostvars[host]["twinrail_mgmt_address"])
        out.append({"targets": [f"{address}:{int(port)}"],
                    "labels": {"node": host, "role": "master" if host == master else "worker"}})
    return out


def _exposition(families) -> str:
    """families: (name, help, label names, [(label values, value)]) as gauges."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest  # pylint: disable=import-outside-toplevel

    registry = CollectorRegistry()
    for name, help_text, labels, samples in families:
        gauge = Gauge(name, help_text, labels, registry=registry)
        for values, value in samples:
            (gauge.labels(*values) if labels else gauge).set(value)
    return generate_latest(registry).decode()


def rails_textfile(rails: list[dict], link_rate_gbps: float, mtu: int) -> str:
    """A node's rails for node_exporter: which netdev (and RDMA device) is
    which rail, its address, and the MTU and rate the rails are built for,
    so the rules can join node_exporter's own link metrics to rails."""
    ordered = sorted(rails, key=lambda r: r["name"])
    families = [
        ("twinrail_rail_info", "the rail a network device carries (1)", ["rail", "device", "address", "rdma_device"],
         [((r["name"], r["interface"], _bare(r["address"]), r.get("rdma_device") or ""), 1) for r in ordered]),
        ("twinrail_rail_rdma_info", "the rail an RDMA device carries (1), for the infiniband collector's counters",
         ["rail", "device"],
         [((r["name"], r["rdma_device"]), 1) for r in ordered if r.get("rdma_device")]),
        ("twinrail_rail_expected_mtu_bytes", "the MTU the rails are configured with", ["rail", "device"],
         [((r["name"], r["interface"]), int(mtu)) for r in ordered]),
        ("twinrail_rail_expected_rate_gbps", "the link rate each rail must show, Gb/s", ["rail", "device"],
         [((r["name"], r["interface"]), float(r.get("rate_gbps") or link_rate_gbps)) for r in ordered]),
    ]
    return _exposition(families)


def _run_time(run: str) -> float:
    """20261201T155608Z -> its Unix time."""
    return datetime.strptime(run, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()


def bandwidth_textfile(baseline: dict | None) -> str:
    """The bandwidth stage's kept baseline (reports/latest/bandwidth.json)
    as metrics: each rail's and the aggregate's measured and required Gb/s,
    passed or not, and when it was measured. Empty of samples when no
    baseline is kept yet."""
    rows = []
    if baseline:
        for rail in sorted(baseline.get("rails", []), key=lambda r: r["rail"]):
            rows.append((rail["rail"], rail["client"], rail["server"], rail))
        for agg in baseline.get("aggregates", []):
            rows.append(("+".join(agg["rails"]), agg["client"], agg["server"], agg))
    labels = ["rail", "client", "server"]
    families = [
        ("twinrail_bandwidth_gate_gbps", "the bandwidth gate's measured average, Gb/s", labels,
         [((r, c, s), float(row["bw_average_gbps"])) for r, c, s, row in rows]),
        ("twinrail_bandwidth_gate_required_gbps", "what the bandwidth gate required, Gb/s", labels,
         [((r, c, s), float(row["required_gbps"])) for r, c, s, row in rows]),
        ("twinrail_bandwidth_gate_passed", "1 when the rail passed the bandwidth gate", labels,
         [((r, c, s), 1 if row.get("passed") else 0) for r, c, s, row in rows]),
    ]
    if baseline and baseline.get("run"):
        families.append(("twinrail_bandwidth_gate_timestamp_seconds", "when the kept baseline was measured", [],
                         [((), _run_time(baseline["run"]))]))
    return _exposition(families)


class FilterModule:
    def filters(self):
        return {
            "twinrail_node_targets": node_targets,
            "twinrail_rails_textfile": rails_textfile,
            "twinrail_bandwidth_textfile": bandwidth_textfile,
        }
