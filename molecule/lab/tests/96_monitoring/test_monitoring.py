"""The monitoring stage on the converged lab: every target up in
Prometheus, the retention in effect, data behind each of the dashboard's
ten panels (the seed's six, latency and errors, the GPUs' two: unknown on the lab's CPU nodes; Prometheus's own API, through the proxy), node_exporter
reachable from the master only, the dashboard drawn in headless Chromium,
401 without an account; then drills (a stopped worker RPC server, a cut
rail, a memory hog past the soft watermark), each raising its alert at the
lab's webhook receiver within a measured time, and clearing after the mend."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from lab_client import (ALERTMANAGER_PORT, EXPORTER_PORT, MASTER, PASSWORD, PROJECT, PROMETHEUS_PORT, WORKER, chat, hog,
                        lab, node, record, unhog, wait_available)

from lab_dashboard import dashboard_page
from lab_dashboard import panels as dashboard_panels
import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.engines import registry as engines


testinfra_hosts = ["ansible://master"]

BASE = "https://127.0.0.1:8443"
WEBHOOK_LOG = "/var/lib/twinrail-lab/alerts.jsonl"
# what a drill may take from the fault to the alert at the receiver: the
# guard's poll (1 s, 3 s grace) or a scrape (5 s), the rules' evaluation
# (5 s), the lab's 5 s `for`, Alertmanager's 1 s group_wait; doubled for a
# slow machine
ALERT_BOUND_S = 60
SHOTS = Path(os.environ.get("TWINRAIL_SHOTS", "/tmp"))


def api(path: str, auth: bool = True, **params) -> dict:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the lab's self-signed certificate
    url = f"{BASE}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    request = urllib.request.Request(url)
    if auth:
        token = base64.b64encode(f"operator:{PASSWORD}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        return json.loads(response.read())


def query(expr: str) -> list[dict]:
    return api("/monitoring/api/v1/query", query=expr)["data"]["result"]


def test_every_target_is_up_and_the_retention_is_the_inventorys(host):
    targets = api("/monitoring/api/v1/targets", state="active")["data"]["activeTargets"]
    seen = sorted((t["labels"]["job"], t["labels"]["node"], t["health"]) for t in targets)
    assert seen == [("alertmanager", "lab-master", "up"), ("guard", "lab-master", "up"), ("llama", "lab-master", "up"),
                    ("node", "lab-master", "up"), ("node", "lab-worker1", "up"), ("prometheus", "lab-master", "up")]
    flags = api("/monitoring/api/v1/status/flags")["data"]
    assert flags["storage.tsdb.retention.time"] == "30d" and flags["storage.tsdb.retention.size"] == "1GiB"
    assert flags["web.listen-address"] == f"127.0.0.1:{PROMETHEUS_PORT}"
    groups = {g["name"]: len(g["rules"]) for g in api("/monitoring/api/v1/rules")["data"]["groups"]}
    # the GPU group's records are there (the lab sets no electricity price: no cost rule)
    assert groups == {"twinrail-rails": 3, "twinrail-service": 6, "twinrail-gpu": 3, "twinrail-alerts": 23}


def panel_queries() -> list[tuple[str, str, bool]]:
    """(panel, PromQL, whether the panel needs a GPU) as the dashboard's own script has them."""
    text = (PROJECT / "roles" / "monitoring" / "files" / "dashboard" / "dashboard.js").read_text()
    panels = re.findall(r'\{id: "(\w+)", title:(.*?)queries: \[(.*?)\]\}', text, re.S)
    out = [(pid, json.loads(f'"{q}"'), "needs:" in head) for pid, head, body in panels
           for q in re.findall(r'q: "((?:[^"\\]|\\.)*)"', body)]
    # the engine's own lines (engine.json, from its table): the lab's is llama.cpp
    lines = engines.table("llamacpp", PROJECT)["dashboard"]
    out += [(pid, lines[line]["query"], False) for pid, head, _ in panels
            for line in re.findall(r'engine: "(\w+)"', head)]
    assert len({pid for pid, _, _ in out}) == 10 and len(out) == 22, out
    assert {pid for pid, _, gpu in out if gpu} == {"gpu", "energy"}, out
    return out


