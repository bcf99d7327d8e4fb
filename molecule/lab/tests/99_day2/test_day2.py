"""Day 2 on the converged lab: stop.yml stops the service in the reverse of
its startup order (the master's proxy, guard and llama-server before the
workers' agent and RPC servers), and the service stage starts it again;
rollback.yml after a configuration and guard change and after a second runtime
build."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from lab_client import GUARD_PORT, LAB2, RECORD_DIR, changed_by_host, default, inventory_playbook, lab, sample, unit_argv

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
MASTER, WORKER = "twinrail-lab-master", "twinrail-lab-worker1"


def playbook(*argv: str) -> subprocess.CompletedProcess:
    return inventory_playbook(LAB2, *argv, label="day 2")[0]


def entered_at(container: str, unit: str, state: str) -> int:
    """When the unit entered `state` (active or inactive, and is in it), on
    the kernel's monotonic clock (the containers share the kernel, so the
    figures compare across nodes)."""
    prop = f"{state.capitalize()}EnterTimestampMonotonic"
    out = subprocess.run(["docker", "exec", container, "systemctl", "show", "-p", "ActiveState", "-p", prop, unit],
                         capture_output=True, text=True, check=True).stdout
    show = dict(line.split("=", 1) for line in out.splitlines())
    assert show["ActiveState"] == state, (unit, show)
    return int(show[prop])


def stopped_at(container: str, unit: str) -> int:
    return entered_at(container, unit, "inactive")


def test_stop_in_reverse_order_then_start_again(host):
    proc = playbook(str(PROJECT / "stop.yml"))
    assert proc.returncode == 0, proc.stdout[-2000:]
    sample("stop", proc.stdout)
    order = [stopped_at(MASTER, "nginx.service"), stopped_at(MASTER, "twinrail-guard.service"),
             stopped_at(MASTER, "twinrail-llama.service"), stopped_at(WORKER, "twinrail-agent.service"),
             stopped_at(WORKER, "twinrail-rpc@198.19.0.2.service"), stopped_at(WORKER, "twinrail-rpc@198.19.1.2.service")]
    assert order[:4] == sorted(order[:4]), order
    assert max(order[:3]) < min(order[3:]), order
    # start.yml: the units as configured, in order, with the health gate
    proc = playbook(str(PROJECT / "start.yml"))
    assert proc.returncode == 0, proc.stdout[-2000:]
    sample("start", proc.stdout)
    assert "TASK [inference_service : Wait for the guard to find the cluster available]" in proc.stdout
    started = [started_at(WORKER, "twinrail-rpc@198.19.0.2.service"), started_at(WORKER, "twinrail-rpc@198.19.1.2.service"),
               started_at(MASTER, "twinrail-llama.service")]
    assert max(started[:2]) <= started[2], started
    answer = subprocess.run(["docker", "exec", MASTER, "python3", "-c",
                             f"import urllib.request as u; print(u.urlopen('http://127.0.0.1:{GUARD_PORT}/health', timeout=10).status)"],
                            capture_output=True, text=True, check=False)
    assert answer.stdout.strip() == "200", answer


def started_at(container: str, unit: str) -> int:
    return entered_at(container, unit, "active")


def config_version(container: str) -> str:
    return subprocess.run(["docker", "exec", container, "readlink", "/etc/twinrail/service/current"],
                          capture_output=True, text=True, check=True).stdout.strip()


def record(container: str) -> dict:
    out = subprocess.run(["docker", "exec", container, "cat", f"{RECORD_DIR}/current"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_rollback_puts_every_node_back_on_the_previous_deployment(host, tmp_path):
    """A second deployment with the service stage that changes both the
    configuration (the guard's grace) and the guard itself (its package
    copied, its startup log line changed): a new configuration version, a
    new guard release and a new record on both nodes, the guard and the
    agent restarted on it. rollback.yml refuses an unknown record, fails its
    gate with a cable pulled and says where the nodes stand, then puts both
    nodes back on the first deployment (configuration, guard release and
    record), the previous guard running; the site run as it is changes
    nothing."""
    guards = ((MASTER, "twinrail-guard.service"), (WORKER, "twinrail-agent.service"))
    before = {c: (config_version(c), record(c)["digest"]) for c in (MASTER, WORKER)}
    first_guard = guard_release(MASTER)
    assert guard_release(WORKER) == first_guard and {running_guard(c, u) for c, u in guards} == {first_guard}
    assert record(MASTER)["guard"]["release"] == first_guard
    source = tmp_path / "src"
    shutil.copytree(PROJECT / "src", source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    proxy = source / "twinrail" / "guard" / "proxy.py"
    assert 'log(f"proxy: ' in proxy.read_text()
    proxy.write_text(proxy.read_text().replace('log(f"proxy: ', 'log(f"proxy (changed guard): '))
    # a new deployment: another configuration and another guard, on both nodes
    proc = playbook(str(PROJECT / "site.yml"), "--tags", "service", "-e", "inference_service_guard_grace=4",
                    "-e", f"inference_service_guard_source={source}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    after = {c: (config_version(c), record(c)["digest"]) for c in (MASTER, WORKER)}
    assert all(after[c][0] != before[c][0] and after[c][1] != before[c][1] for c in after)
    second_guard = guard_release(MASTER)
    assert second_guard != first_guard and guard_release(WORKER) == second_guard
    assert {running_guard(c, u) for c, u in guards} == {second_guard}
    assert record(WORKER)["guard"]["release"] == second_guard
    journal = subprocess.run(["docker", "exec", MASTER, "journalctl", "-u", "twinrail-guard.service", "-n", "20",
                              "--no-pager"], capture_output=True, text=True, check=True).stdout
    assert "proxy (changed guard): " in journal, journal[-2000:]
    # an unknown record: refused on every node, naming the variable, nothing switched
    proc = playbook(str(PROJECT / "rollback.yml"), "-e", "system_backup_rollback_to=0123456789abcdef")
    assert proc.returncode != 0 and "nothing was switched on any node" in proc.stdout
    assert "system_backup_rollback_to: no record and no configuration version '0123456789abcdef'" in proc.stdout
    assert before[MASTER][0] in proc.stdout  # the versions it could have named
    assert {c: config_version(c) for c in after} == {c: after[c][0] for c in after}
    assert {guard_release(c) for c in after} == {second_guard}
    # a cable pulled while rolling back: the start fails its gate and says
    # where the nodes stand; both are on the target's links, not recorded
    lab("cut", "rail1")
    try:
        proc = playbook(str(PROJECT / "rollback.yml"), "-e", "inference_service_master_timeout=20")
    finally:
        lab("mend", "rail1")
    assert proc.returncode != 0
    failed = re.search(rf"rollback: lab-master: every node \(lab-master, lab-worker1\) was switched to record "
                       rf"{before[MASTER][1]} \(runtime [0-9a-f]{{16}}, configuration {before[MASTER][0]}\), but the start "
                       r"failed its gate: service: lab-master: not healthy after the start: twinrail-llama.service not "
                       r"running, last lines: .*worker RPC server 198\.19\.1\.2:\d+ not answering.*"
                       rf"run rollback.yml -e system_backup_rollback_to={before[MASTER][0]} again", proc.stdout)
    assert failed, proc.stdout[-3000:]
    assert "rollback: lab-worker1: every node (lab-master, lab-worker1) was switched to record " \
           f"{before[WORKER][1]} " in proc.stdout
    assert {c: config_version(c) for c in before} == {c: before[c][0] for c in before}
    assert {guard_release(c) for c in before} == {first_guard}
    assert {c: record(c)["digest"] for c in after} == {c: after[c][1] for c in after}
    # the cable back, the rollback again as the message says: both nodes
    # together, on the first configuration and guard, the service answering
    proc = playbook(str(PROJECT / "rollback.yml"), "-e", f"system_backup_rollback_to={before[MASTER][0]}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    sample("rollback", proc.stdout)
    assert {c: (config_version(c), record(c)["digest"]) for c in before} == before
    assert {c: guard_release(c) for c in before} == {c: first_guard for c in before}
    assert {running_guard(c, u) for c, u in guards} == {first_guard}
    env = subprocess.run(["docker", "exec", MASTER, "cat", "/etc/twinrail/service/current/service.env"],
                         capture_output=True, text=True, check=True).stdout
    assert "TWINRAIL_GUARD_GRACE=3" in env
    assert completion("The capital of France is")["content"].strip()
    # the site, run again as it is, finds the nodes where rollback left them:
    # the inventory's configuration and guard, nothing to change
    proc = playbook(str(PROJECT / "site.yml"), "--tags", "service")
    assert proc.returncode == 0, proc.stdout[-3000:]
    recap = {h: c for h, c in changed_by_host(proc.stdout).items() if h.startswith("lab-")}
    assert recap and not any(recap.values()), recap
    assert {c: config_version(c) for c in before} == {c: before[c][0] for c in before}


def release(container: str) -> str:
    return subprocess.run(["docker", "exec", container, "readlink", "/opt/twinrail/runtime/current"],
                          capture_output=True, text=True, check=True).stdout.strip().rsplit("/", 1)[-1]


def manifest(container: str, build_id: str) -> dict:
    out = subprocess.run(["docker", "exec", container, "cat", f"/opt/twinrail/runtime/{build_id}/manifest.json"],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def running_release(container: str, unit: str) -> str:
    """The release whose binary the unit's main process runs (the units start
    runtime/current/bin/..., resolved by the kernel at exec)."""
    pid = subprocess.run(["docker", "exec", container, "systemctl", "show", "-p", "MainPID", "--value", unit],
                         capture_output=True, text=True, check=True).stdout.strip()
    assert pid not in ("", "0"), (container, unit)
    # as the process's own user: root here has no CAP_SYS_PTRACE to read it
    user = subprocess.run(["docker", "exec", container, "ps", "-o", "user=", "-p", pid],
                          capture_output=True, text=True, check=True).stdout.strip()
    exe = subprocess.run(["docker", "exec", "-u", user, container, "readlink", f"/proc/{pid}/exe"],
                         capture_output=True, text=True, check=True).stdout.strip()
    match = re.fullmatch(r"/opt/twinrail/runtime/([0-9a-f]{16})/bin/[a-z-]+", exe)
    assert match, (container, unit, exe)
    return match.group(1)


def completion(prompt: str) -> dict:
    """A short completion through the guard on the master."""
    code = ("import json, urllib.request as u\n"
            f"r = u.Request('http://127.0.0.1:{GUARD_PORT}/completion', method='POST',"
            " headers={'Content-Type': 'application/json'},"
            f" data=json.dumps({{'prompt': {prompt!r}, 'n_predict': 8, 'temperature': 0}}).encode())\n"
            "print(u.urlopen(r, timeout=120).read().decode())\n")
    out = subprocess.run(["docker", "exec", MASTER, "python3", "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-1000:]
    return json.loads(out.stdout)


def guard_release(container: str) -> str:
    return subprocess.run(["docker", "exec", container, "readlink", "/opt/twinrail/guard/current"],
                          capture_output=True, text=True, check=True).stdout.strip()


def running_guard(container: str, unit: str) -> str:
    """The guard release whose zipapp the unit's main process runs."""
    argv = unit_argv(container, unit)
    match = re.fullmatch(r"/opt/twinrail/guard/([0-9.]+-[0-9a-f]{12})/twinrail-guard\.pyz", argv[1])
    assert argv[0] == "/usr/bin/python3" and match, (container, unit, argv)
    return match.group(1)


