# -*- coding: utf-8 -*-
"""twinrail's Jinja filters for every stage: its settings and their rules, the
measure switch, the runtime's build, packages to install, a variable per
host. Plain functions over plain data, so the stages compute nothing in
Jinja loops; unit-tested (tests/unit/test_filters.py and the tests of what
they serve)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError
import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.runtime import elf_link
from ansible.module_utils.runtime import build as runtime_build
from ansible.module_utils.stages import settings as stage_settings
from ansible.module_utils.stages import catalogue as stages

DOCUMENTATION = r"""
name: stages
short_description: twinrail's filters for every stage
description:
  - "C(twinrail_setting_names): The settings a stage's rules read (module_utils/stages/settings.py)."
  - "C(twinrail_setting_problems): Only the stage's settings that break their rule, each with its value and the form expected (module_utils/stages/settings.py)."
  - "C(twinrail_measure): What twinrail_measure asks of `stage`'s costly measurement: 'always' when it is `always` or a list naming the stage, else 'auto' (the stage decides from the state it depends on). A list is a YAML list or a string of comma-separated names (-e twinrail_measure=bandwidth,weights)."
  - "C(twinrail_packages_missing): Whether a stage's apt run has work on a node: one of its packages is not among those preflight read there this run. With no list read (a stage run alone, --tags), apt decides."
  - "C(twinrail_host_values): Each host's ``name`` from hostvars, None where it sets none (Jinja's map(attribute=..., default=...) raises on a host's missing variable)."
  - "C(twinrail_runtime_cmake): The runtime build's CMake definitions (module_utils/runtime/build.py)."
  - "C(twinrail_runtime_link_allowlist): The libraries the runtime's link gate accepts (module_utils/runtime/build.py)."
  - "C(twinrail_runtime_runpaths): The RUNPATH entries the runtime's link gate accepts (module_utils/runtime/build.py)."
  - "C(twinrail_file_entries): twinrail_files' entries for files named ``names`` in ``directory``, each with its rendered content (the same order: a template lookup of the names) and ``mode`` (0644)."
  - "C(twinrail_dpkg_installed): The names of the installed packages in dpkg-query's --showformat='${db:Status-Status} ${Package}\\n' output (preflight's read, kept out of the facts every later task carries)."
  - "C(twinrail_without_keys): The data with every key named in ``keys`` removed at any depth, in dicts and lists (ansible.utils.remove_keys with its exact match, whose argument validation cost the no-op's deployment record 0.6 s a run)."
  - "C(twinrail_runtime_shipped): Of the binaries' NEEDED libraries, those the release ships in lib/, and what they need of the same (module_utils/runtime/build.py)."
"""


def file_entries(names: list, directory: str, contents: list, mode: str = "0644") -> list[dict]:
    """twinrail_files' entries for files named ``names`` in ``directory``,
    each with its rendered content (the same order: a template lookup of
    the names), mode ``mode``, owned by root."""
    names, contents = list(names), list(contents)
    if len(names) != len(contents):
        raise AnsibleFilterError(f"twinrail_file_entries: {len(names)} names and {len(contents)} contents")
    return [{"dest": os.path.join(directory, name), "content": content, "mode": mode}
            for name, content in zip(names, contents)]


def dpkg_installed(text: str) -> list[str]:
    """The packages dpkg says are installed, from ``dpkg-query --show
    --showformat='${db:Status-Status} ${Package}\\n'``: one "<status>
    <name>" line each; only the status `installed` counts."""
    names = []
    for line in text.splitlines():
        status, _, name = line.strip().partition(" ")
        if status == "installed" and name:
            names.append(name)
    return names


def without_keys(data, keys: list[str]):
    """`data` with every key in `keys` removed at any depth (dicts inside
    dicts and lists); the rest as it was."""
    drop = set(keys)
    if isinstance(data, dict):
        return {k: without_keys(v, keys) for k, v in data.items() if k not in drop}
    if isinstance(data, list):
        return [without_keys(v, keys) for v in data]
    return data


def setting_names(stage: str) -> list[str]:
    """The settings a stage's rules read (module_utils/stages/settings.py)."""
    return stage_settings.names(stage)


