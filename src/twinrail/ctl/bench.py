"""`twinrail bench`: a short load through the proxy, as a client sees it
(the openai SDK over HTTPS with an API key): one stream, then N streams,
each for a set time; time to first token and end-to-end latency at
p50/p95/p99, errors and tokens/s per level: the acceptance stage's
figures (module_utils/acceptance/latency.py) measured by the same load
engine (module_utils/acceptance/load.py), without running Ansible."""

from __future__ import annotations

from .. import loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.acceptance import latency as acceptance_latency
from ansible.module_utils.acceptance import load as acceptance_load


def _latency():
    return acceptance_latency


def _load():
    return acceptance_load


def one(client, model: str, tokens: int) -> dict:
    """One streaming chat through the SDK, timed by the load engine:
    ttft_s, e2e_s, tokens (content chunks seen), error."""
    def send(token):
        stream = client.chat.completions.create(
            model=model, max_tokens=tokens, temperature=0.7, stream=True,
            messages=[{"role": "user", "content": "Describe a harbor at dawn."}])
        seen = 0
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                seen += 1
                token()
        return seen, None if seen else "no token in the answer"

    # any failure a client sees is counted, not raised
    outcome = _load().timed(send, errors=(Exception,))
    outcome.pop("ended")
    return outcome


def level(client, model: str, streams: int, seconds: float, tokens: int) -> dict:
    """`streams` clients sending one request after another for `seconds`."""
    outcomes, wall = _load().until(seconds, streams, lambda: one(client, model, tokens))
    return _latency().level_row(streams, outcomes, wall)


def run(url: str, key: str, model: str | None, streams: int, seconds: float, tokens: int,
        verify: bool = True) -> dict:
    import openai  # pylint: disable=import-outside-toplevel

    client = openai.OpenAI(base_url=url.rstrip("/") + "/v1", api_key=key, max_retries=0, timeout=120,
                           http_client=openai.DefaultHttpxClient(verify=verify))
    model = model or client.models.list().data[0].id
    rows = [level(client, model, n, seconds, tokens) for n in sorted({1, streams})]
    return {"url": url, "model": model, "seconds": seconds, "tokens": tokens, "levels": rows,
            "failures": _latency().ramp_failures(rows, 0)}


def render(result: dict) -> str:
    lines = [f"twinrail bench: {result['model']} at {result['url']}, {result['seconds']:g} s per level, "
             f"{result['tokens']} tokens per request",
             f"{'streams':>7} {'requests':>8} {'errors':>6}  {'first token p50/p95/p99 (s)':<28} "
             f"{'end to end p50/p95/p99 (s)':<28} tokens/s"]
    for row in result["levels"]:
        ttft = "/".join(str(row[f"ttft_p{q}_s"]) for q in (50, 95, 99))
        e2e = "/".join(str(row[f"e2e_p{q}_s"]) for q in (50, 95, 99))
        lines.append(f"{row['concurrency']:>7} {row['requests']:>8} {row['errors']:>6}  {ttft:<28} {e2e:<28} "
                     f"{row['aggregate_tps']}")
    lines += [f"FAILED: {f}" for f in result["failures"]]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# the group's collectives again (the service stage's gate, on day 2)

def collectives_argv(playbook: str, repo, inventory: str, vault: list[str]) -> list[str]:
    """The run that measures the group's collectives again on a serving
    cluster: the service stage alone with its measurement forced; it
    converges nothing that did not drift, and loads no model again."""
    return [playbook, str(repo / "site.yml"), "-i", inventory, "--tags", "service", "-e", "twinrail_measure=service",
            *vault]


def render_collectives(report: dict) -> str:
    """The kept collectives report (reports/<site>/collectives.json) as a
    table: each node's bus bandwidth by operation and size, what was
    required and why, what NCCL said it used, the verdict."""
    need = report.get("required") or {}
    required = f"{need['gbytes']:g} GB/s" if need.get("gbytes") is not None else "not judged"
    lines = [f"twinrail bench --collectives: {report.get('backend')} over {', '.join(report.get('rails') or [])}, "
             f"run {report.get('run')}: {'PASS' if report.get('passed') else 'FAIL'}",
             f"  required: {required} ({need.get('basis')})",
             f"  {'node':<14} {'operation':<11} {'size (MiB)':>10} {'time (us)':>11} {'algbw GB/s':>10} {'busbw GB/s':>10}"]
    for host, seen in sorted((report.get("hosts") or {}).items()):
        for row in seen.get("rows") or []:
            lines.append(f"  {host:<14} {row['op']:<11} {row['size'] >> 20:>10} {row['time_us']:>11} "
                         f"{row['algbw']:>10} {row['busbw']:>10}{'' if row['correct'] else '  WRONG VALUES'}")
        for name, used in sorted((seen.get("used") or {}).items()):
            devices = ", ".join(used.get("ib_devices") or used.get("socket_interfaces") or []) or "none said"
            lines.append(f"  {host:<14} NCCL {used.get('version')} on {name}: {used.get('network')} ({devices})")
    lines += [f"  FAILED: {p}" for p in report.get("problems") or []]
    return "\n".join(lines)