UNITS = ((MASTER, "twinrail-llama.service"), (WORKER, "twinrail-rpc@198.19.0.2.service"),
         (WORKER, "twinrail-rpc@198.19.1.2.service"))


def test_rollback_after_a_second_runtime_build(host):
    """A second build of the runtime with another option (the commit it is
    stamped with: only that stamp's files compile again, the rest comes from
    the builder's ccache), deployed on both nodes, then rollback.yml: both
    nodes run the first build-id again, the record is the one before, the
    service answers, and the runtime stage run as it is changes nothing."""
    first = {c: (release(c), record(c)["digest"]) for c in (MASTER, WORKER)}
    assert len({r for r, _ in first.values()}) == 1, first
    first_build = first[MASTER][0]
    assert {running_release(c, u) for c, u in UNITS} == {first_build}
    # the controller keeps every build it cached (~/.cache/twinrail/runtime,
    # shared by checkouts and by the runs before this one): this test's own
    # second build, left by an earlier run, would be shipped, not compiled
    cache = Path.home() / ".cache" / "twinrail" / "runtime"
    for kept in cache.glob("*"):
        if not kept.name.startswith(first_build):
            kept.unlink()
    flags = '{"runtime_build_cmake_extra": {"LLAMA_BUILD_COMMIT": "twinrail-second-build"}}'
    proc = playbook(str(PROJECT / "site.yml"), "--tags", "runtime,service", "-e", flags)
    assert proc.returncode == 0, proc.stdout[-3000:]
    second = {c: (release(c), record(c)["digest"]) for c in (MASTER, WORKER)}
    second_build = second[MASTER][0]
    assert second_build != first_build and second[WORKER][0] == second_build, (first, second)
    assert all(second[c][1] != first[c][1] for c in second), (first, second)
    assert manifest(WORKER, second_build)["cmake"]["LLAMA_BUILD_COMMIT"] == "twinrail-second-build"
    version = subprocess.run(["docker", "exec", WORKER, f"/opt/twinrail/runtime/{second_build}/bin/llama-server",
                              "--version"], capture_output=True, text=True, check=False)
    assert "commit twinrail-second-build" in version.stdout + version.stderr, version
    # the builder's ccache served the objects the stamp does not touch
    log = subprocess.run(["docker", "exec", MASTER, "cat", f"{default('runtime_build_root')}/{second_build}/build.log"],
                         capture_output=True, text=True, check=True).stdout
    hits = re.search(r"^\s*Hits:\s+(\d+) /\s*(\d+)", log, re.M)
    assert hits and int(hits.group(1)) > int(hits.group(2)) // 2, log[-1500:]
    assert record(WORKER)["runtime"]["release"] == second_build
    # the units were restarted on the new build, not left on the old binaries
    assert {running_release(c, u) for c, u in UNITS} == {second_build}
    assert completion("The capital of France is")["content"].strip()

    # the first build's RPC server damaged on the worker: refused on every
    # node before any link moves, naming the host and the binary
    binary = f"/opt/twinrail/runtime/{first_build}/bin/ggml-rpc-server"
    subprocess.run(["docker", "exec", WORKER, "sh", "-c", f"cp -p {binary} {binary}.orig && printf x >> {binary}"],
                   check=True)
    try:
        proc = playbook(str(PROJECT / "rollback.yml"))
    finally:
        subprocess.run(["docker", "exec", WORKER, "mv", f"{binary}.orig", binary], check=True)
    assert proc.returncode != 0
    assert re.search(r"rollback: lab-worker1: .*ggml-rpc-server of release " + first_build, proc.stdout), proc.stdout[-3000:]
    assert "nothing was switched on any node" in proc.stdout
    assert {c: release(c) for c in first} == {c: second_build for c in first}
    assert {running_release(c, u) for c, u in UNITS} == {second_build}

    kept = {c: PROJECT / "reports" / "lab" / "deployments" / n / f"{first[c][1]}.json"
            for c, n in ((MASTER, "lab-master"), (WORKER, "lab-worker1"))}
    for path in kept.values():
        path.unlink(missing_ok=True)
    proc = playbook(str(PROJECT / "rollback.yml"))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert {c: (release(c), record(c)["digest"]) for c in first} == first
    assert {running_release(c, u) for c, u in UNITS} == {first_build}
    # the record fetched back to the controller, inside the project (the
    # day-2 playbooks sit at its top, the stages' plays in playbooks/)
    for container in kept:
        assert json.loads(kept[container].read_text())["digest"] == first[container][1]
    answer = completion("The capital of France is")
    assert answer["content"].strip() and answer["tokens_predicted"] > 0, answer
    # the second build is kept on both nodes, for a roll forward
    assert {manifest(c, second_build)["build_id"] for c in (MASTER, WORKER)} == {second_build}

    # the inventory names the first build: the runtime stage finds nothing to
    # change (current already names it; the units' binaries are checked
    # above, and the service stage after a rollback in the test before; the
    # canary keeps the first build's pass beside the second's, and loads
    # nothing again)
    proc = playbook(str(PROJECT / "site.yml"), "--tags", "runtime")
    assert proc.returncode == 0, proc.stdout[-3000:]
    recap = {h: c for h, c in changed_by_host(proc.stdout).items() if h.startswith("lab-")}
    assert recap and not any(recap.values()), recap
    assert len(re.findall(r"runtime canary: lab-[a-z0-9]+: passed at .* nothing loaded", proc.stdout)) == 2, \
        proc.stdout[-3000:]


