"""The stage registry (module_utils/stages/catalogue.py): read from site.yml and the
play files, never typed; what reads it agrees with it."""

from __future__ import annotations

import shutil

import pytest
import yaml
from conftest import REPO

from ansible.module_utils.stages.settings import RULES
from ansible.module_utils.stages.catalogue import RegistryError, by_role, measured, prefixes, registry


def test_every_role_is_a_stage_and_every_stage_a_role_in_site_order():
    stages = registry(REPO)
    assert sorted(s["role"] for s in stages) == sorted(p.parent.name for p in (REPO / "roles").glob("*/tasks"))
    site = yaml.safe_load((REPO / "site.yml").read_text())
    assert [s["play"] for s in stages] == [e["ansible.builtin.import_playbook"] for e in site]
    assert by_role(REPO)["kernel_tuning"]["name"] == "kernel" and "monitoring_" in prefixes(REPO)
    # the settings rules are keyed by the stages' names, and the stages that measure are those asking twinrail_measure
    assert set(RULES) <= {s["name"] for s in stages}
    assert measured(REPO) == ("backup", "bandwidth", "runtime", "weights", "service", "acceptance")


def test_a_new_stage_is_found_from_its_play_and_role(tmp_path):
    """A copy of the tree with one more play file and role: the registry
    (and so preflight, the name check and the docs) knows it; a play that
    imports no role of its own is refused, naming the file."""
    for name in ("site.yml", "playbooks", "roles"):
        (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, tmp_path / name)
    role = tmp_path / "roles" / "firmware_check"
    (role / "tasks").mkdir(parents=True)
    (role / "tasks" / "settings.yml").write_text("---\n[]\n")
    (role / "defaults").mkdir()
    (role / "defaults" / "main.yml").write_text("---\nfirmware_check_measure: \"{{ twinrail_measure | default('auto')"
                                                " | twinrail_measure('firmware') }}\"\n")
    play = [{"name": "Firmware", "hosts": "cluster", "tags": ["firmware"],
             "tasks": [{"name": "Settings", "ansible.builtin.import_role": {"name": "firmware_check",
                                                                            "tasks_from": "settings"}}]}]
    (tmp_path / "playbooks" / "firmware.yml").write_text(yaml.safe_dump(play))
    site = yaml.safe_load((tmp_path / "site.yml").read_text())
    site.append({"name": "Stage firmware", "ansible.builtin.import_playbook": "playbooks/firmware.yml"})
    (tmp_path / "site.yml").write_text(yaml.safe_dump(site))
    new = registry(tmp_path)[-1]
    assert new == {"name": "firmware", "role": "firmware_check", "prefix": "firmware_check_", "measures": True,
                   "play": "playbooks/firmware.yml", "settings": True}
    play[0]["tasks"][0]["ansible.builtin.import_role"]["name"] = "nowhere"
    (tmp_path / "playbooks" / "firmware.yml").write_text(yaml.safe_dump(play))
    with pytest.raises(RegistryError, match="playbooks/firmware.yml: stage 'firmware': expected its play to "
                                            "import the stage's role"):
        registry(tmp_path)


def test_the_measure_switch_has_one_name_per_stage():
    """A measured stage reads twinrail_measure into one setting,
    <prefix>measure (auto or always), and no other setting of any role
    forces or skips a measurement under another name."""
    for stage in registry(REPO):
        defaults = yaml.safe_load((REPO / "roles" / stage["role"] / "defaults" / "main.yml").read_text())
        spec = yaml.safe_load((REPO / "roles" / stage["role"] / "meta" / "argument_specs.yml").read_text())
        options = {k: v for entry in spec["argument_specs"].values() for k, v in (entry.get("options") or {}).items()}
        reading = sorted(k for k, v in defaults.items() if "twinrail_measure" in str(v))
        if stage["measures"]:
            name = f"{stage['prefix']}measure"
            assert reading == [name], (stage["name"], reading)
            assert options[name].get("choices") == ["auto", "always"], stage["name"]
        else:
            assert reading == [], (stage["name"], reading)
        assert not [k for k in defaults if "force" in k], (stage["name"], [k for k in defaults if "force" in k])
