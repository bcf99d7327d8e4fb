# -*- coding: utf-8 -*-
"""The engines twinrail serves with, and which one a host runs.

An engine is a folder: its tasks in roles/inference_service/tasks/engines/
<name>/ (one file per step the service stage takes: settings, validate,
configure, serve, gate) and its table in roles/inference_service/
engines/<name>.yml (what every role reads of it: units, environment
template, timeouts, runtime, what acceptance and preflight check). The
engines there are, are the folders that have a table; an engine is chosen
once, here, from the host's inventory (inference_service_engine) or its
hardware profile, and refused by name when it is none of them.

The guard's own engine table (src/twinrail/guard/proxy.py, ENGINES: the
probe and the loop it asks) runs on the master without this package; a
unit test holds its keys equal to these names.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ansible.module_utils.inventory import profiles

ROLE = Path("roles") / "inference_service"
TASKS = ROLE / "tasks" / "engines"
TABLES = ROLE / "engines"
# the steps of the service stage an engine's folder holds, one file each
STEPS = ("settings", "validate", "configure", "serve", "gate")
# what its table says, and in what form
KEYS = {
    "label": str,             # the engine in words, for messages
    "serves": str,            # what it serves, in words
    "master_unit": str,       # its unit on the master, in the startup order before the guard
    "unit_templates": dict,   # {master: [...], worker: [...]}: the unit files it installs
    "worker_unit": str,       # a worker's unit; with {address}: one per rail address
    "env_template": str,      # the service configuration's template (the units read it)
    "start_timeout": str,     # the setting bounding its start (s)
    "wait_scripts": list,     # the scripts its units wait with at boot
    "runtime": dict,          # {dir, work, gate}: its release under the runtime root, the runtime stage's task files
    "wheel_lock": bool,       # its runtime is a lock of wheels every node must fit: CPU, Python, glibc (preflight: vLLM's)
    "cpu_kvcache": (str, type(None)),      # the setting of a cache each node holds besides the weights without GPUs
    "gpu_kvcache": (str, type(None)),      # the setting of a fixed cache each GPU node holds (0: the engine sizes it)
    "drill_rail": int,        # acceptance's rail drill: the index of the rail it cuts
    "usage_timings": bool,    # acceptance: rates from OpenAI usage and the client's clock (no engine timings)
    "dashboard": dict,        # {running, waiting}: {query, label}: the dashboard's lines of the engine's own series
}


class EngineError(ValueError):
    pass


def _found(root: Path) -> tuple[set[str], set[str]]:
    """The engine folders of tasks, and the tables, by name."""
    folders = {p.name for p in (root / TASKS).iterdir() if p.is_dir()} if (root / TASKS).is_dir() else set()
    return folders, {p.stem for p in (root / TABLES).glob("*.yml")}


def names(root: Path) -> list[str]:
    """The engines there are: every folder of tasks with its table."""
    folders, tables = _found(root)
    return sorted(folders & tables)


def problems(root: Path) -> list[str]:
    """What makes an engine folder or table incomplete, one sentence each."""
    folders, tables = _found(root)
    out = [f"engine {name}: {TASKS}/{name}/ has no table {TABLES}/{name}.yml" for name in sorted(folders - tables)]
    out += [f"engine {name}: {TABLES}/{name}.yml has no folder {TASKS}/{name}/" for name in sorted(tables - folders)]
    for name in sorted(folders & tables):
        missing = [step for step in STEPS if not (root / TASKS / name / f"{step}.yml").is_file()]
        if missing:
            out.append(f"engine {name}: {TASKS}/{name}/ lacks {', '.join(f'{s}.yml' for s in missing)}")
        try:
            table(name, root)
        except EngineError as exc:
            out.append(str(exc))
    return out


def table(name: str, root: Path) -> dict:
    """The engine's table, every key of KEYS in its form."""
    path = root / TABLES / f"{name}.yml"
    data = yaml.safe_load(path.read_text()) if path.is_file() else None
    if not isinstance(data, dict):
        raise EngineError(f"engine {name}: {TABLES}/{name}.yml is not a table of {', '.join(KEYS)}")
    wrong = [key for key, kind in KEYS.items() if key not in data or not isinstance(data[key], kind)
             or (kind is int and isinstance(data[key], bool))]
    extra = sorted(set(data) - set(KEYS))
    if wrong or extra:
        raise EngineError(f"engine {name}: {TABLES}/{name}.yml: "
                          + "; ".join(([f"missing or of the wrong form: {', '.join(wrong)}"] if wrong else [])
                                      + ([f"not known: {', '.join(extra)}"] if extra else [])))
    return dict(data, name=name)


def choose(value, host: str, root: Path) -> str:
    """The engine `value` names for `host`, or an error naming the engines there are."""
    there = names(root)
    if isinstance(value, str) and value in there:
        return value
    raise EngineError(f"inference_service_engine: {host}: expected one of {', '.join(there)} (an engine is a folder "
                      f"{TASKS}/<name>/ with its table {TABLES}/<name>.yml), got {value!r}")


def worker_units(engine: dict, addresses: list[str]) -> list[str]:
    """A worker's units of the engine: one per rail address where its unit
    is a template on {address}, else the one."""
    if "{address}" in engine["worker_unit"]:
        return [engine["worker_unit"].format(address=address) for address in addresses]
    return [engine["worker_unit"]]


def of_inventory(hostvars: dict, host: str, root: Path) -> dict:
    """The table of the engine an inventory's host serves with, for the
    commands that read the inventory themselves (the `twinrail` command):
    its inference_service_engine, else its hardware profile's."""
    value = hostvars.get("inference_service_engine")
    if value is None:
        try:
            value = profiles.setting(hostvars.get("twinrail_profile") or profiles.DEFAULT, "inference_service_engine")
        except ValueError as exc:
            raise EngineError(f"inference_service_engine: {host}: {exc}") from None
    return table(choose(value, host, root), root)