def setting_problems(stage: str, values: dict) -> list[str]:
    """Only the stage's settings that break their rule, each with its value
    and the form expected (module_utils/stages/settings.py)."""
    return stage_settings.problems(stage, values)


# the stages twinrail_measure can force: those whose role's defaults ask it (the stage registry)
MEASURED_STAGES = stages.measured(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def measure_mode(value, stage: str) -> str:
    """What twinrail_measure asks of `stage`'s costly measurement: 'always'
    when it is `always` or a list naming the stage, else 'auto' (the stage
    decides from the state it depends on). A list is a YAML list or a string
    of comma-separated names (-e twinrail_measure=bandwidth,weights)."""
    if stage not in MEASURED_STAGES:
        raise AnsibleFilterError(f"twinrail_measure: no measured stage {stage!r}; "
                                 f"expected one of {', '.join(MEASURED_STAGES)}")
    if value in (None, "", "auto"):
        return "auto"
    if value == "always":
        return "always"
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n in MEASURED_STAGES for n in names):
        raise AnsibleFilterError(f"twinrail_measure: expected auto, always, or a list of the stages to measure "
                                 f"whatever their state ({', '.join(MEASURED_STAGES)}), got {value!r}")
    return "always" if stage in names else "auto"


def packages_missing(wanted: list[str], installed: list[str] | None) -> bool:
    """Whether a stage's apt run has work on a node: one of its packages is
    not among those preflight read there this run. With no list read (a
    stage run alone, --tags), apt decides."""
    return bool(wanted) and (installed is None or not set(wanted) <= set(installed))


def runtime_shipped(needed, dynamic=None) -> list:
    """Of the binaries' NEEDED libraries, those the release ships in lib/, and what they need of the same
    (``dynamic``: each one's `readelf -d`; module_utils/runtime/build.py)."""
    read = elf_link.needed_libraries
    return runtime_build.shipped(list(needed or []),
                                                 {lib: read(text) for lib, text in (dynamic or {}).items()})


def host_values(hosts: list[str], hostvars, name: str) -> dict:
    """Each host's ``name`` from hostvars, None where it sets none (Jinja's
    map(attribute=..., default=...) raises on a host's missing variable)."""
    out = {}
    for host in hosts:
        values = hostvars[host]
        out[host] = values[name] if name in values else None
    return out


def runtime_cmake(isa_flags, cuda, cuda_archs, rdma, cuda_root="/usr/local/cuda", extra=None,
                  cublas="static") -> dict:
    """The runtime build's CMake definitions (module_utils/runtime/build.py)."""
    truthy = stage_settings.truthy
    try:
        return runtime_build.cmake_definitions(list(isa_flags or []), truthy(cuda), cuda_archs,
                                                               truthy(rdma), cuda_root, dict(extra or {}), cublas)
    except ValueError as exc:
        raise AnsibleFilterError(f"runtime: {exc}") from exc


def runtime_link_allowlist(base, rdma_allowlist, cuda, rdma, cublas="static") -> list:
    """The libraries the runtime's link gate accepts (module_utils/runtime/build.py)."""
    truthy = stage_settings.truthy
    return runtime_build.link_allowlist(list(base or []), list(rdma_allowlist or []), truthy(cuda),
                                                        truthy(rdma), cublas)


def runtime_runpaths(cuda, cublas="static") -> list:
    """The RUNPATH entries the runtime's link gate accepts (module_utils/runtime/build.py)."""
    return runtime_build.runpaths(stage_settings.truthy(cuda), cublas)


class FilterModule:  # pylint: disable=too-few-public-methods
    """twinrail's filters for every stage."""

    def filters(self):
        return {
            "twinrail_setting_names": setting_names,
            "twinrail_setting_problems": setting_problems,
            "twinrail_measure": measure_mode,
            "twinrail_packages_missing": packages_missing,
            "twinrail_host_values": host_values,
            "twinrail_runtime_cmake": runtime_cmake,
            "twinrail_runtime_link_allowlist": runtime_link_allowlist,
            "twinrail_runtime_runpaths": runtime_runpaths,
            "twinrail_runtime_shipped": runtime_shipped,
            "twinrail_without_keys": without_keys,
            "twinrail_dpkg_installed": dpkg_installed,
            "twinrail_file_entries": file_entries,
        }
