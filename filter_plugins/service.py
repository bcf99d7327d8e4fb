# -*- coding: utf-8 -*-
"""twinrail's Jinja filters for the inference service: its API keys, the tensor
split, the workers that took part, which units restart and what a scale
change is. Plain functions over plain data, so the stages compute nothing in
Jinja loops; unit-tested (tests/unit/test_filters.py and the tests of what
they serve)."""

from __future__ import annotations

import hashlib
import re

from ansible.errors import AnsibleFilterError
import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.engines import registry as engines
from ansible.module_utils.engines.llamacpp.tensor_split import plan_split

DOCUMENTATION = r"""
name: service
short_description: twinrail's filters for the inference service
description:
  - "C(twinrail_idle_workers): Workers whose RPC servers hold less than ``min_share`` of the model (their command printed '<bytes>'): they took no part."
  - "C(twinrail_api_key_problems): What is wrong with inference_service_api_keys ([{name, key}]), never quoting a key: names unique, of lower-case letters, digits, . _ -; keys unique strings of at least API_KEY_MIN_LENGTH characters, no spaces."
  - "C(twinrail_api_key_digests): What the guard reads: each key's name and SHA-256 digest, by name."
  - "C(twinrail_tensor_split): The split of the layers the memory plan assumes: the --rpc list, -ngl and --tensor-split, with ``gpus`` (host -> twinrail_gpu_count) one device per GPU of a node with several (module_utils/engines/llamacpp/tensor_split.py)."
  - "C(twinrail_service_restarts): Whether a node's service units must restart on a new configuration: the master on any change of a setting; a worker unless the only settings that changed are the cluster's members (MEMBERSHIP_KEYS). No configuration before (a new node): nothing runs yet, False (its units are started, not restarted)."
  - "C(twinrail_scale_change): What scale.yml changes: the workers the master serves with now (its configuration's TWINRAIL_GUARD_WORKERS, host@address[=rail]) against the inventory's. ``kept``, ``added``, ``removed`` in a stable order; ``unreachable``: removed workers the run has no address for (``retired``: name -> management address)."
  - "C(twinrail_unit_pids): ``systemctl show --property=Id,MainPID <units>`` -> {unit: pid}: one block per unit, blocks apart by a blank line, the properties in systemd's order (MainPID before Id), not the order asked."
  - "C(twinrail_units_restarted): The units whose main process changed between two readings (or that stopped): 'unit: pid A -> B'."
  - "C(twinrail_engine_worker_units): A worker's units of the engine (its table): one per rail address where its unit is a template on {address}, else the one (module_utils/engines/registry.py)."
"""


def idle_workers(results: list[dict], model_bytes: int, min_share: float) -> list[dict]:
    """Workers whose RPC servers hold less than ``min_share`` of the model
    (their command printed "<bytes>"): they took no part."""
    return [r for r in results or [] if "stdout" in r
            and int(r["stdout"].split()[0]) < model_bytes * float(min_share)]


API_KEY_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


API_KEY_MIN_LENGTH = 24


def api_key_problems(keys) -> list[str]:
    """What is wrong with inference_service_api_keys ([{name, key}]), never
    quoting a key: names unique, of lower-case letters, digits, . _ -; keys
    unique strings of at least API_KEY_MIN_LENGTH characters, no spaces."""
    if not isinstance(keys, list):
        return [f"expected a list of {{name, key}}, got {type(keys).__name__}"]
    problems, names, seen = [], set(), set()
    for index, entry in enumerate(keys):
        if not isinstance(entry, dict) or set(entry) != {"name", "key"}:
            fields = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            problems.append(f"entry {index}: expected {{name, key}}, got {fields}")
            continue
        name, key = entry["name"], entry["key"]
        if not isinstance(name, str) or not API_KEY_NAME.match(name):
            problems.append(f"entry {index}: name {name!r} is not lower-case letters, digits, . _ - (up to 63)")
        elif name in names:
            problems.append(f"entry {index}: name {name!r} given twice")
        names.add(name)
        if not isinstance(key, str) or len(key) < API_KEY_MIN_LENGTH or any(c.isspace() for c in key):
            problems.append(f"entry {index} ({name}): the key must be a string of at least {API_KEY_MIN_LENGTH} "
                            f"characters without spaces (e.g. `openssl rand -hex 24`, kept in ansible-vault)")
        elif key in seen:
            problems.append(f"entry {index} ({name}): the same key as an earlier entry")
        seen.add(key)
    return problems


def api_key_digests(keys: list[dict]) -> dict:
    """What the guard reads: each key's name and SHA-256 digest, by name."""
    return {"keys": [{"name": entry["name"], "sha256": hashlib.sha256(entry["key"].encode()).hexdigest()}
                     for entry in sorted(keys, key=lambda e: e["name"])]}


