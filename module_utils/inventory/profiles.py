# -*- coding: utf-8 -*-
"""The hardware profiles (profiles/<name>.yml): their names, each one
checked, and one setting of one. The twinrail_profile lookup gives them to
the roles; the engines module and the `twinrail` command read them here."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

PROFILES = Path(__file__).resolve().parents[2] / "profiles"  # module_utils/inventory/ -> the repository
DEFAULT = "x86-connectx"


def names(root: Path = PROFILES) -> list[str]:
    return sorted(p.stem for p in root.glob("*.yml"))


@lru_cache(maxsize=None)
def load(name: str, root: Path = PROFILES) -> dict:
    """The profile `name`, checked: an `expect` block (architecture, gpu,
    rdma) and a `settings` mapping."""
    path = root / f"{name}.yml"
    if not isinstance(name, str) or not path.is_file() or "/" in name:
        raise ValueError(f"unknown profile {name!r}; expected one of {', '.join(names(root))} (profiles/<name>.yml)")
    data = yaml.safe_load(path.read_text())
    expect = data.get("expect") if isinstance(data, dict) else None
    if (not isinstance(expect, dict) or set(expect) != {"architecture", "gpu", "rdma"}
            or not isinstance(data.get("settings"), dict)):
        raise ValueError(f"profile {name!r} ({path}): expected `expect: {{architecture, gpu, rdma}}` and `settings:`")
    return data


def setting(profile: str, term: str, root: Path = PROFILES):
    data = load(profile, root)
    if term == "expect":
        return dict(data["expect"])
    if term not in data["settings"]:
        raise ValueError(f"profile {profile!r} has no setting {term!r}; it sets {', '.join(sorted(data['settings']))}")
    return data["settings"][term]
