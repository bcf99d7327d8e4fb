"""deployment_record, run as Ansible runs it (a process reading its JSON
arguments) on a directory tree standing in for a node."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from conftest import module_process

MODULE = Path(__file__).resolve().parents[2] / "library" / "deployment_record.py"


def run(tmp_path: Path, check_mode: bool = False, **extra) -> dict:
    args = {"host": "node1", "dir": str(tmp_path / "records"), "runtime_root": str(tmp_path / "runtime"),
            "guard_root": str(tmp_path / "guard"), "weights_root": str(tmp_path / "models"), "config_root": str(tmp_path / "service"),
            "interfaces": [], "packages": [], "_ansible_check_mode": check_mode, **extra}
    return module_process(MODULE, args, tmp_path)


def deploy(tmp_path: Path, release: str, config: str, guard: str = "0.1.0-aaaa") -> None:
    (tmp_path / "guard" / guard).mkdir(parents=True, exist_ok=True)
    (tmp_path / "guard" / guard / "twinrail-guard.pyz").write_text(f"guard {guard}\n")
    (tmp_path / "runtime" / release).mkdir(parents=True, exist_ok=True)
    (tmp_path / "runtime" / release / "manifest.json").write_text(json.dumps({"build_id": release}))
    (tmp_path / "models" / "m" / ".twinrail-manifests").mkdir(parents=True, exist_ok=True)
    (tmp_path / "models" / "m" / ".twinrail-manifests" / "r1.sha256").write_text("abc  w.gguf\n")
    (tmp_path / "service" / config).mkdir(parents=True, exist_ok=True)
    for link, target in ((tmp_path / "runtime" / "current", release), (tmp_path / "models" / "m" / "current", "r1"),
                         (tmp_path / "service" / "current", config), (tmp_path / "guard" / "current", guard)):
        if link.is_symlink():
            link.unlink()
        os.symlink(target, link)


def test_a_record_by_content_then_no_change_then_a_new_one(tmp_path):
    deploy(tmp_path, "build-a", "cfg1")
    first = run(tmp_path, extra={"twinrail_commit": "c0ffee"}, informational={"bandwidth_baseline": {"run": "1"}})
    assert first["changed"] and "failed" not in first
    record = first["record"]
    assert record["runtime"] == {"release": "build-a", "manifest": {"build_id": "build-a"}}
    assert record["models"]["m"]["revision"] == "r1" and len(record["models"]["m"]["manifest_sha256"]) == 64
    assert record["config_version"] == "cfg1" and record["twinrail_commit"] == "c0ffee"
    assert record["guard"] == {"release": "0.1.0-aaaa",
                               "sha256": hashlib.sha256(b"guard 0.1.0-aaaa\n").hexdigest()}
    assert os.readlink(tmp_path / "records" / "current") == f"{first['digest']}.json"
    # a new bandwidth measurement is not a new deployment
    again = run(tmp_path, extra={"twinrail_commit": "c0ffee"}, informational={"bandwidth_baseline": {"run": "2"}})
    assert not again["changed"] and again["digest"] == first["digest"]
    assert again["record"]["bandwidth_baseline"] == {"run": "1"}
    # check mode: says it would change, writes nothing
    deploy(tmp_path, "build-b", "cfg2")
    checked = run(tmp_path, check_mode=True, extra={"twinrail_commit": "c0ffee"})
    assert checked["changed"] and not Path(checked["path"]).exists()
    second = run(tmp_path, extra={"twinrail_commit": "c0ffee"})
    assert second["changed"] and second["digest"] != first["digest"]
    history = json.loads((tmp_path / "records" / "history.json").read_text())
    assert [h["digest"] for h in history] == [first["digest"], second["digest"]]
    # going back makes the old record current again, without rewriting it
    deploy(tmp_path, "build-a", "cfg1")
    back = run(tmp_path, extra={"twinrail_commit": "c0ffee"})
    assert back["changed"] and back["digest"] == first["digest"] and back["record"]["recorded"] == record["recorded"]
    assert len(json.loads((tmp_path / "records" / "history.json").read_text())) == 3
    # another guard alone is another deployment
    deploy(tmp_path, "build-a", "cfg1", guard="0.1.0-bbbb")
    guard = run(tmp_path, extra={"twinrail_commit": "c0ffee"})
    assert guard["changed"] and guard["digest"] != first["digest"]
    assert guard["record"]["guard"]["release"] == "0.1.0-bbbb"


def test_an_unwritable_directory_names_the_host(tmp_path):
    deploy(tmp_path, "build-a", "cfg1")
    (tmp_path / "file").write_text("x")
    out = run(tmp_path, dir=str(tmp_path / "file" / "records"))
    assert out["failed"] and out["msg"].startswith("deployment record: node1: cannot write ")


def test_the_record_keeps_the_gpu_driver_and_cuda_from_nvidia_smi(tmp_path):
    """On a GB10 (nvidia-smi's real table, printed by a stand-in binary):
    driver, CUDA and the GPU's name are part of the record, so a driver
    update is a new deployment; without nvidia-smi the record says none."""
    capture = (Path(__file__).resolve().parents[1] / "fixtures" / "hardware"
               / "nvidia-smi_gb10_table_prompt_firefox_procs_obrienlabs_blog.txt")
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\ncat {capture}\n")
    smi.chmod(0o755)
    deploy(tmp_path, "build-a", "cfg1")
    record = run(tmp_path, nvidia_smi=str(smi))["record"]
    assert record["gpu"] == {"driver_version": "580.95.05", "cuda_version": "13.0", "gpus": ["NVIDIA GB10"]}, record["gpu"]
    none = run(tmp_path, nvidia_smi=str(tmp_path / "bin" / "absent"))
    assert none["record"]["gpu"] is None and none["digest"] != run(tmp_path, nvidia_smi=str(smi))["digest"]


def test_diff_mode_shows_the_record_current_pointed_to_and_the_new_one(tmp_path):
    deploy(tmp_path, "build-a", "cfg1")
    current = str(tmp_path / "records" / "current")
    first = run(tmp_path, _ansible_diff=True)
    assert first["diff"]["before"] == "" and first["diff"]["before_header"] == f"{current} (absent)"
    assert json.loads(first["diff"]["after"]) == first["record"] and first["diff"]["after_header"] == current
    assert "diff" not in run(tmp_path, _ansible_diff=True)
    deploy(tmp_path, "build-b", "cfg1")
    checked = run(tmp_path, check_mode=True, _ansible_diff=True)
    before, after = json.loads(checked["diff"]["before"]), json.loads(checked["diff"]["after"])
    assert before == first["record"] and after["runtime"]["release"] == "build-b"
    # the new build and its digest (and the time, past a second's turn): nothing else moved
    assert {"runtime", "digest"} <= {k for k in after if after[k] != before.get(k)} <= {"runtime", "digest", "recorded"}
