"""callback_plugins/twinrail_preload.py: the filters listed once in the main
process, so a worker Ansible forks for a task finds them without importing
every filter file again (the no-op's controller time, docs/benchmarks.md)."""

from __future__ import annotations

import configparser
import json
import subprocess
import sys

import pytest
import yaml
from conftest import REPO

# In a process of its own, as ansible-playbook's main process: twinrail's
# filter directory on the loader, the callback's preload run or not, then a
# fork (a worker) asks for one of twinrail's filters and one of ansible's,
# and says which modules that imported.
WORKER = r"""
import importlib.util, json, os, sys
from ansible.plugins.loader import filter_loader
filter_loader.add_directory(sys.argv[1])
if sys.argv[2] == "preload":
    spec = importlib.util.spec_from_file_location("twinrail_preload", sys.argv[3])
    callback = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(callback)
    callback.CallbackModule().v2_playbook_on_play_start(None)
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    before = set(sys.modules)
    found = [filter_loader.get(name) is not None for name in ("twinrail_measure", "to_nice_yaml")]
    os.write(write, json.dumps({"found": found, "imported": sorted(set(sys.modules) - before)}).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(read, 1 << 20).decode())
"""


def worker(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", WORKER, str(REPO / "filter_plugins"), mode,
                          str(REPO / "callback_plugins" / "twinrail_preload.py")],
                         capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(out.stdout)


def test_a_worker_forked_after_the_preload_imports_no_filter_file():
    cold = worker("cold")
    assert cold["found"] == [True, True]
    # without it, each worker imports ansible's filters and twinrail's (with their module_utils)
    assert "ansible.plugins.filter.core" in " ".join(cold["imported"]) and \
        any("stages" in name for name in cold["imported"]), cold["imported"]
    warm = worker("preload")
    assert warm == {"found": [True, True], "imported": []}, warm


@pytest.mark.parametrize("config", ["ansible.cfg", ".config/molecule/config.yml"])
def test_every_configuration_puts_the_callback_on_the_path(config):
    """ansible.cfg (make, twinrail) and molecule's (make test) both find it;
    it needs no enabling (CALLBACK_NEEDS_ENABLED is false)."""
    if config == "ansible.cfg":
        parser = configparser.ConfigParser()
        parser.read(REPO / config)
        path = parser["defaults"]["callback_plugins"]
    else:
        path = yaml.safe_load((REPO / config).read_text())["ansible"]["cfg"]["defaults"]["callback_plugins"]
        path = path.replace("${MOLECULE_PROJECT_DIRECTORY}/", "")
    assert (REPO / path / "twinrail_preload.py").is_file()
