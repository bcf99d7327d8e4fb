"""An engine is a folder (module_utils/engines/registry.py): the engines there are,
an engine folder without its table or a table without a key, the guard's
table held to the same engines, and no role choosing the engine again."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from ansible.module_utils.engines import registry as engines
from twinrail.guard import agent as guard_agent
from twinrail.guard import proxy as guard_proxy


def test_the_engines_are_the_folders_with_their_tables_and_each_is_whole():
    assert engines.names(REPO) == ["llamacpp", "vllm"]
    assert engines.problems(REPO) == []
    for name in engines.names(REPO):
        table = engines.table(name, REPO)
        # what the table names is there: its templates, its runtime's task files, the settings it points at
        templates = REPO / engines.ROLE / "templates"
        assert (templates / table["env_template"]).is_file()
        for unit in table["unit_templates"]["master"] + table["unit_templates"]["worker"]:
            assert (templates / f"{unit}.j2").is_file(), unit
        for script in table["wait_scripts"]:
            assert (templates / f"{script}.sh.j2").is_file(), script
        runtime_tasks = REPO / "roles" / "runtime_build" / "tasks"
        assert (runtime_tasks / f"{table['runtime']['work']}.yml").is_file()
        assert (runtime_tasks / f"{table['runtime']['gate']}.yml").is_file()
        defaults = yaml.safe_load((REPO / engines.ROLE / "defaults" / "main.yml").read_text())
        assert table["start_timeout"] in defaults
        for cache in ("cpu_kvcache", "gpu_kvcache"):
            if table[cache]:
                assert table[cache] in defaults, cache


def _copy(tmp_path: Path) -> Path:
    for part in (engines.TASKS, engines.TABLES):
        shutil.copytree(REPO / part, tmp_path / part)
    return tmp_path


def test_an_engine_folder_without_its_table_fails_and_is_no_engine(tmp_path):
    """A third engine added as a folder of tasks alone is named as
    incomplete, is not among the engines, and choosing it is refused naming
    the engines there are: never llama.cpp's units by default."""
    root = _copy(tmp_path)
    shutil.copytree(root / engines.TASKS / "vllm", root / engines.TASKS / "sglang")
    assert engines.problems(root) == [f"engine sglang: {engines.TASKS}/sglang/ has no table "
                                      f"{engines.TABLES}/sglang.yml"]
    assert engines.names(root) == ["llamacpp", "vllm"]
    with pytest.raises(engines.EngineError, match=r"inference_service_engine: spark-a: expected one of llamacpp, "
                                                  r"vllm \(an engine is a folder .*\), got 'sglang'"):
        engines.choose("sglang", "spark-a", root)


def test_a_table_without_a_key_or_a_folder_without_a_step_fails(tmp_path):
    root = _copy(tmp_path)
    table = yaml.safe_load((root / engines.TABLES / "vllm.yml").read_text())
    del table["start_timeout"]
    table["drill_rail"] = "rail0"
    table["probe"] = "/health"
    (root / engines.TABLES / "vllm.yml").write_text(yaml.safe_dump(table))
    (root / engines.TASKS / "llamacpp" / "gate.yml").unlink()
    assert engines.problems(root) == [
        f"engine llamacpp: {engines.TASKS}/llamacpp/ lacks gate.yml",
        f"engine vllm: {engines.TABLES}/vllm.yml: missing or of the wrong form: start_timeout, drill_rail; "
        "not known: probe"]
    shutil.rmtree(root / engines.TASKS / "vllm")
    assert f"engine vllm: {engines.TABLES}/vllm.yml has no folder {engines.TASKS}/vllm/" in engines.problems(root)


def test_the_guard_knows_the_same_engines():
    """The guard's own tables (it runs on the nodes without module_utils):
    the proxy's of the engine on the master, the agent's of its process on
    a worker."""
    assert sorted(guard_proxy.ENGINES) == engines.names(REPO) == sorted(guard_agent.WORKER_ENGINES)


def test_a_workers_units_per_rail_or_one():
    llama, vllm = (engines.table(name, REPO) for name in ("llamacpp", "vllm"))
    assert engines.worker_units(llama, ["198.19.0.2", "198.19.1.2"]) == [
        "twinrail-rpc@198.19.0.2.service", "twinrail-rpc@198.19.1.2.service"]
    assert engines.worker_units(vllm, ["198.19.0.2", "198.19.1.2"]) == ["twinrail-vllm.service"]


# an engine chosen anywhere but in module_utils/engines/registry.py: a comparison with
# an engine's name, in a role's, a playbook's or a template's YAML or Jinja
CHOICE = re.compile(r"""(==|!=)\s*['"](llamacpp|vllm)['"]|['"](llamacpp|vllm)['"]\s*(==|!=)|"""
                    r"""\bif\s+\S*engine\S*\s*(==|!=)""")


def test_no_role_or_playbook_chooses_the_engine_again():
    found = []
    for path in [*REPO.glob("roles/*/tasks/**/*.yml"), *REPO.glob("roles/*/vars/**/*.yml"),
                 *REPO.glob("roles/*/defaults/*.yml"), *REPO.glob("roles/*/templates/*.j2"),
                 *REPO.glob("playbooks/*.yml"), *REPO.glob("*.yml")]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if CHOICE.search(line) and not line.lstrip().startswith("#"):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert found == []


def test_the_check_finds_a_choice_made_again():
    """The test above can fail: the lines the engines' folders replaced."""
    assert CHOICE.search("  when: inference_service_engine == 'llamacpp'")
    assert CHOICE.search("{{ 'vllm' if (inference_service_engine | default(x)) == 'vllm' else 'runtime' }}")
    assert CHOICE.search("      {{ twinrail_rails[0 if __acceptance_engine == 'vllm' else -1].interface }}")
    assert not CHOICE.search("  ansible.builtin.include_tasks: \"engines/{{ __inference_service_engine.name }}/gate.yml\"")
