"""Judges run in the controller's process (action_plugins/twinrail_judge.py).

A judge module (module_utils/modules/judge.py: ARGUMENT_SPEC and judge()) gives the
same answer whether Ansible ships it to localhost as a module or runs its
judgement in the controller's process: the same result, the same refusal of
a bad argument, the same warnings. Each judge has its action and nothing
else borrows the base.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES, REPO
from ansible.module_utils.gpu.facts import parse_table

LIBRARY = REPO / "library"
ACTIONS = REPO / "action_plugins"
BASE = 'action_loader.get("twinrail_judge", class_only=True)'
JUDGES = sorted(p.stem for p in LIBRARY.glob("*.py") if "run_module(ARGUMENT_SPEC, judge)" in p.read_text())


def test_every_judge_module_runs_on_the_controller_and_only_those():
    assert {"gpu_gate", "profile_gate", "rdma_rail_gate", "twinrail_memory_plan", "bandwidth_due",
            "acceptance_due", "twinrail_inventory", "bandwidth_verdict"} <= set(JUDGES)
    borrowing = sorted(p.stem for p in ACTIONS.glob("*.py") if BASE in p.read_text() and p.stem != "twinrail_judge")
    assert borrowing == JUDGES


def gpu(name: str) -> dict:
    return parse_table((FIXTURES / "hardware" / name).read_text(encoding="utf-8"))


SPARK = gpu("nvidia-smi_gb10_table_persistence_off_3procs_cudf_notebook_dgx_spark_playbooks.txt")
OTHER = gpu("nvidia-smi_gb10_table_prompt_firefox_procs_obrienlabs_blog.txt")
UP = {"interface": "enp1s0f0np0", "up": True, "rate_gbps": 200.0, "problem": None}
DOWN = {"interface": "enp1s0f1np1", "up": False, "rate_gbps": None, "problem": "enp1s0f1np1 link down, no carrier"}
CASES = [
    ("gpu_gate", {"facts": {"spark-a": SPARK, "spark-b": SPARK}, "cuda_required": True}),
    ("gpu_gate", {"facts": {"spark-a": SPARK, "spark-b": OTHER}, "cuda_required": True}),
    ("gpu_gate", {"facts": {"spark-a": SPARK}, "cuda_requried": True}),
    ("gpu_gate", {"cuda_required": "sometimes"}),
    ("rdma_rail_gate", {"links": {"spark-a": {"rail0": UP, "rail1": DOWN}, "spark-b": {"rail0": UP, "rail1": UP}},
                        "expected_rate_gbps": 200, "allow_single_rail": True}),
    ("rdma_rail_gate", {"links": {"spark-a": {"rail0": UP, "rail1": DOWN}, "spark-b": {"rail0": UP, "rail1": UP}},
                        "expected_rate_gbps": "200"}),
]
KEPT = ("changed", "failed", "msg", "failures", "passed", "degraded", "healthy", "failed_rails", "warnings")


def answers(tmp_path: Path, actions: str) -> list[dict]:
    out = tmp_path / f"answers-{Path(actions).name}.json"
    tasks = [{"name": f"case {i}", name: args, "register": f"case{i}", "ignore_errors": True}
             for i, (name, args) in enumerate(CASES)]
    tasks.append({"name": "Keep the answers", "ansible.builtin.copy": {
        "dest": str(out), "content": "{{ [" + ", ".join(f"case{i}" for i in range(len(CASES))) + "] | to_json }}"}})
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_ACTION_PLUGINS=actions,
               ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}", str(book)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [{k: v for k, v in result.items() if k in KEPT} for result in json.loads(out.read_text())]


def test_the_controller_answers_as_the_module_does(tmp_path):
    empty = tmp_path / "no-actions"
    empty.mkdir()
    as_modules = answers(tmp_path, str(empty))
    on_controller = answers(tmp_path, str(ACTIONS))
    assert on_controller == as_modules
    passed, refused, typo, bad_type, degraded, strict = on_controller
    assert passed == {"changed": False, "failed": False, "failures": []}
    assert refused["failed"] and "spark-b" in refused["msg"] and "nothing was changed" in refused["msg"]
    assert refused["failures"] and all("Tagged" not in f for f in refused["failures"])
    assert typo["failed"] and "Unsupported parameters for (gpu_gate) module: cuda_requried" in typo["msg"]
    assert bad_type["failed"] and "facts" in bad_type["msg"]
    assert degraded["passed"] and degraded["healthy"] == ["rail0"] and degraded["failed_rails"] == ["rail1"]
    assert any("going on with rail0 only" in w for w in degraded["warnings"])
    assert strict["failed"] and strict["msg"].startswith("rdma: rail1: spark-a")


def test_the_base_is_not_a_task_of_its_own(tmp_path):
    book = tmp_path / "book.yml"
    book.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False,
                                     "tasks": [{"twinrail_judge": {}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(book)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert "twinrail_judge is the base of the judge modules' actions" in proc.stdout + proc.stderr


@pytest.mark.parametrize("name", JUDGES)
def test_a_judge_module_still_runs_as_a_module(name):
    """ansible-doc documents it and its main() is the shared one (what the node would run)."""
    text = (LIBRARY / f"{name}.py").read_text()
    assert "AnsibleModule(" not in text
    assert re.search(r"^from ansible\.module_utils\.modules\.judge import (\w+, )*run_module$", text, re.M)
    assert (ACTIONS / f"{name}.py").read_text().count("\n") <= 4
