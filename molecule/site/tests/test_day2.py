"""Day 2 on the converged lab: stop.yml stops the service in the reverse of
its startup order (the master's proxy, guard and llama-server before the
workers' agent and RPC servers), and the service stage starts it again."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
MASTER, WORKER = "twinrail-lab-master", "twinrail-lab-worker1"


def playbook(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    return subprocess.run(["ansible-playbook", "-i", str(PROJECT / "inventory" / "lab"), *argv], cwd=PROJECT,
                          env=env, capture_output=True, text=True, check=False)


def stopped_at(container: str, unit: str) -> int:
    """When the unit went inactive, on the kernel's monotonic clock (the
    containers share the kernel, so the figures compare across nodes)."""
    out = subprocess.run(["docker", "exec", container, "systemctl", "show", "-p", "ActiveState",
                          "-p", "InactiveEnterTimestampMonotonic", unit], capture_output=True, text=True,
                         check=True).stdout
    show = dict(line.split("=", 1) for line in out.splitlines())
    assert show["ActiveState"] == "inactive", (unit, show)
    return int(show["InactiveEnterTimestampMonotonic"])


def test_stop_in_reverse_order_then_start_again(host):
    proc = playbook(str(PROJECT / "stop.yml"))
    assert proc.returncode == 0, proc.stdout[-2000:]
    order = [stopped_at(MASTER, "nginx.service"), stopped_at(MASTER, "twinrail-guard.service"),
             stopped_at(MASTER, "twinrail-llama.service"), stopped_at(WORKER, "twinrail-agent.service"),
             stopped_at(WORKER, "twinrail-rpc@198.19.0.2.service"), stopped_at(WORKER, "twinrail-rpc@198.19.1.2.service")]
    assert order[:4] == sorted(order[:4]), order
    assert max(order[:3]) < min(order[3:]), order
    proc = playbook(str(PROJECT / "site.yml"), "--tags", "service")
    assert proc.returncode == 0, proc.stdout[-2000:]
    answer = subprocess.run(["docker", "exec", MASTER, "python3", "-c",
                             "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8081/health', timeout=10).status)"],
                            capture_output=True, text=True, check=False)
    assert answer.stdout.strip() == "200", answer


def config_version(container: str) -> str:
    return subprocess.run(["docker", "exec", container, "readlink", "/etc/twinrail/service/current"],
                          capture_output=True, text=True, check=True).stdout.strip()


def record(container: str) -> dict:
    out = subprocess.run(["docker", "exec", container, "cat", "/var/lib/twinrail/deployments/current"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_rollback_puts_every_node_back_on_the_previous_deployment(host):
    before = {c: (config_version(c), record(c)["digest"]) for c in (MASTER, WORKER)}
    # a new deployment: another configuration (the guard's grace), on both nodes
    proc = playbook(str(PROJECT / "site.yml"), "--tags", "service", "-e", "inference_service_guard_grace=4")
    assert proc.returncode == 0, proc.stdout[-2000:]
    after = {c: (config_version(c), record(c)["digest"]) for c in (MASTER, WORKER)}
    assert all(after[c][0] != before[c][0] and after[c][1] != before[c][1] for c in after)
    # an unknown record: refused on every node, nothing switched
    proc = playbook(str(PROJECT / "rollback.yml"), "-e", "system_backup_rollback_to=0123456789abcdef")
    assert proc.returncode != 0 and "nothing was switched on any node" in proc.stdout
    assert {c: config_version(c) for c in after} == {c: after[c][0] for c in after}
    # back to the previous deployment, both nodes together, the service answering
    proc = playbook(str(PROJECT / "rollback.yml"))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert {c: (config_version(c), record(c)["digest"]) for c in before} == before
    env = subprocess.run(["docker", "exec", MASTER, "cat", "/etc/twinrail/service/current/service.env"],
                         capture_output=True, text=True, check=True).stdout
    assert "TWINRAIL_GUARD_GRACE=3" in env
    answer = subprocess.run(["docker", "exec", MASTER, "python3", "-c",
                             "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8081/health', timeout=10).status)"],
                            capture_output=True, text=True, check=False)
    assert answer.stdout.strip() == "200", answer
    # the site, run again as it is, finds the nodes where rollback left them
    proc = playbook(str(PROJECT / "site.yml"), "--tags", "service")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert {c: config_version(c) for c in before} == {c: before[c][0] for c in before}
