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
  - Imports vLLM's serve entry point, its compiled operators (vllm._C, which
    need the node's libraries) and torch in the environment, and reports
    their versions.
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
distributions:
  description: How many distributions the environment holds.
  returned: always
  type: int
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_env import LockError, differences, lock_pins

# the serve entry point, and vLLM's compiled operators (they need the
# node's libraries: libnuma for the CPU build, the driver for CUDA's)
IMPORT = ("import json, torch, vllm.entrypoints.cli.serve, vllm, vllm._C; "
          "print(json.dumps({'vllm': vllm.__version__, 'torch': torch.__version__}))")


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
    if rc != 0:
        last = [ln for ln in err.splitlines() if ln.strip()][-1:] or ["no output"]
        module.fail_json(msg=f"{where}: vLLM does not import (exit {rc}): {last[0].strip()}",
                         distributions=len(installed))
    versions = json.loads(out.strip().splitlines()[-1])
    module.exit_json(changed=False, env_id=mark.get("env_id"), versions=versions, distributions=len(installed),
                     msg=f"{where}: {len(installed)} distributions, exactly the lock; vllm {versions['vllm']}, "
                         f"torch {versions['torch']} import")


if __name__ == "__main__":
    main()