def test_each_panel_has_data_and_the_gpus_none_on_the_labs_cpu_nodes(host):
    for _ in range(3):  # some tokens, so the rates have something to show
        assert chat(tokens=16)[0] == 200
    time.sleep(12)  # two scrapes after them
    empty = []
    end = time.time()
    gpu_points = 0
    for panel, expr, gpu in panel_queries():
        data = api("/monitoring/api/v1/query_range", query=expr, start=end - 600, end=end, step=15)["data"]["result"]
        points = sum(len(series["values"]) for series in data)
        print(f"panel {panel}: {expr}: {len(data)} series, {points} points")
        if gpu:
            gpu_points += points
        elif not points:
            empty.append(f"{panel}: {expr}")
    assert not empty, f"panels without data: {empty}"
    # no GPU, no power: no figure at all (energy per token unknown), never a zero
    assert gpu_points == 0
    rails = {(r["metric"]["node"], r["metric"]["rail"]): float(r["value"][1])
             for r in query("twinrail:rail_transmit_bits:rate1m")}
    assert set(rails) == {(n, r) for n in ("lab-master", "lab-worker1") for r in ("rail0", "rail1")}
    assert max(rails.values()) > 0, rails  # the RPC traffic of those chats crossed the rails


def bucket(value: float, bounds: tuple[float, ...]) -> int:
    """The guard's histogram bucket a value falls in."""
    return next((i for i, bound in enumerate(bounds) if value <= bound), len(bounds))


def test_the_dashboards_p99_agrees_with_a_ramp_level_measured_by_its_clients(host):
    """A level of the acceptance ramp (4 streams, 16 tokens, the acceptance
    stage's own level_row through `twinrail bench`'s clients: the openai SDK
    with an API key) on an otherwise idle service, then the dashboard's
    first-token p99 (the recording rule it draws, over the lab's 30 s
    window): a histogram's estimate lies in the bucket of the clients' own
    p99, or the next one (the clients also wait for nginx and TLS)."""
    import openai  # pylint: disable=import-outside-toplevel

    from twinrail.ctl import bench  # pylint: disable=import-outside-toplevel
    from twinrail.guard.metrics import DURATION_BUCKETS, TTFT_BUCKETS  # pylint: disable=import-outside-toplevel

    key = (Path.home() / ".local" / "state" / "twinrail-lab" / "api-keys" / "lab-client").read_text().strip()
    client = openai.OpenAI(base_url=f"{BASE}/v1", api_key=key, max_retries=0, timeout=120,
                           http_client=openai.DefaultHttpxClient(verify=False))
    model = client.models.list().data[0].id
    time.sleep(12)  # no request of an earlier test in the window
    row = bench.level(client, model, streams=4, seconds=20, tokens=16)
    time.sleep(8)  # a scrape and a rule evaluation after the last request
    shown = {r["metric"].get("model"): float(r["value"][1]) for r in query("twinrail:time_to_first_token_seconds:p99")}
    whole = {r["metric"].get("model"): float(r["value"][1]) for r in query("twinrail:request_duration_seconds:p99")}
    print(f"ramp level of 4 streams: {row['requests']} requests, first token p99 {row['ttft_p99_s']} s, end to end "
          f"p99 {row['e2e_p99_s']} s; the dashboard: first token p99 {shown}, request p99 {whole}")
    assert row["errors"] == 0 and row["requests"] >= 8, row
    assert list(shown) == [model], shown
    assert abs(bucket(shown[model], TTFT_BUCKETS) - bucket(row["ttft_p99_s"], TTFT_BUCKETS)) <= 1, \
        (shown, row["ttft_p99_s"])
    assert abs(bucket(whole[model], DURATION_BUCKETS) - bucket(row["e2e_p99_s"], DURATION_BUCKETS)) <= 1, \
        (whole, row["e2e_p99_s"])


def reaches(container: str | None, address: str, port: int) -> bool:
    """Whether a TCP connection from the container (None: the controller) to
    address:port opens within 3 s."""
    if container is None:
        try:
            with socket.create_connection((address, port), timeout=3):
                return True
        except OSError:
            return False
    probe = (f"import socket\ntry:\n    socket.create_connection(('{address}', {port}), timeout=3).close(); print('open')\n"
             f"except OSError as e:\n    print('closed', e)")
    return node(container, "python3", "-c", probe).stdout.startswith("open")


def test_node_exporter_answers_the_master_only(host):
    port = EXPORTER_PORT
    assert reaches(MASTER, "198.18.0.11", port) and reaches(MASTER, "198.18.0.10", port)
    assert not reaches(None, "198.18.0.11", port), "the controller reaches the worker's node_exporter"
    assert not reaches(None, "198.18.0.10", port), "the controller reaches the master's node_exporter"
    assert not reaches(WORKER, "198.18.0.10", port), "a worker reaches the master's node_exporter"
    # Prometheus and Alertmanager: the master's loopback only
    for port in (PROMETHEUS_PORT, ALERTMANAGER_PORT):
        assert not reaches(None, "198.18.0.10", port) and not reaches(WORKER, "198.18.0.10", port)


