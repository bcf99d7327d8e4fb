"""Each role's README is generated from its argument spec and defaults
(tools/role_docs.py) and kept current by `make lint`."""

from __future__ import annotations

import shutil

import yaml
from conftest import REPO

import role_docs


def test_every_setting_of_every_role_is_in_its_readme_with_the_reason_for_its_default():
    for role in sorted((REPO / "roles").iterdir()):
        spec = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        text = role_docs.render(role)
        for name in spec["main"].get("options") or {}:
            assert f"| `{name}` |" in text, (role.name, name)
    kernel = role_docs.render(REPO / "roles" / "kernel_tuning")
    # a default's comment (why it is what it is) comes along
    assert "llama.cpp does not use them: 0 leaves all memory to the page cache" in kernel


def test_the_check_names_a_stale_readme(tmp_path, monkeypatch, capsys):
    shutil.copytree(REPO / "roles" / "kernel_tuning", tmp_path / "roles" / "kernel_tuning")
    monkeypatch.setattr(role_docs, "ROOT", tmp_path)
    assert role_docs.main([]) == 0 and role_docs.main(["--check"]) == 0
    readme = tmp_path / "roles" / "kernel_tuning" / "README.md"
    readme.write_text(readme.read_text().replace("900", "600"))
    assert role_docs.main(["--check"]) == 1
    assert "stale, regenerate with `python tools/role_docs.py`: roles/kernel_tuning/README.md" in capsys.readouterr().err
