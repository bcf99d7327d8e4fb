// twinrail's dashboard: the seed's six panels, what clients see (latency,
// errors) and the GPUs' own (telemetry, energy per token), from Prometheus's HTTP API
// (through the proxy: api/ under this page is Prometheus's /api/), drawn
// with uPlot, over a chosen window; and the cluster at a glance.
// Each panel says how it was drawn (data-state, data-series, data-points, data-labels)
// for the lab's browser test.
"use strict";

const PANELS = [
  {id: "memory", title: "Memory used (% of the node's limit; the watermarks)", unit: "%",
   queries: [
     {q: "100 * twinrail_node_memory_used_ratio", label: m => m.host},
     {q: "100 * twinrail_guard_memory_watermark_ratio", label: m => m.level + " watermark"}]},
  {id: "cpu", title: "CPU busy (% of every core)", unit: "%",
   queries: [{q: "100 * (1 - avg by (node) (rate(node_cpu_seconds_total{mode=\"idle\"}[1m])))", label: m => m.node}]},
  {id: "rails", title: "Rail traffic (Gb/s, counters that see RDMA)", unit: "Gb/s",
   queries: [
     {q: "twinrail:rail_transmit_bits:rate1m / 1e9", label: m => m.node + " " + m.rail + " out"},
     {q: "twinrail:rail_receive_bits:rate1m / 1e9", label: m => m.node + " " + m.rail + " in"}]},
  {id: "kvcache", title: "KV cache used (% of every slot's context)", unit: "%",
   queries: [{q: "100 * twinrail_kv_cache_usage_ratio", label: () => "KV cache"}]},
  // the engine's own line (engine.json: its table's series) is added at setup
  {id: "active", title: "Requests generating", unit: "", engine: "running",
   queries: [
     {q: "twinrail_guard_requests_active", label: () => "through the guard"}]},
  {id: "queue", title: "Queue depth (requests waiting for a slot)", unit: "", engine: "waiting",
   queries: [
     {q: "twinrail_guard_requests_waiting", label: () => "guard queue"}]},
  {id: "latency", title: "Latency (s): first token and whole request, p50 and p99", unit: "s",
   queries: [
     {q: "twinrail:time_to_first_token_seconds:p50", label: m => "first token p50"},
     {q: "twinrail:time_to_first_token_seconds:p99", label: m => "first token p99"},
     {q: "twinrail:request_duration_seconds:p50", label: m => "request p50"},
     {q: "twinrail:request_duration_seconds:p99", label: m => "request p99"}]},
  {id: "errors", title: "Errors (% of answers: 5xx and 503) and answers/s by status", unit: "",
   queries: [
     {q: "100 * twinrail:responses:error_ratio", label: m => "errors %"},
     {q: "twinrail:responses:rate", label: m => m.code + "/s"}]},
  // the GPUs' own (twinrail-guard gpu): nothing where no GPU is read, the lab's CPU nodes
  {id: "gpu", title: "GPUs: memory used and busy (%), temperature (C)", unit: "", needs: "no GPU is read here",
   queries: [
     {q: "100 * twinrail:gpu_memory_used:ratio", label: m => m.node + " GPU " + m.gpu + " memory %"},
     {q: "100 * twinrail_gpu_utilization_ratio", label: m => m.node + " GPU " + m.gpu + " busy %"},
     {q: "twinrail_gpu_temperature_celsius", label: m => m.node + " GPU " + m.gpu + " C"}]},
  {id: "energy", title: "Power (W), energy per generated token (J) and cost of a million tokens", unit: "",
   needs: "no GPU reports its power here",
   queries: [
     {q: "twinrail_gpu_power_watts", label: m => m.node + " GPU " + m.gpu + " W"},
     {q: "twinrail:energy_joules_per_token", label: () => "J per token"},
     {q: "twinrail:cost_per_million_tokens", label: () => "cost per million tokens"}]},
];
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
let windowSeconds = 900;
const charts = {};

async function api(path, params) {
  const url = "api/v1/" + path + "?" + new URLSearchParams(params);
  const response = await fetch(url, {credentials: "same-origin"});
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  const body = await response.json();
  if (body.status !== "success") throw new Error(path + ": " + (body.error || body.status));
  return body.data;
}

// [[times], [values of series 1], ...] on one time axis, with labels
function align(results, step, start, end) {
  const times = [];
  for (let t = start; t <= end + 1e-9; t += step) times.push(Math.round(t));
  const index = new Map(times.map((t, i) => [t, i]));
  const series = [], labels = [];
  for (const {query, result} of results) {
    for (const item of result) {
      const values = new Array(times.length).fill(null);
      for (const [t, v] of item.values) {
        const i = index.get(Math.round(t));
        // NaN (a quantile or ratio of no traffic) is a gap, not a point
        if (i !== undefined && Number.isFinite(Number(v))) values[i] = Number(v);
      }
      series.push(values);
      labels.push(query.label(item.metric));
    }
  }
  return {data: [times, ...series], labels};
}

