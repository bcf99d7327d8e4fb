# -*- coding: utf-8 -*-
"""The vLLM engine's pinned environment: its lock (a pip requirements file
with one ``--hash=sha256:`` a requirement, roles/runtime_build/files/vllm/
requirements.lock) and the check that an installed environment is exactly
the lock: every locked distribution at its version, nothing else but pip's
own. Read by the runtime stage's gate on every node, and by
tools/bundle.py on the controller."""

from __future__ import annotations

import hashlib
import re

# what `python -m venv` puts in every environment besides the lock
VENV_OWN = frozenset({"pip", "setuptools", "wheel"})


class LockError(ValueError):
    pass


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock_pins(text: str, source: str = "the lock") -> dict:
    """name -> {"requirement": "name==version", "version", "sha256"}."""
    pins, current = {}, None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip().rstrip("\\").strip()
        if not line:
            continue
        if line.startswith("--hash="):
            algo, _, digest = line[len("--hash="):].partition(":")
            if current is None or algo != "sha256" or not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise LockError(f"{source}:{number}: expected --hash=sha256:<64 hex> after a requirement, got {line!r}")
            pins[current]["sha256"] = digest
            continue
        name, sep, version = line.partition("==")
        if not sep or not name or not version or " " in version:
            raise LockError(f"{source}:{number}: expected name==version, got {line!r}")
        current = normalize(name)
        pins[current] = {"requirement": line, "version": version, "sha256": None}
    unhashed = sorted(p["requirement"] for p in pins.values() if not p["sha256"])
    if unhashed:
        raise LockError(f"{source}: no --hash for {', '.join(unhashed)}")
    return pins


def env_id(lock_text: str, python_version: str) -> str:
    """The environment's id: the lock's bytes and the Python it is built
    for (a venv is bound to both); the directory it is installed in."""
    digest = hashlib.sha256(lock_text.encode() + b"\0" + python_version.encode())
    return digest.hexdigest()[:12]


def differences(pins: dict, installed: list[dict]) -> list[str]:
    """What an installed environment (pip list --format=json) has that the
    lock does not say: missing, other versions, extra distributions."""
    have = {normalize(d["name"]): d["version"] for d in installed}
    problems = []
    for name, pin in sorted(pins.items()):
        if name not in have:
            problems.append(f"{name} {pin['version']} missing")
        elif have[name] != pin["version"]:
            problems.append(f"{name} {have[name]} (locked {pin['version']})")
    extra = sorted(f"{name} {version}" for name, version in have.items() if name not in pins and name not in VENV_OWN)
    if extra:
        problems.append(f"not in the lock: {', '.join(extra)}")
    return problems
