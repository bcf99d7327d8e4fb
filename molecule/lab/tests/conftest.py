"""The lab's verifiers: their shared client (lab_client.py) is importable
from every stage's directory; the check-mode run the lab pass starts beside
its no-op re-run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from lab_client import scenario_tags  # noqa: E402  pylint: disable=wrong-import-position


class PlaybookRun:
    """An ansible-playbook run started at once and read when asked. Its
    output goes to files: a pipe nobody reads while it runs would fill and
    stop it (check mode's diffs are long)."""

    def __init__(self, argv: list[str], env: dict, cwd: Path, logs: Path) -> None:
        self.out, self.err = logs / "stdout", logs / "stderr"
        with self.out.open("w") as out, self.err.open("w") as err:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=cwd)

    def result(self, timeout: float = 900) -> tuple[int, str, str]:
        """(exit code, stdout, stderr), waiting for the end of the run."""
        rc = self.proc.wait(timeout=timeout)
        return rc, self.out.read_text(), self.err.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def check_mode_run(request, tmp_path_factory):
    """`site.yml --check --diff` with the scenario's arguments on the lab,
    started the first time a test asks for it. The lab pass's no-op re-run
    (tests/00_rerun) asks first, so the two runs go side by side: neither
    changes a node, and one CPU would otherwise wait on the other's round
    trips. tests/01_check_mode reads the result. The run has its own copy of
    the fact cache, so the two never write one file."""
    project = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
    facts, logs = tmp_path_factory.mktemp("check-mode-facts"), tmp_path_factory.mktemp("check-mode-output")
    if (project / ".cache" / "facts").is_dir():
        shutil.copytree(project / ".cache" / "facts", facts, dirs_exist_ok=True)
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_CACHE_PLUGIN_CONNECTION=str(facts))
    inventory = request.config.getoption("--ansible-inventory")
    run = PlaybookRun(["ansible-playbook", "-i", inventory, str(project / "site.yml"), "--check", "--diff",
                       *scenario_tags()], env, project, logs)
    yield run
    run.stop()