async function drawPanel(panel, element) {
  const end = Date.now() / 1000, start = end - windowSeconds;
  const step = Math.max(5, Math.round(windowSeconds / 240));
  const results = await Promise.all(panel.queries.map(async query => ({
    query, result: (await api("query_range", {query: query.q, start, end, step})).result})));
  const {data, labels} = align(results, step, start, end);
  const points = data.slice(1).reduce((n, s) => n + s.filter(v => v !== null).length, 0);
  element.dataset.series = String(labels.length);
  element.dataset.points = String(points);
  element.dataset.labels = JSON.stringify(labels);
  const plot = element.querySelector(".plot");
  if (charts[panel.id]) { charts[panel.id].destroy(); delete charts[panel.id]; }
  plot.innerHTML = "";
  if (!labels.length) {
    // a panel of what only some nodes have (GPUs): unknown where none has it, not an empty chart
    const unknown = panel.needs && !(await api("query", {query: "count(" + panel.queries[0].q + ")"})).result.length;
    plot.innerHTML = unknown ? '<p class="empty">unknown: ' + panel.needs + '</p>'
                             : '<p class="empty">no data in this window</p>';
    element.dataset.state = unknown ? "unknown" : "empty";
    return;
  }
  const opts = {
    width: Math.max(400, plot.clientWidth || 540), height: 220,
    series: [{}, ...labels.map((label, i) => ({label, stroke: COLORS[i % COLORS.length], width: 1.5,
                                               value: (u, v) => v == null ? "-" : v.toFixed(2) + " " + panel.unit}))],
    axes: [{}, {size: 60}],
    scales: {x: {time: true}},
  };
  charts[panel.id] = new uPlot(opts, data, plot);
  element.dataset.state = "drawn";
}

function list(id, items) {
  const ul = document.getElementById(id);
  ul.innerHTML = "";
  if (!items.length) items = [{text: "none", good: true}];
  for (const item of items) {
    const li = document.createElement("li");
    li.textContent = item.text;
    li.className = item.good ? "good" : "bad";
    ul.appendChild(li);
  }
}

async function drawState() {
  const [workers, rails, transport, alerts] = await Promise.all([
    api("query", {query: "twinrail_guard_worker_state == 1"}),
    api("query", {query: "node_network_up * on (instance, device) group_left (rail) twinrail_rail_info"}),
    api("query", {query: "twinrail_rpc_transport == 1"}),
    api("query", {query: "ALERTS{alertstate=\"firing\"}"}),
  ]);
  const byText = (a, b) => a.text.localeCompare(b.text);
  list("workers", workers.result.map(r => ({text: r.metric.host + " " + r.metric.address + ": " + r.metric.state,
                                             good: r.metric.state === "up"})).sort(byText));
  list("rails", rails.result.map(r => ({text: r.metric.node + " " + r.metric.rail + " (" + r.metric.device + "): " +
                                         (r.value[1] === "1" ? "up" : "down"), good: r.value[1] === "1"})).sort(byText));
  list("transport", transport.result.map(r => ({text: r.metric.node + " " + r.metric.address + ": " + r.metric.transport,
                                                 good: r.metric.transport !== "none"})).sort(byText));
  const firing = alerts.result.map(r => ({text: r.metric.alertname + " (" + (r.metric.severity || "") + ") " +
                                           (r.metric.host || r.metric.node || ""), good: false})).sort(byText);
  list("alerts", firing);
  document.getElementById("state").dataset.alerts = String(firing.length);
}

async function refresh() {
  const status = document.getElementById("status");
  try {
    await Promise.all([drawState(), ...PANELS.map(p => drawPanel(p, document.getElementById("panel-" + p.id)))]);
    status.textContent = "updated " + new Date().toLocaleTimeString() + ", window " + windowSeconds + " s";
    document.body.dataset.state = "ready";
  } catch (error) {
    status.textContent = "Prometheus did not answer: " + error.message;
    document.body.dataset.state = "error";
  }
}

// The engine's series (engine.json, written by the monitoring stage from the
// engine's table): {running: {query, label}, waiting: {query, label}}
async function engineLines() {
  try {
    const response = await fetch("engine.json", {credentials: "same-origin"});
    if (!response.ok) return;
    const lines = await response.json();
    for (const panel of PANELS) {
      const line = panel.engine && lines[panel.engine];
      if (line) panel.queries.push({q: line.query, label: () => line.label});
    }
  } catch (error) {
    // no engine.json: the guard's lines alone
  }
}

async function setup() {
  await engineLines();
  const main = document.getElementById("panels");
  for (const panel of PANELS) {
    const element = document.createElement("section");
    element.className = "panel";
    element.id = "panel-" + panel.id;
    element.dataset.state = "loading";
    element.innerHTML = "<h3></h3><div class=\"plot\"></div>";
    element.querySelector("h3").textContent = panel.title;
    main.appendChild(element);
  }
  for (const button of document.querySelectorAll("nav button")) {
    button.addEventListener("click", () => {
      windowSeconds = Number(button.dataset.window);
      document.querySelectorAll("nav button").forEach(b => b.classList.toggle("active", b === button));
      refresh();
    });
  }
  document.querySelector("nav button").classList.add("active");
  refresh();
  setInterval(refresh, 30000);
}

setup();
