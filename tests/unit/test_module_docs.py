"""Every custom module documents itself: `ansible-doc -t module NAME` works."""

from __future__ import annotations

import os
import subprocess

import pytest
from conftest import REPO

MODULES = sorted(p.stem for p in (REPO / "library").glob("*.py"))


def test_there_are_modules():
    assert "ib_perftest" in MODULES and len(MODULES) >= 7


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_renders(name):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-doc", "-t", "module", name], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "ERROR" not in proc.stderr, proc.stderr
    for section in ("OPTIONS", "EXAMPLES:", "RETURN VALUES:"):
        assert section in proc.stdout, f"{name}: no {section}"
