"""One place per default: a role's default lives in its defaults/main.yml;
another role, the command line, the tools and the lab tests read it from
there (lookup('twinrail_default'), stages.role_default), never a copy.
This test fails when a copy appears: another role's `| default(<value>)`
of the setting, or the setting's port or path typed again in code."""

from __future__ import annotations

import re

import yaml
from conftest import REPO

from ansible.module_utils.stages.catalogue import RegistryError, registry, role_default

import pytest

CODE = ("roles", "playbooks", "templates", "src", "library", "module_utils", "filter_plugins", "lookup_plugins",
        "action_plugins", "tools", "molecule/lab/tests")


def defaults() -> dict:
    """{setting: (role, value)} of every role's plain defaults."""
    out = {}
    for stage in registry(REPO):
        path = REPO / "roles" / stage["role"] / "defaults" / "main.yml"
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            out[name] = (stage["role"], value)
    return out


def files():
    for top in CODE:
        for path in sorted((REPO / top).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".yml", ".yaml", ".j2") and "__pycache__" not in path.parts:
                yield path


def _literal(text: str):
    """A Jinja literal as YAML reads it (42, '443', "x", true), else None."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return value if isinstance(value, (int, float, str, bool)) else None


def test_no_role_restates_another_roles_default():
    """`<other role's setting> | default(<its default's value>)`: a copy.
    A default of nothing ('', none, false: the setting unset) copies no
    value, and `default(lookup(...))` reads the one place."""
    known = defaults()
    copies = []
    for path in files():
        text = path.read_text(errors="replace")
        for name, (role, value) in known.items():
            if f"roles/{role}/" in str(path.relative_to(REPO)) + "/" or value in ("", None, False, [], {}):
                continue
            for match in re.finditer(rf"\b{name}\s*\|\s*default\(\s*(?P<arg>[^()]*?)\s*\)", text):
                if _literal(match.group("arg")) == value:
                    copies.append(f"{path.relative_to(REPO)}: {match.group(0)}")
    assert copies == [], "\n".join(copies)
    # the rule sees a copy where there is one (the guard's port, as it was typed before)
    assert re.search(r"\b(?P<n>inference_service_guard_port)\s*\|\s*default\(\s*(?P<arg>[^()]*?)\s*\)",
                     "{{ inference_service_guard_port | default(8081) }}").group("arg") == "8081"
    assert _literal("8081") == known["inference_service_guard_port"][1]


def test_no_code_types_a_roles_port_or_path_again():
    """The distinctive defaults (ports, the project's paths) typed as a
    literal outside their role's defaults: as host:port, a port alone in a
    tuple or a URL, or the path."""
    known = {name: value for name, (_role, value) in defaults().items()
             if (name.endswith("_port") and isinstance(value, int) and value >= 1024)
             or (isinstance(value, str) and value.startswith("/") and "twinrail" in value and "{{" not in value)}
    assert {"inference_service_guard_port", "inference_service_rpc_port", "system_backup_record_dir"} <= set(known)
    copies = []
    for path in files():
        rel = str(path.relative_to(REPO))
        if rel.endswith("defaults/main.yml") or rel.endswith("argument_specs.yml") or rel.endswith("README.md"):
            continue
        text = path.read_text(errors="replace")
        for name, value in known.items():
            pattern = (rf"(?<![\w.\-]){re.escape(value)}(?![\w\-])" if isinstance(value, str)
                       else rf"(?:[:(,\[]\s*|=\s*){value}(?!\d)")
            for match in re.finditer(pattern, text):
                line = text[:match.start()].count("\n") + 1
                copies.append(f"{rel}:{line}: {name} ({value})")
    assert copies == [], "\n".join(copies)


def test_a_default_is_read_where_it_lives_and_nowhere_else():
    assert role_default(REPO, "inference_service_guard_port") == defaults()["inference_service_guard_port"][1]
    with pytest.raises(RegistryError, match="is a template"):
        role_default(REPO, "acceptance_guard_port")
    with pytest.raises(RegistryError, match="not in roles/monitoring/defaults/main.yml"):
        role_default(REPO, "monitoring_retention_tme")
