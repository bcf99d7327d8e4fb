"""Each role's interface: one argument spec per real entry point (`main`, and
every `tasks_from` another playbook includes), the defaults and the spec
agreeing, and every role variable a role reads declared in its spec."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO

from ansible.module_utils.engines import registry as engines

ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
MODULES = {p.stem for p in (REPO / "library").glob("*.py")}
PLAYBOOKS = sorted([*REPO.glob("*.yml"), *(REPO / "playbooks").glob("*.yml")])


def spec(role: str) -> dict:
    return yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def defaults(role: str) -> dict:
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}


def includes() -> dict[str, set[str]]:
    """role -> the entry points other playbooks include (tasks_from)."""
    found: dict[str, set[str]] = {}

    def walk(node):
        if isinstance(node, dict):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                if isinstance(node.get(key), dict) and "tasks_from" in node[key]:
                    entry = node[key]["tasks_from"]
                    # the runtime stage's work and gate, as the engine's table names them: every engine's
                    chosen = re.fullmatch(r"\{\{ lookup\('twinrail_engine', 'table'\)\.runtime\.(\w+) \}\}", entry)
                    entries = ({engines.table(e, REPO)["runtime"][chosen.group(1)] for e in engines.names(REPO)}
                               if chosen else {entry})
                    # Ansible names the entry point by tasks_from as written:
                    # "start.yml" would never meet the spec "start"
                    assert all(e == Path(e).stem for e in entries), \
                        f"tasks_from: {entry}: write it without .yml, or its spec is skipped"
                    names = node[key]["name"]
                    if names == "{{ __preflight_stage }}":  # preflight's loop over every stage
                        names = node["loop"]
                    for name in [names] if isinstance(names, str) else names:
                        found.setdefault(name, set()).update(entries)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in PLAYBOOKS:
        walk(yaml.safe_load(path.read_text()))
    return found


def templated(value) -> bool:
    return "{{" in yaml.safe_dump(value)


def set_by_the_role(role: str) -> set[str]:
    """Names the role gives itself: registered results and set_fact keys."""
    names: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("register"), str):
                names.add(node["register"])
            if isinstance(node.get("ansible.builtin.set_fact"), dict):
                names.update(node["ansible.builtin.set_fact"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in (REPO / "roles" / role / "tasks").rglob("*.yml"):
        walk(yaml.safe_load(path.read_text()))
    return names


def test_every_included_entry_point_has_a_spec_and_every_spec_is_an_entry_point():
    wanted = includes()
    assert wanted, "no tasks_from found: the walk is broken"
    for role in ROLES:
        entries = set(spec(role))
        expected = {"main"} | wanted.get(role, set())
        assert entries == expected, f"{role}: argument specs {sorted(entries)}, entry points {sorted(expected)}"
        for entry in entries - {"main"}:
            assert (REPO / "roles" / role / "tasks" / f"{entry}.yml").is_file(), f"{role}: no tasks/{entry}.yml"


def test_options_are_written_once_per_role():
    """Entry points other than main share main's options (a YAML alias), not a copy."""
    for role in ROLES:
        text = (REPO / "roles" / role / "meta" / "argument_specs.yml").read_text()
        names = re.findall(r"^      (\w+):$", text, re.M)
        assert len(names) == len(set(names)), f"{role}: options written more than once"
        parsed = spec(role)
        for entry in set(parsed) - {"main"}:
            assert parsed[entry]["options"] == parsed["main"]["options"], f"{role}: {entry}"


def disagreements(values: dict, options: dict) -> list[str]:
    """How defaults/main.yml and the spec's options differ (empty: they agree)."""
    found = [f"in defaults only: {name}" for name in sorted(set(values) - set(options))]
    found += [f"in the spec only: {name}" for name in sorted(set(options) - set(values))]
    for name, value in values.items():
        if name not in options:
            continue
        if templated(value):
            # a Jinja default is the role's to compute: the spec does not repeat it
            if "default" in options[name]:
                found.append(f"{name}: the spec repeats a templated default")
        elif options[name].get("default") != value:
            found.append(f"{name}: defaults/main.yml has {value!r}, the spec {options[name].get('default')!r}")
    return found


def undeclared_reads(role: str, options: set[str]) -> dict[str, str]:
    """Role variables the role reads that ``options`` lacks: name -> the file."""
    prefix = role + "_"
    own = set_by_the_role(role)
    read: dict[str, str] = {}
    base = REPO / "roles" / role
    for sub in ("tasks", "templates", "handlers", "vars", "defaults"):
        for path in sorted(p for p in (base / sub).rglob("*") if p.is_file()) if (base / sub).is_dir() else []:
            for name in re.findall(rf"(?<![\w.]){prefix}\w+", path.read_text()):
                read.setdefault(name, f"{sub}/{path.relative_to(base / sub)}")
    # modules named like the role (acceptance_run) and names built by
    # concatenation (kernel_tuning_thp_ ~ key) are not variables
    return {name: where for name, where in read.items()
            if name not in options and name not in own and name not in MODULES and not name.endswith("_")}


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_spec_agree(role):
    assert disagreements(defaults(role), spec(role)["main"].get("options") or {}) == []


@pytest.mark.parametrize("role", ROLES)
def test_every_role_variable_read_is_in_the_spec(role):
    assert undeclared_reads(role, set(spec(role)["main"].get("options") or {})) == {}


def test_the_checks_find_what_they_guard_against():
    options = spec("inference_service")["main"]["options"]
    values = defaults("inference_service")
    # an option dropped from the spec: read by the service's configuration
    missing = undeclared_reads("inference_service", set(options) - {"inference_service_guard_grace"})
    assert missing == {"inference_service_guard_grace": "templates/service.env.j2"}
    # a default changed in one place only
    changed = dict(values, inference_service_guard_grace=5)
    assert disagreements(changed, options) == [
        "inference_service_guard_grace: defaults/main.yml has 5, the spec 3"]
    assert disagreements({**values, "inference_service_new": 1}, options) == ["in defaults only: inference_service_new"]
