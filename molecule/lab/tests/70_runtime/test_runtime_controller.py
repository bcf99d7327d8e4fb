"""The runtime stage seen from the controller: the model runs on the built
llama-bench, the artifact cache serves a fresh worker without a compile,
and bad inputs are refused before any build starts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
MODEL = (Path.home() / ".cache" / "twinrail" / "bundle" / "models" / "smollm2-135m-instruct"
         / "SmolLM2-135M-Instruct.Q4_1.gguf")
CACHE = Path.home() / ".cache" / "twinrail" / "runtime"


def run_stage(host, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(
        ["ansible-playbook", "-i", host.backend.ansible_inventory,
         str(PROJECT / "site.yml"), "--tags", "runtime", *extra],
        capture_output=True, text=True, env=env, timeout=900, check=False)


def test_llama_bench_runs_the_lab_model(host):
    subprocess.run(["docker", "cp", str(MODEL), "twinrail-lab-master:/tmp/model.gguf"],
                   check=True)
    bench = host.run("/opt/twinrail/runtime/current/bin/llama-bench -m /tmp/model.gguf "
                     "-p 16 -n 8 -r 1 -t 2 -o json")
    assert bench.rc == 0, bench.stderr[-2000:]
    rows = json.loads(bench.stdout)
    assert {r["n_prompt"] for r in rows} == {16, 0} and all(r["avg_ts"] > 0 for r in rows)
    host.run("rm -f /tmp/model.gguf")


def test_the_controller_keeps_artifact_and_manifest(host):
    build = json.loads(host.file("/opt/twinrail/runtime/current/manifest.json").content_string)
    assert (CACHE / f"{build['build_id']}.tar.gz").exists()
    cached = json.loads((CACHE / f"{build['build_id']}.json").read_text())
    assert cached["binaries"] == build["binaries"]


def test_a_fresh_worker_gets_the_cached_build_without_a_compile(host):
    subprocess.run(["docker", "exec", "twinrail-lab-worker1", "rm", "-rf",
                    "/opt/twinrail/runtime"], check=True)
    proc = run_stage(host)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "compile on no node; artifact cached on the controller; installed on lab-master" \
        in out
    assert "Start the build in the background" not in out.split("PLAY RECAP")[0] \
        or "skipping" in out
    worker = subprocess.run(["docker", "exec", "twinrail-lab-worker1", "/opt/twinrail/runtime/"
                             "current/bin/llama-server", "--version"], capture_output=True,
                            text=True, check=False)
    assert worker.returncode == 0


def refused(host, *extra: str) -> str:
    proc = run_stage(host, *extra)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Start the build in the background" not in out
    return out


def test_unknown_isa_flag_is_refused_before_building(host):
    out = refused(host, "-e", '{"runtime_build_isa_flags": ["-march=x86-64", "-mfoo"]}')
    assert "runtime_build_isa_flags: unknown ISA flag(s) -mfoo" in out


def test_archive_checksum_mismatch_is_refused(host):
    out = refused(host, "-e", "runtime_build_archive_sha256=" + "0" * 64)
    assert "has sha256 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e, " \
           "expected the pinned " + "0" * 64 in out


def test_cuda_without_nvcc_is_refused(host):
    out = refused(host, "-e", "runtime_build_cuda=true")
    assert "runtime_build_cuda is true but nvcc is not installed" in out


def test_the_canary_fails_naming_the_node_and_the_cause_and_keeps_its_verdict(host):
    """The canary module run on the worker with a damaged copy of its model
    (cut to 30 MB): it fails naming the node and the loader's words; the
    stage's own verdict on the node is left as it was."""
    worker = "twinrail-lab-worker1"
    kept = subprocess.run(["docker", "exec", worker, "cat", "/var/lib/twinrail/runtime-canary.json"],
                          capture_output=True, text=True, check=True).stdout
    subprocess.run(["docker", "exec", worker, "sh", "-c", "head -c 30000000 /opt/twinrail/canary/"
                    "SmolLM2-135M-Instruct.Q4_1.gguf > /tmp/canary-cut.gguf"], check=True)
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    proc = subprocess.run(
        ["ansible", "-i", host.backend.ansible_inventory, "lab-worker1", "-b", "-m", "runtime_canary", "-a",
         "binary=/opt/twinrail/runtime/current/bin/llama-server model=/tmp/canary-cut.gguf model_sha256=cut "
         "record=/tmp/canary-drill.json host=lab-worker1"],
        capture_output=True, text=True, env=env, timeout=300, check=False, cwd=PROJECT)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert ("runtime canary failed: lab-worker1 (CPU build): the canary model did not load: error loading model: "
            "tensor 'token_embd.weight' data is not within the file bounds") in out, out[-3000:]
    assert subprocess.run(["docker", "exec", worker, "cat", "/var/lib/twinrail/runtime-canary.json"],
                          capture_output=True, text=True, check=True).stdout == kept
    subprocess.run(["docker", "exec", worker, "rm", "-f", "/tmp/canary-cut.gguf", "/tmp/canary-drill.json"],
                   check=True)
