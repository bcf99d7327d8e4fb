# -*- coding: utf-8 -*-
"""The stages, read from where they are defined, never typed again.

- ``site.yml`` imports one play file per stage, in stage order: the file's
  stem is the stage's name, the play's tag and the word an operator types
  (``--tags kernel``, ``twinrail_measure=bandwidth``);
- the play imports the stage's role (the role whose ``settings`` tasks it
  runs; preflight's play, its own role): the role's directory holds its
  defaults, argument spec and README, and its name is the prefix of every
  setting it reads (``kernel_tuning_swappiness``);
- a stage measures (a costly measurement that ``twinrail_measure`` can
  force) when its role's defaults ask ``twinrail_measure(<stage>)``.

Everything that needs the list reads it here: preflight's settings loop and
its unknown-name check, the role docs generator, the measure switch, the
settings rules' test. A new stage is a play file imported by site.yml and a
role; it gets all of those for free. Pure Python over the repository's
files (PyYAML, which Ansible brings)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

_IMPORT_KEYS = ("ansible.builtin.import_playbook", "import_playbook")
_ROLE_KEYS = ("ansible.builtin.import_role", "ansible.builtin.include_role", "import_role", "include_role")


class RegistryError(ValueError):
    """site.yml or a play file that does not define a stage as the registry reads one."""


def _tasks(play: dict) -> list[dict]:
    return [t for key in ("pre_tasks", "tasks", "post_tasks") for t in play.get(key) or [] if isinstance(t, dict)]


def _role_of(name: str, plays: list, play_file: str, roles: set) -> str:
    """The stage's role in its play file: the one whose settings tasks it
    imports, else the role of the stage's own name."""
    imported, with_settings = [], []
    for play in plays or []:
        for task in _tasks(play):
            for key in _ROLE_KEYS:
                spec = task.get(key)
                if isinstance(spec, dict) and "{{" not in str(spec.get("name", "")):
                    imported.append(spec["name"])
                    if spec.get("tasks_from") == "settings":
                        with_settings.append(spec["name"])
        for role in play.get("roles") or []:
            imported.append(role if isinstance(role, str) else role.get("role") or role.get("name"))
    for candidates in (with_settings, [r for r in imported if r == name]):
        if candidates and candidates[0] in roles:
            return candidates[0]
    raise RegistryError(f"{play_file}: stage {name!r}: expected its play to import the stage's role (with "
                        f"tasks_from: settings), one of roles/{', roles/'.join(sorted(roles))}; got {imported or 'none'}")


def registry(root) -> list[dict]:
    """The stages in site.yml's order: name (the tag), role, prefix of its
    settings, measures (twinrail_measure can force it), play (its play
    file) and settings (the role has settings tasks, judged by preflight)."""
    base = Path(root)
    roles = {p.parent.name for p in base.glob("roles/*/tasks")}
    site = yaml.safe_load((base / "site.yml").read_text(encoding="utf-8")) or []
    out = []
    for entry in site:
        play_file = next((entry[k] for k in _IMPORT_KEYS if k in entry), None)
        if not play_file:
            continue
        name = Path(play_file).stem
        plays = yaml.safe_load((base / play_file).read_text(encoding="utf-8"))
        if not any(name in (play.get("tags") or []) for play in plays or []):
            raise RegistryError(f"{play_file}: expected a play tagged {name!r} (the file's name is the stage's tag)")
        role = _role_of(name, plays, play_file, roles)
        defaults = base / "roles" / role / "defaults" / "main.yml"
        text = defaults.read_text(encoding="utf-8") if defaults.exists() else ""
        measures = re.search(r"twinrail_measure\(['\"]" + re.escape(name) + r"['\"]\)", text) is not None
        out.append({"name": name, "role": role, "prefix": f"{role}_", "measures": measures, "play": play_file,
                    "settings": (base / "roles" / role / "tasks" / "settings.yml").exists()})
    return out


def by_role(root) -> dict:
    return {stage["role"]: stage for stage in registry(root)}


def prefixes(root) -> tuple:
    """Every stage's setting prefix (``monitoring_`` included)."""
    return tuple(stage["prefix"] for stage in registry(root))


def measured(root) -> tuple:
    """The names of the stages whose measurement twinrail_measure forces."""
    return tuple(stage["name"] for stage in registry(root) if stage["measures"])


def role_default(root, name: str):
    """A role's default as its defaults/main.yml sets it: the one place a
    default lives. The role is the stage whose prefix the name carries;
    another role, the command line or a test that needs it reads it here,
    never a copy. Only a plain value (no Jinja) can be read so."""
    # a stage's prefix is its role's name: the longest role name the setting starts with
    roles = sorted((p.parent.name for p in Path(root).glob("roles/*/defaults")), key=len, reverse=True)
    owner = next((role for role in roles if name.startswith(f"{role}_")), None)
    if owner is None:
        raise RegistryError(f"{name}: no stage's setting (expected a name with one of the prefixes "
                            f"{', '.join(prefixes(root))})")
    path = Path(root) / "roles" / owner / "defaults" / "main.yml"
    defaults = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if name not in defaults:
        raise RegistryError(f"{name}: not in roles/{owner}/defaults/main.yml")
    value = defaults[name]
    if isinstance(value, str) and "{{" in value:
        raise RegistryError(f"{name}: its default in roles/{owner}/defaults/main.yml is a template "
                            f"({value!r}), not a value another reader can take")
    return value
