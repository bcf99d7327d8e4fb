#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The runtime stage's gate for the vLLM engine's environment."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_env_check
short_description: Check that a node's vLLM environment is exactly its lock and that vLLM imports
description:
  - Lists the environment's distributions (C(pip list --format=json)) and
    compares them with the lock the environment was installed from. Every
    locked distribution must be there at its version, and nothing else but pip's own.
  - Imports vLLM's serve entry point and torch in the environment, and
    loads vLLM's compiled kernels the way vLLM does on this node (its
    platform's import_kernels; on an x86-64 CPU the library of AVX-512 with
    BF16, of AVX-512 or of AVX2 the CPU runs); reports their versions and
    the kernel library the process mapped.
  - A kernel library not mapped, or not the one the CPU's flags select,
    fails; an import killed by a signal is named as one (SIGILL, the CPU
    lacks an instruction, with the flags it lacks).
  - Fails naming the host, the environment and each difference, or the
    import's last line. Changes nothing; runs in check mode too.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  env:
    description: The environment's directory (its bin/python is run).
    type: path
    required: true
  lock:
    description: The lock on the node the environment was installed from.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Check the environment
  vllm_env_check:
    env: /opt/twinrail/vllm/4f1c2a9b7d3e
    lock: /opt/twinrail/vllm/4f1c2a9b7d3e.lock
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
env_id:
  description: The environment's id as its mark (.twinrail-env.json, written when its install finished) says.
  returned: success
  type: str
versions:
  description: vllm and torch as the environment imports them.
  returned: success
  type: dict
kernels:
  description: vLLM's kernel libraries the import mapped (e.g. C(_C_AVX2.abi3.so)).
  returned: success
  type: list
  elements: str
distributions:
  description: How many distributions the environment holds.
  returned: always
  type: int
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.engines.vllm.env import IMPORT, LockError, differences, import_failure, kernels_verdict, \
    lock_pins, nccl_verdict, read_cpu_flags


def node_flags() -> list[str] | None:
    return read_cpu_flags()


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "env": {"type": "path", "required": True},
            "lock": {"type": "path", "required": True},
            "host": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    env, host = module.params["env"], module.params["host"]
    where = f"runtime: {host}: vLLM environment {env}"
    python = os.path.join(env, "bin", "python")
    if not os.path.isfile(python):
        module.fail_json(msg=f"{where}: {python} does not exist (the environment is not installed)")
    try:
        with open(os.path.join(env, ".twinrail-env.json"), encoding="utf-8") as handle:
            mark = json.load(handle)
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"{where}: no mark of a finished install ({exc}): install it again (the runtime stage)")
    try:
        with open(module.params["lock"], encoding="utf-8") as handle:
            pins = lock_pins(handle.read(), module.params["lock"])
    except (OSError, LockError) as exc:
        module.fail_json(msg=f"{where}: its lock: {exc}")
    rc, out, err = module.run_command([python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"],
                                      environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"{where}: pip list failed (exit {rc}): {err.strip()[-300:]}")
    installed = json.loads(out)
    problems = differences(pins, installed)
    if problems:
        module.fail_json(msg=f"{where} is not its lock ({len(problems)} difference(s)): {'; '.join(problems)}",
                         distributions=len(installed))
    rc, out, err = module.run_command([python, "-c", IMPORT], environ_update={"LC_ALL": "C"})
    flags = node_flags()
    if rc != 0:
        module.fail_json(msg=f"{where}: vLLM does not import ({import_failure(rc, err, flags)})",
                         distributions=len(installed))
    result = json.loads(out.strip().splitlines()[-1])
    wrong = kernels_verdict(result, flags) or nccl_verdict(result, pins)
    if wrong:
        warned = [ln.strip() for ln in err.splitlines() if "Failed to import" in ln][-1:]
        module.fail_json(msg=f"{where}: {wrong}{': ' + warned[0] if warned else ''}", distributions=len(installed))
    versions = {"vllm": result["vllm"], "torch": result["torch"], **({"nccl": result["nccl"]} if result.get("nccl") else {})}
    module.exit_json(changed=False, env_id=mark.get("env_id"), versions=versions, kernels=result["kernels"],
                     distributions=len(installed),
                     msg=f"{where}: {len(installed)} distributions, exactly the lock; vllm {versions['vllm']}, "
                         f"torch {versions['torch']} import; kernels {', '.join(result['kernels'])} "
                         f"({result['device']})")


if __name__ == "__main__":
    main()
