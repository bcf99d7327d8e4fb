"""What the lab's verifiers share: a command on a node, a lab.py command, the
changed counts of a playbook's recap, and a client of the service through the proxy on the controller's published
port (nginx -> twinrail-guard -> llama-server), as the operator's account."""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import ssl
import subprocess
import sys
import time
from pathlib import Path

import yaml

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
# docs/day2.md's samples: checked against what the day-2 commands print here
# (written instead with TWINRAIL_WRITE_SAMPLES=1: make day2-samples)
sys.path.insert(0, str(PROJECT / "tools"))
from day2_samples import check as sample  # noqa: E402  pylint: disable=wrong-import-position
import twinrail.loader  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.stages import catalogue as stages  # noqa: E402


def default(name: str):
    """A role's default where it lives (roles/<role>/defaults/main.yml): the lab's inventory sets none of these."""
    return stages.role_default(PROJECT, name)


LLAMA_PORT, GUARD_PORT, RPC_PORT, AGENT_PORT, PROXY_PORT, EXPORTER_PORT = (
    default(f"inference_service_{n}_port") for n in ("listen", "guard", "rpc", "agent", "proxy", "metrics"))
PROMETHEUS_PORT, ALERTMANAGER_PORT = default("monitoring_prometheus_port"), default("monitoring_alertmanager_port")
RECORD_DIR = default("system_backup_record_dir")
PASSWORD = (Path.home() / ".local" / "state" / "twinrail-lab" / "service-password").read_text().strip()
MASTER, WORKER, WORKER2 = "twinrail-lab-master", "twinrail-lab-worker1", "twinrail-lab-worker2"
# the 2-node lab and the same lab grown to three nodes (molecule/lab/scale)
LAB2, LAB3 = PROJECT / "inventory" / "lab", PROJECT / "inventory" / "lab3"
FIGURES = Path(os.environ.get("TWINRAIL_FIGURES", "/tmp/twinrail-failover.json"))


def scenario_tags() -> list[str]:
    """The scenario's own ansible-playbook arguments (molecule.yml), ${VARS}
    taken from the environment as molecule does; none: all of site.yml."""
    scenario = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"])
    config = yaml.safe_load((scenario / "molecule.yml").read_text())
    args = config.get("ansible", {}).get("executor", {}).get("args", {}).get("ansible_playbook", [])
    return [os.path.expandvars(arg) for arg in args]


def node(container: str, *argv: str, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True, check=check)


def unit_argv(container: str, unit: str) -> list[str]:
    """The command line of a unit's main process (its arguments as given,
    spaces and all)."""
    pid = node(container, "systemctl", "show", "-p", "MainPID", "--value", unit).stdout.strip()
    assert pid not in ("", "0"), (container, unit)
    return [a for a in node(container, "cat", f"/proc/{pid}/cmdline").stdout.split("\0") if a]


def lab(*argv: str, inventory: Path = LAB2) -> None:
    """tools/lab.py ARGV on the lab of an inventory (the 2-node lab's by default)."""
    subprocess.run([sys.executable, str(PROJECT / "tools" / "lab.py"), "-i", str(inventory), *argv], check=True,
                   capture_output=True)


RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", re.M)


def changed_by_host(stdout: str) -> dict[str, int]:
    """changed= of every host in an ansible-playbook's PLAY RECAP (the
    controller's localhost among them when a play ran there)."""
    return {host: int(changed) for host, changed in RECAP.findall(stdout)}


def connect(timeout: float = 120) -> http.client.HTTPSConnection:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the lab's self-signed certificate
    return http.client.HTTPSConnection("127.0.0.1", 8443, context=context, timeout=timeout)


def post(body: dict, timeout: float = 120):
    conn = connect(timeout)
    token = base64.b64encode(f"operator:{PASSWORD}".encode()).decode()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"content-type": "application/json", "authorization": f"Basic {token}"})
    return conn, conn.getresponse()


def chat(tokens: int = 4, timeout: float = 120) -> tuple[int, dict]:
    conn, response = post({"messages": [{"role": "user", "content": "Say yes."}], "max_tokens": tokens,
                           "temperature": 0}, timeout)
    data = response.read()
    conn.close()
    return response.status, (json.loads(data) if data.startswith(b"{") else {})


def wait_available(limit: float = 180, since: float | None = None, timeout: float = 30) -> float:
    """Seconds from `since` (now by default) to the first chat answered
    through the proxy, polled every 0.5 s; an error past limit."""
    started = time.monotonic() if since is None else since
    while time.monotonic() - started < limit:
        try:
            status, data = chat(timeout=timeout)
            if status == 200 and data.get("choices"):
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"the service did not come back within {limit} s")


def record(name: str, figures: dict) -> None:
    """Keep a drill's figures (docs/benchmarks.md quotes them)."""
    data = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    data[name] = figures
    FIGURES.write_text(json.dumps(data, indent=2))


# ---- the master's memory and the guard's view of it (the watermark drills)

