"""The guard's artifact (module_utils/runtime/guard_zipapp.py, library/guard_artifact.py):
the zipapp built from src/, the same bytes twice, named by its sha256, a
changed source a new release, and the zipapp run by a real python3."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import module_process

import pytest

from ansible.module_utils.runtime import guard_zipapp as artifact
from conftest import REPO

SRC = REPO / "src"


def test_the_same_sources_make_the_same_bytes_and_release():
    first, meta = artifact.build(str(SRC))
    second, again = artifact.build(str(SRC))
    assert first == second and meta == again
    assert meta["release"] == f"{meta['version']}-{meta['sha256'][:12]}"
    import hashlib
    assert hashlib.sha256(first).hexdigest() == meta["sha256"]


def test_the_zipapp_holds_the_guard_and_nothing_else(tmp_path):
    data, meta = artifact.build(str(SRC))
    path = tmp_path / "guard.pyz"
    path.write_bytes(data)
    names = zipfile.ZipFile(path).namelist()
    assert names[0] == "__main__.py"
    assert {"twinrail/__init__.py", "twinrail/guard/cli.py", "twinrail/guard/proxy.py",
            "twinrail/guard/agent.py", "twinrail/guard/memory.py", "twinrail/guard/procs.py"} <= set(names)
    assert all(n == "__main__.py" or n.startswith(("twinrail/guard/", "twinrail/__init__.py")) for n in names)
    assert not any("__pycache__" in n for n in names)
    assert data.startswith(b"#!/usr/bin/python3\n")


def test_the_zipapp_runs_with_a_plain_python3(tmp_path):
    data, _ = artifact.build(str(SRC))
    path = tmp_path / "twinrail-guard.pyz"
    path.write_bytes(data)
    # -I: isolated, the venv's editable twinrail is not on the path
    out = subprocess.run([sys.executable, "-I", str(path), "memory"], capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    memory = json.loads(out.stdout)
    assert memory["total"] > 0 and 0 <= memory["percent"] <= 100
    # every setting comes from the caller: none is defaulted in the guard
    refused = subprocess.run([sys.executable, "-I", str(path), "proxy", "--workers", "w@127.0.0.1"],
                             capture_output=True, text=True, check=False, cwd=tmp_path)
    assert refused.returncode == 2 and "the following arguments are required: --listen-host" in refused.stderr


def test_a_changed_guard_is_a_new_release(tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(SRC, copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _, before = artifact.build(str(copy))
    proxy = copy / "twinrail" / "guard" / "proxy.py"
    proxy.write_text(proxy.read_text() + "\n# a change\n")
    _, after = artifact.build(str(copy))
    assert after["release"] != before["release"] and after["version"] == before["version"]


def test_a_folder_without_the_package_is_refused_naming_the_path(tmp_path):
    with pytest.raises(ValueError, match=r"twinrail/__init__.py: missing \(expected the guard's package\)"):
        artifact.build(str(tmp_path))
    (tmp_path / "twinrail" / "guard").mkdir(parents=True)
    (tmp_path / "twinrail" / "__init__.py").write_text("nothing here\n")
    with pytest.raises(ValueError, match=r'no __version__ = "X.Y.Z" line'):
        artifact.build(str(tmp_path))


MODULE = REPO / "library" / "guard_artifact.py"


def run_module(tmp_path: Path, check_mode: bool = False, source: Path = SRC) -> dict:
    return module_process(MODULE, {"source": str(source), "cache": str(tmp_path / "cache"),
                                   "_ansible_check_mode": check_mode}, tmp_path, env={"PATH": "/usr/bin:/bin"})


def test_the_module_writes_the_release_once_and_nothing_in_check_mode(tmp_path):
    checked = run_module(tmp_path, check_mode=True)
    assert checked["changed"] and not Path(checked["path"]).exists()
    first = run_module(tmp_path)
    path = Path(first["path"])
    assert first["changed"] and path.parent.name == first["release"] and path.name == "twinrail-guard.pyz"
    import hashlib
    assert hashlib.sha256(path.read_bytes()).hexdigest() == first["sha256"]
    assert (path.parent / "twinrail-guard.pyz.sha256").read_text() == f"{first['sha256']}  twinrail-guard.pyz\n"
    again = run_module(tmp_path)
    assert not again["changed"] and again["release"] == first["release"]
    refused = run_module(tmp_path, source=tmp_path / "nowhere")
    assert refused["failed"] and refused["msg"].startswith("service: the guard's artifact: ") and "nowhere" in refused["msg"]


def test_diff_mode_shows_the_release_by_its_checksum_line(tmp_path):
    args = {"source": str(SRC), "cache": str(tmp_path / "cache"), "_ansible_diff": True}
    first = module_process(MODULE, dict(args, _ansible_check_mode=True), tmp_path, env={"PATH": "/usr/bin:/bin"})
    sums = first["path"] + ".sha256"
    assert first["diff"] == {"before": "", "after": f"{first['sha256']}  twinrail-guard.pyz\n",
                             "before_header": f"{sums} (absent)", "after_header": sums}
    module_process(MODULE, args, tmp_path, env={"PATH": "/usr/bin:/bin"})
    # converged: nothing to show
    assert "diff" not in module_process(MODULE, args, tmp_path, env={"PATH": "/usr/bin:/bin"})