def tensor_split(master: str, workers: list[str], rails: dict, port, layers, master_gpu,
                 gpus: dict | None = None) -> dict:
    """The split of the layers the memory plan assumes: the --rpc list,
    -ngl and --tensor-split, with ``gpus`` (host -> twinrail_gpu_count) one
    device per GPU of a node with several (module_utils/engines/llamacpp/tensor_split.py)."""
    try:
        return plan_split(master, list(workers), rails, int(port), int(layers),
                                                         str(master_gpu).lower() in ("true", "1", "yes"), gpus)
    except ValueError as exc:
        raise AnsibleFilterError(f"service: {exc}") from None


# What only the master's units read: the cluster's members (the --rpc list,
# the split, the guard's workers). A change of these alone, a worker added
# or removed, restarts the master and leaves every worker's units running
# (tests/unit/test_filters.py checks that no worker unit reads them).
MEMBERSHIP_KEYS = ("TWINRAIL_RPC_SERVERS", "TWINRAIL_SPLIT_ARGS", "TWINRAIL_GPU_LAYERS", "TWINRAIL_GUARD_WORKERS",
                   "TWINRAIL_GUARD_RAIL_ARGS")


_ENV_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")


def _env(text: str) -> dict:
    return {m.group(1): m.group(2) for m in map(_ENV_LINE.match, (text or "").splitlines()) if m}


def service_restarts(old_env: str | None, new_env: str, worker) -> bool:
    """Whether a node's service units must restart on a new configuration:
    the master on any change of a setting; a worker unless the only
    settings that changed are the cluster's members (MEMBERSHIP_KEYS). No
    configuration before (a new node): nothing runs yet, False (its units
    are started, not restarted)."""
    if not old_env:
        return False
    old, new = _env(old_env), _env(new_env)
    changed = {k for k in set(old) | set(new) if old.get(k) != new.get(k)}
    if str(worker).lower() in ("true", "1", "yes"):
        changed -= set(MEMBERSHIP_KEYS)
    return bool(changed)


def scale_change(env_text: str | None, workers: list[str], retired: dict | None = None) -> dict:
    """What scale.yml changes: the workers the master serves with now (its
    configuration's TWINRAIL_GUARD_WORKERS, host@address[=rail]) against
    the inventory's. ``kept``, ``added``, ``removed`` in a stable order;
    ``unreachable``: removed workers the run has no address for
    (``retired``: name -> management address)."""
    listed = _env(env_text or "").get("TWINRAIL_GUARD_WORKERS", "")
    serving: list[str] = []
    for item in filter(None, listed.split(",")):
        host = item.split("@", 1)[0].strip()
        if host and host not in serving:
            serving.append(host)
    workers = list(workers)
    kept = [w for w in workers if w in serving]
    added = [w for w in workers if w not in serving]
    removed = sorted(w for w in serving if w not in workers)
    unreachable = [w for w in removed if w not in (retired or {})]
    if not serving:
        summary = f"no service runs yet: every stage for {', '.join(workers)} (as site.yml)"
    elif not added and not removed:
        summary = f"the workers serving are the inventory's ({', '.join(kept)}): nothing to add or take out"
    else:
        parts = [f"adding {', '.join(added)}"] if added else []
        parts += [f"taking out {', '.join(removed)}"] if removed else []
        parts.append(f"{', '.join(kept)} keep serving, their units left running" if kept else "no worker kept")
        summary = "; ".join(parts) + "; the master restarts once with the new --rpc list"
    return {"serving": serving, "kept": kept, "added": added, "removed": removed, "unreachable": unreachable,
            "summary": summary}


def unit_pids(show: str) -> dict:
    """``systemctl show --property=Id,MainPID <units>`` -> {unit: pid}: one
    block per unit, blocks apart by a blank line, the properties in
    systemd's order (MainPID before Id), not the order asked."""
    pids = {}
    for block in re.split(r"\n\s*\n", (show or "").strip()):
        fields = dict(line.partition("=")[::2] for line in block.splitlines() if "=" in line)
        if fields.get("Id"):
            pids[fields["Id"]] = int(fields.get("MainPID") or 0)
    return pids


def units_restarted(before: str, after: str) -> list[str]:
    """The units whose main process changed between two readings (or that
    stopped): "unit: pid A -> B"."""
    old, new = unit_pids(before), unit_pids(after)
    return [f"{unit}: pid {old[unit]} -> {new.get(unit, 0)}" for unit in sorted(old)
            if old[unit] and new.get(unit) != old[unit]]


def engine_worker_units(engine: dict, addresses: list[str]) -> list[str]:
    """A worker's units of the engine (its table): one per rail address
    where its unit is a template on {address}, else the one."""
    return engines.worker_units(engine, list(addresses))


class FilterModule:  # pylint: disable=too-few-public-methods
    """twinrail's filters for the inference service."""

    def filters(self):
        return {
            "twinrail_idle_workers": idle_workers,
            "twinrail_api_key_problems": api_key_problems,
            "twinrail_api_key_digests": api_key_digests,
            "twinrail_tensor_split": tensor_split,
            "twinrail_service_restarts": service_restarts,
            "twinrail_scale_change": scale_change,
            "twinrail_unit_pids": unit_pids,
            "twinrail_units_restarted": units_restarted,
            "twinrail_engine_worker_units": engine_worker_units,
        }
