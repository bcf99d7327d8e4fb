"""The service as OpenAI clients use it, through the proxy on the
controller's published port, with the real `openai` SDK configured as
people configure it (base_url and api_key): chat, streaming and the model
list with an API key; a wrong key or none is a JSON 401; a key removed from
the inventory stops working after a re-run; the internals are the
operators'; every error is JSON in the API's shape (400, 413, 429)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import subprocess
import threading
from pathlib import Path

import openai
import pytest
import yaml
from lab_client import MASTER, PASSWORD, PROJECT, changed_by_host, node, wait_available
from twinrail.ctl.site import config_dir  # noqa: E402
import lab_quickstart  # tools/ (lab_client puts it on the path)  # noqa: E402  pylint: disable=wrong-import-order

testinfra_hosts = ["ansible://master"]

BASE_URL = "https://127.0.0.1:8443/v1"
KEYS = Path.home() / ".local" / "state" / "twinrail-lab" / "api-keys"


def key(name: str) -> str:
    return (KEYS / name).read_text().strip()


def client(api_key: str, **kwargs) -> openai.OpenAI:
    # the lab's certificate is self-signed: the SDK's own HTTP client, told so
    return openai.OpenAI(base_url=BASE_URL, api_key=api_key, max_retries=0,
                         http_client=openai.DefaultHttpxClient(verify=False, timeout=120), **kwargs)


def served_model() -> str:
    """The name the configuration serves the model under (llama-server -a)."""
    line = node(MASTER, "grep", "^TWINRAIL_MODEL_NAME=", "/etc/twinrail/service/current/service.env").stdout
    return line.strip().split("=", 1)[1]


def raw(method: str, path: str, headers: dict, body: bytes | None = None) -> tuple[int, dict, dict]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", 8443, context=context, timeout=60)
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, json.loads(data), dict(response.getheaders())


def bearer(name: str) -> dict:
    return {"Authorization": f"Bearer {key(name)}", "Content-Type": "application/json"}


def operator() -> dict:
    token = base64.b64encode(f"operator:{PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}", "Content-Type": "application/json"}


def test_an_api_key_works_for_models_chat_and_streaming(host):
    wait_available()
    api = client(key("lab-client"))
    model = served_model()
    assert [m.id for m in api.models.list()] == [model]
    reply = api.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say yes."}],
                                        max_tokens=8, temperature=0)
    assert reply.choices[0].message.content and reply.usage.completion_tokens > 0
    pieces = [chunk.choices[0].delta.content or "" for chunk in api.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Count to five."}], max_tokens=16, stream=True)
        if chunk.choices]
    assert len(pieces) > 1 and "".join(pieces)


def test_a_wrong_key_or_none_is_a_json_401(host):
    with pytest.raises(openai.AuthenticationError) as caught:
        client("not-a-key-of-this-cluster-0000").models.list()
    # the SDK parsed a JSON error (an HTML page would reach it as text)
    assert caught.value.status_code == 401 and caught.value.body["type"] == "invalid_api_key", caught.value.body
    for headers in ({}, {"Authorization": "Bearer "}, {"Authorization": "Basic b3BlcmF0b3I6bm8="}):
        status, body, _ = raw("GET", "/v1/models", headers)
        assert status == 401 and body["error"]["code"] == 401, (headers, body)


def test_the_internals_are_the_operators(host):
    for path in ("/slots", "/metrics", "/props", "/twinrail/status"):
        status, body, _ = raw("GET", path, bearer("lab-client"))
        assert status == 403 and body["error"]["type"] == "permission_denied", (path, body)
    status, body, _ = raw("GET", "/slots", operator())
    assert status == 200 and isinstance(body, list)


def test_errors_are_json_in_the_apis_shape(host):
    status, body, _ = raw("POST", "/v1/chat/completions", bearer("lab-client"), b'{"messages": [')
    assert status == 400 and body["error"]["type"] == "invalid_request_error", body
    status, body, _ = raw("POST", "/v1/chat/completions", bearer("lab-client"), b"x" * (17 * 2**20))
    assert status == 413 and body["error"]["code"] == 413, body


def test_past_the_queue_cap_a_burst_gets_429_and_the_rest_succeed(host):
    """4 slots and a queue of 16 (the lab's defaults): a burst of 40 long
    requests; those beyond slots + queue get 429 with Retry-After, the
    others finish."""
    wait_available()
    api = client(key("lab-client"))
    model = served_model()
    outcomes: list = []
    lock = threading.Lock()

    def one():
        try:
            reply = api.chat.completions.create(model=model, messages=[{"role": "user", "content": "Tell a story."}],
                                                max_tokens=48, temperature=0)
            result = ("ok", reply.choices[0].finish_reason)
        except openai.RateLimitError as exc:
            result = ("429", exc.response.headers.get("retry-after"))
        except openai.APIStatusError as exc:
            result = (str(exc.status_code), exc.body)
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=one) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    kinds = sorted({kind for kind, _ in outcomes})
    limited = [extra for kind, extra in outcomes if kind == "429"]
    print(f"burst of 40: {len([1 for k, _ in outcomes if k == 'ok'])} answered, {len(limited)} got 429")
    assert len(outcomes) == 40 and kinds == ["429", "ok"], outcomes
    assert all(limited), "a 429 without Retry-After"


def test_the_quick_start_writes_the_lab_and_its_key_streams_while_a_removed_key_stops(host, tmp_path):
    """README's quick start on the lab (docs/development.md's block, run by
    `make molecule` on the fresh lab before the pass converged the site it
    wrote; run here when absent, on a lab from `make lab`): `twinrail init`
    found the lab's two boxes and wrote a site that is inventory/lab
    (nodes, rails, addresses, the connection) with a vault. The keys' list
    then becomes lab-client and the key init generated, lab-spare left out:
    a re-run of the service stage writes only the keys' file, the generated
    key streams a completion through the openai SDK and lab-spare is
    refused; given back, it works again."""
    site = PROJECT / "inventory" / "labsite"
    if not (site / "hosts.yml").exists():
        proc = lab_quickstart.run()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        print(proc.stdout)
    assert yaml.safe_load((site / "hosts.yml").read_text()) == yaml.safe_load(
        (PROJECT / "inventory" / "lab" / "hosts.yml").read_text())
    for name in ("lab-master", "lab-worker1"):
        found = yaml.safe_load((site / "host_vars" / f"{name}.yml").read_text())
        lab = yaml.safe_load((PROJECT / "inventory" / "lab" / "host_vars" / f"{name}.yml").read_text())
        assert found["twinrail_rails"] == [dict(r, rdma_device=r.get("rdma_device", "")) for r in
                                           lab["twinrail_rails"]], (found, lab)
        assert found["twinrail_mgmt_address"] == lab["twinrail_mgmt_address"]
        assert found["ansible_host"] == lab["ansible_host"] and found["ansible_user"] == "twinrail"
    assert (site / "group_vars" / "cluster" / "vault.yml").read_text().startswith("$ANSIBLE_VAULT;")
    generated = (config_dir(lab_quickstart.SITE) / "api-key").read_text().strip()
    spare = client(key("lab-spare"))
    assert spare.models.list().data
    without = tmp_path / "keys.yml"
    # lab-client (the same lookup: no key of the lab's is written here) and the generated key
    without.write_text("inference_service_api_keys:\n  - name: lab-client\n"
                       "    key: \"{{ lookup('ansible.builtin.file', twinrail_lab_state_dir ~ '/api-keys/lab-client') }}\"\n"
                       f"  - name: first-client\n    key: {json.dumps(generated)}\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")

    def service_run(*extra: str) -> str:
        return subprocess.run(["ansible-playbook", "-i", str(PROJECT / "inventory" / "lab"), str(PROJECT / "site.yml"),
                               "--tags", "service", *extra], check=True, capture_output=True, text=True, env=env,
                              cwd=PROJECT).stdout

    pid = node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-guard.service").stdout
    restored = False
    try:
        service_run("-e", f"@{without}")
        with pytest.raises(openai.AuthenticationError):
            spare.models.list()
        assert client(key("lab-client")).models.list().data
        stream = client(generated).chat.completions.create(
            model=served_model(), stream=True, max_tokens=16, messages=[{"role": "user", "content": "Say hello."}])
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert text.strip(), "the generated key streamed nothing"
        print(f"the quick start's key streamed: {text!r}")
        # the guard read the new digests itself: nothing restarted
        assert node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-guard.service").stdout == pid
        # the key given back: the stage runs whole and only the keys' file
        # is written
        out = service_run()
        restored = True
        changed = [line for line in out.splitlines() if line.startswith("changed: ")]
        recap = changed_by_host(out)
        assert (recap["lab-master"], recap["lab-worker1"]) == (1, 0) and len(changed) == 1, (recap, changed)
    finally:
        if not restored:
            service_run()
    assert spare.models.list().data
    assert node(MASTER, "systemctl", "show", "-p", "MainPID", "--value", "twinrail-guard.service").stdout == pid
