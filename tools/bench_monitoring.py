#!/usr/bin/env python3
"""What the monitoring stage costs on a converged lab (`make lab`), so a
site can size it: the CPU and memory of node_exporter on every node and of
Prometheus and Alertmanager on the master over a window, the samples
Prometheus appends per second, the bytes a sample takes in its chunks, and
from them the disk a day of samples takes at the lab's scrape interval and
at a site's default (15 s). Reads only: /proc of the lab's containers and
Prometheus's own metrics on the master's loopback.

    make bench-monitoring            (tools/bench_monitoring.py --window 60)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time

from twinrail.loader import REPO
from ansible.module_utils.stages import catalogue as stages

NODES = {"lab-master": ["prometheus", "prometheus-alertmanager", "prometheus-node-exporter"],
         "lab-worker1": ["prometheus-node-exporter"]}
TICKS = 100  # USER_HZ on Linux


def node(name: str, *argv: str) -> str:
    return subprocess.run(["docker", "exec", f"twinrail-{name}", *argv], capture_output=True, text=True,
                          check=True).stdout


def usage(name: str, program: str) -> dict:
    """CPU seconds so far and resident memory of the program's process."""
    pid = node(name, "pgrep", "-xo", program[:15]).strip()
    stat = node(name, "cat", f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
    status = dict(line.split(":", 1) for line in node(name, "cat", f"/proc/{pid}/status").splitlines() if ":" in line)
    return {"cpu_s": (int(stat[11]) + int(stat[12])) / TICKS, "rss_mib": int(status["VmRSS"].split()[0]) / 1024}


PROMETHEUS_PORT = stages.role_default(REPO, "monitoring_prometheus_port")


def prom(expr: str) -> float:
    code = ("import json, sys, urllib.parse, urllib.request; "
            f"u = 'http://127.0.0.1:{PROMETHEUS_PORT}/monitoring/api/v1/query?query=' + urllib.parse.quote(sys.argv[1]); "
            "r = json.load(urllib.request.urlopen(u, timeout=10))['data']['result']; "
            "print(r[0]['value'][1] if r else 'nan')")
    return float(node("lab-master", "python3", "-c", code, expr).strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=60, help="seconds to measure CPU over")
    args = parser.parse_args()
    before = {(n, p): usage(n, p) for n, programs in NODES.items() for p in programs}
    started = time.monotonic()
    time.sleep(args.window)
    elapsed = time.monotonic() - started
    rows = []
    for (n, p), first in before.items():
        now = usage(n, p)
        rows.append({"node": n, "program": p, "cpu_pct": round(100 * (now["cpu_s"] - first["cpu_s"]) / elapsed, 2),
                     "rss_mib": round(now["rss_mib"], 1)})
    samples_per_s = prom("rate(prometheus_tsdb_head_samples_appended_total[2m])")
    series = prom("prometheus_tsdb_head_series")
    chunk_bytes = prom("prometheus_tsdb_compaction_chunk_size_bytes_sum")
    chunk_samples = prom("prometheus_tsdb_compaction_chunk_samples_sum")
    if chunk_samples > 0:  # after a compaction (the head is cut into a block every 2 h)
        bytes_per_sample, basis = chunk_bytes / chunk_samples, "compacted chunks"
    else:  # before one: the head's full chunks, on disk in chunks_head/, against the samples in them
        # (a chunk is cut at 120 samples; one chunk a series is still open)
        stored = float(node("lab-master", "du", "-sb", "/var/lib/prometheus/metrics2/chunks_head").split()[0])
        full = prom("prometheus_tsdb_head_chunks") - series
        bytes_per_sample = stored / (full * 120) if full > 0 and stored > 0 else float("nan")
        basis = "the head's full chunks"
    interval = node("lab-master", "sh", "-c", "grep -m1 scrape_interval /etc/prometheus/prometheus.yml").split()[-1]
    day_mib = samples_per_s * 86400 * bytes_per_sample / 2**20
    scale = {"5s": 3.0, "10s": 1.5, "15s": 1.0}.get(interval, float("nan"))
    out = {"window_s": round(elapsed, 1), "processes": rows, "head_series": int(series),
           "samples_per_s": round(samples_per_s, 1), "bytes_per_sample": round(bytes_per_sample, 3),
           "bytes_per_sample_from": basis,
           "scrape_interval": interval, "disk_per_day_mib": round(day_mib, 1),
           "disk_per_day_mib_at_15s": round(day_mib / scale, 1),
           "disk_30_days_gib_at_15s": round(30 * day_mib / scale / 1024, 2)}
    if bytes_per_sample != bytes_per_sample:  # NaN
        print("no full chunk yet: a chunk closes after 120 samples of a series (10 minutes at 5 s); run again later")
    for row in rows:
        print(f"{row['node']:<12} {row['program']:<26} CPU {row['cpu_pct']:>6.2f} % of a core   RSS {row['rss_mib']:>7.1f} MiB")
    print(f"Prometheus: {out['head_series']} series, {out['samples_per_s']} samples/s at {interval}, "
          f"{out['bytes_per_sample']} bytes/sample ({basis}): {out['disk_per_day_mib']} MiB a day "
          f"({out['disk_per_day_mib_at_15s']} MiB a day, {out['disk_30_days_gib_at_15s']} GiB for 30 days "
          f"at a site's 15 s)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