def test_restore_a_node_then_every_stage_runs_again(host):
    """Seed 000: a node's files put back from its system backup, in place,
    then the stages again on every node (the rails' gates and the startup
    order span the nodes). The worker loses a file the stages do not manage
    (only the backup has it) and a unit the service stage installs (the
    backup, taken before the first deploy, does not: the stages put it back)."""
    unit = "/etc/systemd/system/twinrail-agent.service"
    original = subprocess.run(["docker", "exec", WORKER, "sha256sum", "/etc/debian_version"],
                              capture_output=True, text=True, check=True).stdout
    subprocess.run(["docker", "exec", WORKER, "sh", "-c", f"printf 'damaged\\n' > /etc/debian_version && rm {unit}"],
                   check=True)
    # the acceptance stage runs to its gate, without its soak or the failover
    # drill, with one level of the ramp and short prompts: the converge
    # measured them, this proves the stages run again
    paths = json.dumps({"system_backup_restore_paths": ["/etc/debian_version", "/etc/systemd/system"],
                        "acceptance_soak_seconds": 0, "acceptance_ramp_levels": [1],
                        "acceptance_long_context_chars": 2000, "acceptance_prefill_chars": 1000,
                        "acceptance_failover_drill": False})
    proc = playbook(str(PROJECT / "restore.yml"), "-e", "system_backup_restore_nodes=lab-worker1", "-e", paths)
    assert proc.returncode == 0, proc.stdout[-3000:]
    sample("restore", proc.stdout)
    assert "restore: lab-worker1: /etc/debian_version, /etc/systemd/system from system-" in proc.stdout
    assert "restore: lab-master:" not in proc.stdout
    assert subprocess.run(["docker", "exec", WORKER, "sha256sum", "/etc/debian_version"],
                          capture_output=True, text=True, check=True).stdout == original
    # every stage ran again, on both nodes, to the acceptance gate
    recap = {h: c for h, c in changed_by_host(proc.stdout).items() if h.startswith("lab-")}
    assert set(recap) == {"lab-master", "lab-worker1"} and recap["lab-worker1"] > 0, recap
    assert "TASK [bandwidth_gate : " in proc.stdout and "TASK [acceptance : Gate the acceptance table]" in proc.stdout
    state = subprocess.run(["docker", "exec", WORKER, "systemctl", "is-active", "twinrail-agent.service"],
                           capture_output=True, text=True, check=False).stdout.strip()
    assert state == "active"
    assert completion("The capital of France is")["content"].strip()


def test_a_limited_run_of_a_stage_that_spans_the_nodes_is_refused(host):
    proc = playbook(str(PROJECT / "site.yml"), "--tags", "bandwidth", "--limit", "lab-worker1")
    assert proc.returncode != 0
    assert ("bandwidth: lab-worker1: every rail joins the master to a worker, so the stage runs on the whole cluster; "
            "lab-master left out of this run (--limit)") in proc.stdout