def test_without_an_account_every_monitoring_page_is_401(host):
    for path in ("/dashboard/", "/dashboard/api/v1/query?query=up", "/monitoring/api/v1/targets", "/monitoring/graph"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            api(path, auth=False)
        assert refused.value.code == 401, path


def test_the_dashboard_draws_its_panels_in_chromium(host):
    with dashboard_page(PASSWORD) as page:
        page.goto(f"{BASE}/chat/")
        page.click("a[href='/dashboard/']")
        page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
        drawn = dashboard_panels(page)
        panels = [[pid, state, points] for pid, (state, _, points) in drawn.items()]
        labels = {pid: line_labels for pid, (_, line_labels, _) in drawn.items()}
        workers = page.inner_text("#workers")
        page.screenshot(path=str(SHOTS / "twinrail-dashboard.png"), full_page=True)
        # a wider window asks Prometheus again
        page.click("button[data-window='21600']")
        page.wait_for_function("document.getElementById('status').textContent.includes('21600')", timeout=60_000)
    print(f"dashboard: {panels}; workers: {workers!r}; screenshot {SHOTS / 'twinrail-dashboard.png'}")
    assert len(panels) == 10
    gpu = {"panel-gpu", "panel-energy"}
    assert all(state == "drawn" and points > 0 for pid, state, points in panels if pid not in gpu), panels
    # the lab's nodes read no GPU: those panels say unknown, not an empty chart
    assert [(pid, state) for pid, state, _ in panels if pid in gpu] == [("panel-gpu", "unknown"),
                                                                        ("panel-energy", "unknown")], panels
    assert "lab-worker1 198.19.0.2: up" in workers and "lab-worker1 198.19.1.2: up" in workers
    # the engine's own lines, from its table (engine.json)
    assert "llama-server processing" in labels["panel-active"] and "llama-server deferred" in labels["panel-queue"], labels


# ---------------------------------------------------------------- alert drills

def notices(since: float) -> list[dict]:
    """The alerts the lab's webhook receiver got after `since` (Unix time):
    (received, status, alertname, labels), oldest first."""
    text = node(MASTER, "cat", WEBHOOK_LOG, check=False).stdout
    out = []
    for line in text.splitlines():
        entry = json.loads(line)
        if entry["received"] < since:
            continue
        for alert in entry["payload"]["alerts"]:
            out.append({"received": entry["received"], "status": alert["status"],
                        "alertname": alert["labels"]["alertname"], "labels": alert["labels"]})
    return out


def wait_notice(alertname: str, status: str, since: float, limit: float, **labels) -> float:
    """Seconds from `since` to the receiver's first notice of the alert in
    that status (with those labels); an error past limit."""
    deadline = time.time() + limit
    while time.time() < deadline:
        for notice in notices(since):
            if (notice["alertname"] == alertname and notice["status"] == status
                    and all(notice["labels"].get(k) == v for k, v in labels.items())):
                return notice["received"] - since
        time.sleep(1)
    got = sorted({(n["alertname"], n["status"]) for n in notices(since)})
    raise AssertionError(f"no {status} {alertname} {labels} at the webhook within {limit} s; it got {got}")


def drill(name: str, alertname: str, fault, mend, **labels) -> None:
    wait_available()
    started = time.time()
    fault()
    try:
        raised = wait_notice(alertname, "firing", started, ALERT_BOUND_S, **labels)
    finally:
        mended = time.time()
        mend()
    cleared = wait_notice(alertname, "resolved", mended, ALERT_BOUND_S, **labels)
    back = wait_available()
    print(f"{name}: {alertname} at the webhook {raised:.1f} s after the fault, resolved {cleared:.1f} s after the "
          f"mend; the service answered {back:.1f} s after that")
    record(f"alert {name}", {"alert": alertname, "raised_s": round(raised, 1), "resolved_s": round(cleared, 1)})


def test_a_stopped_worker_rpc_server_raises_worker_lost(host):
    unit = "twinrail-rpc@198.19.0.2.service"
    drill("stopped RPC server", "TwinrailWorkerLost",
          lambda: node(WORKER, "systemctl", "stop", unit), lambda: node(WORKER, "systemctl", "start", unit),
          host="lab-worker1", address="198.19.0.2")


def test_a_cut_rail_raises_rail_down(host):
    drill("cut rail1", "TwinrailRailDown", lambda: lab("cut", "rail1"), lambda: lab("mend", "rail1"),
          node="lab-worker1", rail="rail1")


def test_memory_past_the_soft_watermark_raises_its_alert(host):
    drill("memory hog", "TwinrailMemoryAboveSoftWatermark", lambda: hog(87, "twinrail-hog-alert"), unhog,
          host="lab-master")
