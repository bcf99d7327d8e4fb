"""The lab with the vLLM engine (`make lab-vllm`, after site.yml converged
inventory/lab-vllm): the service as OpenAI clients use it, through the
proxy on the controller's published port (nginx -> twinrail-guard -> vLLM
rank 0 -> rank 1 on the worker over rail0), with the real `openai` SDK; a
second site.yml changes nothing and its handshake passes again; a kill
drill (the worker's vLLM killed: the guard answers 503, the group meets
again, the service comes back); a stall drill (the master's vLLM stopped:
the guard finds it, answers 503 naming it and restarts the group); last, tensor parallel 2 on a model whose
heads divide (Gemma 3 270M), the same answer as its pipeline parallel 2,
then the inventory's model and pipeline parallel again."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

PROJECT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT / "tools"))
from lab_dashboard import BASE as DASHBOARD_BASE  # noqa: E402  pylint: disable=wrong-import-position
from lab_dashboard import dashboard_page  # noqa: E402  pylint: disable=wrong-import-position
from lab_dashboard import panels as dashboard_panels  # noqa: E402  pylint: disable=wrong-import-position
import twinrail.loader  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.stages import catalogue as stages  # noqa: E402
INVENTORY = PROJECT / "inventory" / "lab-vllm"
STATE = Path.home() / ".local" / "state" / "twinrail-lab"
MASTER, WORKER = "twinrail-lab-master", "twinrail-lab-worker1"
MODEL = "smollm2-135m-instruct-bf16"
RECAP = re.compile(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)", re.M)
FIGURES = Path(os.environ.get("TWINRAIL_FIGURES", "/tmp/twinrail-lab-vllm.json"))


def node(container: str, *argv: str, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True, check=check)


def client(**kwargs) -> openai.OpenAI:
    key = (STATE / "api-keys" / "lab-client").read_text().strip()
    # the lab's certificate is self-signed: the SDK's own HTTP client, told so
    return openai.OpenAI(base_url="https://127.0.0.1:8443/v1", api_key=key, max_retries=0,
                         http_client=openai.DefaultHttpxClient(verify=False, timeout=120), **kwargs)


def record(name: str, figures: dict) -> None:
    data = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    data[name] = figures
    FIGURES.write_text(json.dumps(data, indent=2) + "\n")


def site(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(INVENTORY),
                           str(PROJECT / "site.yml"), *argv], capture_output=True, text=True, cwd=PROJECT, env=env,
                          check=False, timeout=1800)


def served_again(since: float, limit: float = 600) -> float | None:
    """Seconds from `since` to the first chat answered through the proxy,
    asked every 2 s; None past `limit`."""
    while time.monotonic() - since < limit:
        try:
            answer = client().chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "Say yes."}], max_tokens=2)
            if answer.choices:
                return time.monotonic() - since
        except (openai.APIStatusError, openai.APIConnectionError):
            pass
        time.sleep(2)
    return None


def test_the_model_list_names_the_served_model():
    assert [m.id for m in client().models.list().data] == [MODEL]


def test_a_completion_through_the_proxy():
    started = time.monotonic()
    answer = client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is the capital of France? Answer in one word."}],
        max_tokens=16, temperature=0)
    text = answer.choices[0].message.content
    assert "Paris" in text, text
    assert answer.usage.completion_tokens > 0
    assert answer.system_fingerprint.endswith(tuple("0123456789abcdef")) and "pp2" in answer.system_fingerprint
    record("completion", {"seconds": round(time.monotonic() - started, 2), "tokens": answer.usage.completion_tokens})


def test_a_stream_through_the_proxy():
    started, first, parts = time.monotonic(), None, []
    stream = client().chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Count from 1 to 10."}],
        max_tokens=48, temperature=0, stream=True, stream_options={"include_usage": True})
    usage = None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            first = first or time.monotonic()
            parts.append(chunk.choices[0].delta.content)
        usage = chunk.usage or usage
    ended = time.monotonic()
    assert len(parts) > 5 and usage is not None and usage.completion_tokens == 48
    text = "".join(parts)
    positions = [text.find(word) for word in ("1", "2", "3", "4", "5")]
    assert -1 not in positions and positions == sorted(positions), text  # it counts (in digits or words)
    record("stream", {"ttft_s": round(first - started, 3),
                      "decode_tps": round((usage.completion_tokens - 1) / (ended - first), 2)})


def test_the_groups_rendezvous_is_open_on_the_rails_only():
    """vLLM's rendezvous (inference_service_vllm_master_port) listens on the
    master; the worker reaches it over rail0, the management network does not
    (the firewall drops it)."""
    listening = node(MASTER, "ss", "-Htln", "sport = :29500").stdout
    assert "29500" in listening, "nothing listens on the rendezvous port"
    probe = ("import socket; s = socket.create_connection(('{}', 29500), timeout=3); print('connected')")
    over_rail = node(WORKER, "python3", "-c", probe.format("198.19.0.1"), check=False)
    assert over_rail.stdout.strip() == "connected", over_rail.stderr
    # from the controller, over the management network (the lab's own 198.18.0.0/24)
    over_mgmt = subprocess.run([sys.executable, "-c", probe.format("198.18.0.10")], capture_output=True, text=True,
                               check=False)
    assert over_mgmt.returncode != 0 and "timed out" in over_mgmt.stderr, over_mgmt.stdout + over_mgmt.stderr


def test_the_dashboard_draws_vllms_own_lines_in_chromium():
    """The engine's table names its series for the dashboard (engine.json):
    under vLLM the requests panels draw vLLM's running and waiting
    requests (scraped from its /metrics), where llama.cpp's draw
    llama-server's, in headless Chromium."""
    for _ in range(2):  # something for the rates
        client().completions.create(model=MODEL, prompt="The capital of France is", max_tokens=8)
    time.sleep(12)  # two scrapes after them
    with dashboard_page((STATE / "service-password").read_text().strip()) as page:
        page.goto(f"{DASHBOARD_BASE}/dashboard/")
        page.wait_for_function("document.body.dataset.state === 'ready'", timeout=60_000)
        panels = dashboard_panels(page)
    print(f"dashboard under vLLM: active {panels['panel-active']}, queue {panels['panel-queue']}")
    for pid, line in (("panel-active", "vLLM running"), ("panel-queue", "vLLM waiting")):
        state, labels, points = panels[pid]
        assert state == "drawn" and line in labels and points > 0, (pid, panels[pid])
        assert not any("llama-server" in label for label in labels), (pid, labels)


