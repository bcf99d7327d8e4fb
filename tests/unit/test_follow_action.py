"""The twinrail_follow action on real background jobs: a playbook on this
machine (connection local) starts a job with async and poll 0, and the
action follows it to its end, printing the progress file's last line at
every interval; the job's failure is reported, not raised; a job that
outlives the timeout fails the task, naming it."""

from __future__ import annotations

import json
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

# by path: action_plugins/ on sys.path would shadow the library modules of
# the same name (the judges' actions, action_plugins/twinrail_judge.py)
_spec = importlib.util.spec_from_file_location("follow_action", REPO / "action_plugins" / "twinrail_follow.py")
_follow = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_follow)
last_line = _follow.last_line


def play(tmp_path: Path, script: str, **follow) -> tuple[subprocess.CompletedProcess, dict]:
    log = tmp_path / "progress.log"
    out = tmp_path / "result.json"
    follow = {"jid": "{{ job.ansible_job_id }}", "label": "job", "progress": str(log), "interval": 1,
              "poll": 0.5, **follow}
    book = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Start", "ansible.builtin.shell": script.replace("LOG", str(log)), "async": 60, "poll": 0,
         "register": "job"},
        {"name": "Follow", "twinrail_follow": follow, "register": "followed", "ignore_errors": True},
        {"name": "Keep", "ansible.builtin.copy": {"content": "{{ followed | to_json }}", "dest": str(out)}},
    ]}]
    (tmp_path / "play.yml").write_text(json.dumps(book))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, json.loads(out.read_text())


def test_a_job_is_followed_to_its_end_with_its_progress(tmp_path):
    proc, res = play(tmp_path, "for i in 1 2 3 4; do echo step $i >> LOG; sleep 0.6; done")
    assert res["finished"] and not res["job_failed"] and res["rc"] == 0, res
    assert res["last_line"] == "step 4"
    # one line per interval while it ran, the last when it ended
    assert len(res["shown"]) >= 2 and res["shown"][-1].startswith("job after ") and res["shown"][-1].endswith(": step 4")
    assert all(line.endswith(" ...") for line in res["shown"][:-1]), res["shown"]
    assert "localhost: job after " in proc.stderr  # printed while the task ran, beside the callback's output


def test_a_failed_job_is_reported_not_raised(tmp_path):
    _, res = play(tmp_path, "echo compiling >> LOG; echo 'error: no cmake' >> LOG; exit 3")
    assert res["finished"] and res["job_failed"] and res["rc"] == 3, res
    assert res["last_line"] == "error: no cmake"
    assert not res.get("failed"), res


def test_a_job_that_outlives_the_timeout_fails_the_task(tmp_path):
    # (the job outlives the play: its output pipes hold ansible-playbook's until it ends)
    _, res = play(tmp_path, "sleep 3", timeout=1, label="build 0123")
    assert res["failed"] and not res["finished"], res
    assert res["msg"].startswith("build 0123: still running after 1 s (job "), res["msg"]


@pytest.mark.parametrize(("name", "form", "expected"), [
    ("progress.json", "json", "93.8 MiB of 93.8 MiB (100 %), 187.0 MiB/s, ETA 0 s"),
    ("build.log", "text", "== 2026-12-01T18:27:01Z exit 0"),
])
def test_the_last_line_of_real_progress_files(name, form, expected):
    text = (REPO / "tests" / "fixtures" / "follow" / name).read_text()
    assert last_line(text, form) == expected