def memory() -> dict:
    return json.loads(node(MASTER, "python3", "/opt/twinrail/guard/current/twinrail-guard.pyz", "memory").stdout)


def hog(pct: float, name: str) -> None:
    """Processes on the master holding memory up to pct of the node (units of
    their own, name-1, name-2, ...). The kernel reclaims page cache as the
    first one grows, so it may stop short of pct: then another tops it up
    from what the node uses now. A part never takes the node past pct (what
    it counts as used includes the active page cache, which the kernel
    drops first), so topping up again is safe, and the node's cache (the
    model's pages, the canary's copy of its model) can take many parts."""
    for part in range(1, 21):
        mem = memory()
        if mem["percent"] >= pct - 1:
            return
        size = int(mem["total"] * pct / 100 - mem["used"])
        node(MASTER, "systemd-run", "--unit", f"{name}-{part}", "--collect", "python3", "-c",
             f"import time; b = b'x' * {size}; time.sleep(600)")
        deadline, last = time.monotonic() + 30, mem["percent"]
        while time.monotonic() < deadline:  # until it reaches pct or stops growing
            time.sleep(1)
            held = memory()["percent"]
            if held >= pct - 1 or held <= last:
                break
            last = held
    held = memory()
    assert held["percent"] >= pct - 1, f"the hogs brought the master to {held}, not {pct}%"


def unhog() -> None:
    """Stop every hog, then wait (without failing) for the guard to see the
    node's memory back below its watermarks: the next test must not meet them."""
    node(MASTER, "systemctl", "stop", "twinrail-hog-*", check=False)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if guard_status()["memory_level"] == "ok":
                return
        except (ValueError, KeyError):
            pass
        time.sleep(1)


def guard_sees(level: str, limit: float = 30) -> dict:
    """Wait until the guard's own memory poll puts the cluster at level
    (a request sent before that is queued behind the busy slots, not refused)."""
    deadline = time.monotonic() + limit
    while (status := guard_status())["memory_level"] != level and time.monotonic() < deadline:
        time.sleep(0.5)
    assert status["memory_level"] == level, (f"the guard did not see memory at {level!r} within {limit} s: "
                                             f"{status['memory_detail']!r} {status['memory']}")
    return status


def guard_status() -> dict:
    return json.loads(node(MASTER, "python3", "-c", "import urllib.request as u; "
                           f"print(u.urlopen('http://127.0.0.1:{GUARD_PORT}/twinrail/status', timeout=5).read().decode())").stdout)


# ---- the lab grown to three nodes (molecule/lab/scale: test_scale_out.py, test_scale_in.py)


def inventory_playbook(inventory: Path, name: str, *argv: str, label: str | None = "scale",
                       timeout: float | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """ansible-playbook NAME (a path in the project, or absolute) on an
    inventory of the lab, without colours: molecule sets ANSIBLE_FORCE_COLOR,
    and the recap lines read would start with escape codes. (the run, its
    seconds); what it cost printed after `label:` (the verifier's output,
    pytest -s), unless label is None. With TWINRAIL_PLAYBOOK_LOGS set to a
    folder, each run's output is kept there as HHMMSS-<playbook>-<seconds>s.log
    (per-task times from profile_tasks: where a verifier's time goes)."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), str(PROJECT / name), *argv], cwd=PROJECT,
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)
    took = time.monotonic() - started
    keep = os.environ.get("TWINRAIL_PLAYBOOK_LOGS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%H%M%S")
        (Path(keep) / f"{stamp}-{Path(name).stem}-{round(took)}s.log").write_text(proc.stdout + proc.stderr)
    if label is not None:
        shown = " ".join(Path(a).name if a.startswith("/") else a for a in (name, *argv))
        print(f"{label}: {inventory.name} {shown}: rc {proc.returncode}, {took:.0f} s")
    return proc, took


def unit_pids(container: str, units: tuple = ("twinrail-agent.service", "twinrail-rpc@*.service")) -> dict:
    """{unit: MainPID} of the units named (patterns too): by default a
    worker's agent and RPC servers."""
    out = node(container, "systemctl", "show", "--property=Id,MainPID", *units).stdout
    blocks = [dict(line.split("=", 1) for line in block.splitlines() if "=" in line) for block in out.split("\n\n")]
    return {b["Id"]: int(b["MainPID"]) for b in blocks if b.get("Id")}


def rpc_list() -> str:
    """The --rpc list the master's llama-server runs with."""
    argv = unit_argv(MASTER, "twinrail-llama.service")
    return argv[argv.index("--rpc") + 1]


def recabled(inventory: Path) -> None:
    """A change of cabling is a maintenance: the service stopped, the cables
    laid (tools/lab.py up: a switch on each rail for two workers, direct for
    one), the service started again."""
    assert inventory_playbook(LAB2, "stop.yml")[0].returncode == 0
    lab("up", inventory=inventory)
    proc = inventory_playbook(LAB2, "start.yml")[0]
    assert proc.returncode == 0, proc.stdout[-3000:]
    wait_available()