def test_a_second_run_changes_nothing_and_shakes_hands_again():
    run = site()
    assert run.returncode == 0, run.stdout[-3000:]
    changed = {host: int(n) for host, n in RECAP.findall(run.stdout)}
    assert changed and all(n == 0 for n in changed.values()), changed
    assert run.stdout.count("2 ranks joined") == 2, "the handshake's verdict, once a node"
    # the serving group as measured: its collectives are not measured again
    assert "collectives: the report of" in run.stdout and "nothing measured" in run.stdout, run.stdout[-3000:]


def collectives_report() -> dict:
    # the lab-vllm inventory names its site "lab" (twinrail_site)
    return json.loads((PROJECT / "reports" / "lab" / "collectives.json").read_text())


def test_the_groups_collectives_were_measured_on_rail0_and_a_share_it_cannot_reach_stops_the_run():
    """The converge measured the group's gloo collectives over rail0 before
    the model loaded; asked again with a share of rail0's figure the group
    cannot reach, the run stops naming the node, the figure and what was
    required, the serving group untouched; the next plain run measures
    again because that report failed, and passes."""
    report = collectives_report()
    assert report["passed"] and report["backend"] == "gloo" and report["rails"] == ["rail0"], report
    assert sorted(report["hosts"]) == ["lab-master", "lab-worker1"]
    for host, seen in report["hosts"].items():
        assert [(r["op"], r["size"] >> 20) for r in seen["rows"]] == [
            ("all_reduce", 1), ("all_reduce", 32), ("all_gather", 1), ("all_gather", 32)], host
        assert all(r["correct"] and r["busbw"] > 0 for r in seen["rows"]), host
        assert all(seen["peaks"][op]["busbw"] >= report["required"]["gbytes"] for op in ("all_reduce", "all_gather"))
    assert "rail0" in report["required"]["basis"] and "measured by the bandwidth stage" in report["required"]["basis"]
    record("collectives", {host: seen["peaks"] for host, seen in report["hosts"].items()} | {
        "required_gbytes": report["required"]["gbytes"], "basis": report["required"]["basis"]})
    pid = node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-vllm.service").stdout.strip()
    run = site("--tags", "service", "-e", "twinrail_measure=service", "-e", "inference_service_collectives_min_share=1")
    assert run.returncode != 0
    assert re.search(r"service: collectives: lab-(master|worker1): all_(reduce|gather) reached [\d.]+ GB/s bus bandwidth "
                     r"at most \(\d+ MiB\), required [\d.]+ GB/s \(1 x \(rail0 [\d.]+\) Gb/s", run.stdout), run.stdout[-3000:]
    assert "nothing was loaded" in run.stdout
    assert not collectives_report()["passed"]
    # the serving group was not touched
    assert node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-vllm.service").stdout.strip() == pid
    assert [m.id for m in client().models.list().data] == [MODEL]
    # day 2: the operator's command measures it again (the service stage, its measurement forced)
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    again = subprocess.run([str(Path(sys.executable).parent / "twinrail"), "bench", "--collectives", "-i", str(INVENTORY)],
                           cwd=PROJECT, env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert again.returncode == 0, (again.stdout[-3000:], again.stderr[-2000:])
    assert "failed its gate" in again.stdout and collectives_report()["passed"]
    assert "twinrail bench --collectives: gloo over rail0" in again.stdout and ": PASS" in again.stdout
    assert re.search(r"lab-worker1 +all_gather +32 ", again.stdout), again.stdout[-2000:]


def test_the_worker_killed_gives_503_then_the_service_comes_back():
    pid = node(WORKER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-vllm.service").stdout.strip()
    killed = time.monotonic()
    node(WORKER, "kill", "-KILL", pid)
    refused = None
    while time.monotonic() - killed < 30:
        try:
            client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say yes."}],
                                             max_tokens=2)
        except openai.APIStatusError as exc:
            if exc.status_code == 503:
                refused = time.monotonic() - killed
                assert "worker unavailable" in exc.message or "recovering" in exc.message, exc.message
                break
        time.sleep(0.5)
    assert refused is not None, "the guard never answered 503 after the worker's vLLM was killed"
    back = served_again(killed)
    assert back is not None, "the service did not come back within 600 s of the kill"
    new = node(WORKER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-vllm.service").stdout.strip()
    assert new != pid
    record("kill_drill", {"refused_after_s": round(refused, 2), "back_after_s": round(back, 1)})


def role_default(name: str):
    return stages.role_default(PROJECT, name)


def guard_get(path: str) -> str:
    port = role_default("inference_service_guard_port")
    return node(MASTER, "python3", "-c", f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}{path}', "
                "timeout=5).read().decode())").stdout


def test_a_wedged_vllm_on_the_master_is_found_and_the_group_restarted():
    """The field's hang on the master while every worker is healthy, with
    vLLM: its API server stopped (SIGSTOP: its port still accepts, nothing
    answers) while idle. The guard's idle probe finds it (its status says
    stalled) and restarts the group at once (rank 0's unit and the worker's,
    through its agent), so a new request's 503 names the stall or the
    worker's vLLM restarting; the stall is counted and the service comes
    back without anyone mending anything."""
    idle_probe, probe_timeout = (role_default("inference_service_guard_idle_probe"),
                                 role_default("inference_service_guard_probe_timeout"))
    client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say yes."}], max_tokens=2)
    before = node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-vllm.service").stdout.strip()
    worker_before = node(WORKER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-vllm.service").stdout.strip()
    stopped_at = time.monotonic()
    node(MASTER, "kill", "-STOP", before)
    try:
        seen: dict = {}
        while time.monotonic() - stopped_at < idle_probe + probe_timeout + 30:
            seen = json.loads(guard_get("/twinrail/status"))
            if seen.get("stalled"):
                break
            time.sleep(0.5)
        found = time.monotonic() - stopped_at
        assert (seen.get("stalled") or "").startswith("vLLM stalled: its probe failed while idle"), seen
        refused = None
        try:
            client().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say yes."}],
                                             max_tokens=2)
        except openai.APIStatusError as exc:
            # the stall itself, or (the group's restart began the moment it was
            # found) the worker's vLLM the guard had its agent restart
            assert exc.status_code == 503 and ("recovering: vLLM stalled: its probe failed" in exc.message or re.search(
                r"worker unavailable: lab-worker1 rail \S+: vLLM \(twinrail-vllm.service\)", exc.message)), exc.message
            refused = time.monotonic() - stopped_at
        assert refused is not None, "a request was answered while vLLM was stopped"
    finally:
        node(MASTER, "kill", "-CONT", before, check=False)  # gone once the guard killed it
    back = served_again(stopped_at)
    assert back is not None, "the service did not come back within 600 s of the stall"
    after = node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-vllm.service").stdout.strip()
    worker_after = node(WORKER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-vllm.service").stdout.strip()
    assert after != before and worker_after != worker_before  # the group restarted whole, not resumed
    metrics = guard_get("/twinrail/metrics")
    stalls = [line for line in metrics.splitlines() if line.startswith("twinrail_guard_engine_stalls_total ")]
    assert stalls and float(stalls[0].split()[1]) >= 1, stalls
    print(f"wedged vLLM: found stalled {found:.1f} s after SIGSTOP (idle probe every {idle_probe} s, probe timeout "
          f"{probe_timeout} s), a new request 503 naming it at {refused:.1f} s; serving again {back:.1f} s after")
    record("stall_drill", {"stall_found_s": round(found, 2), "stall_503_s": round(refused, 2),
                           "back_s": round(back, 1)})


TOKENIZE = PROJECT / "tests" / "fixtures" / "vllm" / "tokenize"


def vllm_tokens(prompt: str, add_special: bool) -> list[int]:
    """vLLM's own tokenization on the master (its /tokenize, on loopback)."""
    body = json.dumps({"model": "gemma3-270m-bf16", "prompt": prompt, "add_special_tokens": add_special})
    out = node(MASTER, "python3", "-c", "import sys, urllib.request as u; r = u.Request('http://127.0.0.1:8080/tokenize', "
               "data=sys.argv[1].encode(), headers={'Content-Type': 'application/json'}); "
               "print(u.urlopen(r, timeout=30).read().decode())", body).stdout
    return json.loads(out)["tokens"]


def gemma_completion() -> tuple[str, str]:
    """Gemma's greedy completion of a fixed prompt: (fingerprint, text)."""
    # a plain completion: the GGUF this folder comes from carries no chat template
    answer = client().completions.create(model="gemma3-270m-bf16", prompt="The capital of France is",
                                         max_tokens=8, temperature=0)
    assert answer.usage.completion_tokens == 8 and answer.choices[0].text.strip()
    return answer.system_fingerprint, answer.choices[0].text


def test_tensor_parallel_2_on_gemma_then_pipeline_parallel_again():
    """Gemma 3 270M split by tensor parallel 2 (each layer over both nodes),
    then by pipeline parallel 2: the unsplit model's greedy answer either
    way (the split changes where the work runs, not the answer), its
    tokenizer's ids llama.cpp's for the same prompts; then the inventory's
    model and pipeline parallel again."""
    tensor_parallel = str(Path(__file__).parent / "vars" / "tensor-parallel.yml")
    run = site("--tags", "weights,service", "-e", "@" + tensor_parallel)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "tensor 2 x pipeline 1" in run.stdout
    assert "lab-master: rank 0 (pipeline 0, tensor 0" in run.stdout and "lab-worker1: rank 1 (pipeline 0, tensor 1" in run.stdout
    started = time.monotonic()
    fingerprint_tp, text_tp = gemma_completion()
    record("tensor_parallel", {"seconds": round(time.monotonic() - started, 2), "text": text_tp})
    assert "tp2" in fingerprint_tp
    # the converted tokenizer adds what the GGUF says (its BOS): the same ids as llama.cpp's /tokenize
    for asked in json.loads((TOKENIZE / "llama-server_tokenize_gemma3-270m-q4_k_m.json").read_text()):
        assert vllm_tokens(asked["content"], asked["add_special"]) == asked["answer"]["tokens"], asked["content"]
    # the unsplit model's greedy answer (transformers, the same bf16 weights): a wrong split answers otherwise
    reference = json.loads((TOKENIZE / "reference-greedy_gemma3-270m-bf16_transformers.json").read_text())
    assert text_tp == reference["with_bos"], (text_tp, reference)
    run = site("--tags", "service", "-e", "@" + tensor_parallel, "-e", "inference_service_vllm_tensor_parallel=1",
               "-e", "inference_service_vllm_pipeline_parallel=2")
    assert run.returncode == 0, run.stdout[-3000:]
    fingerprint_pp, text_pp = gemma_completion()
    assert "pp2" in fingerprint_pp
    assert text_tp == text_pp, (text_tp, text_pp)
    back = site("--tags", "weights,service")
    assert back.returncode == 0, back.stdout[-3000:]
    assert [m.id for m in client().models.list().data] == [MODEL]


@pytest.fixture(autouse=True, scope="session")
def _figures():
    FIGURES.unlink(missing_ok=True)
    yield
