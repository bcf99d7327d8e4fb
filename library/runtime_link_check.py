#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Static-link gate of the runtime stage."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: runtime_link_check
short_description: Check that built executables carry every dependency inside them
description:
  - Runs C(readelf -d) and C(file) on each executable and lists the shared
    libraries it needs at run time. Only those in O(allowlist) may appear
    (empty by default, that is fully static).
  - Fails naming the host, each offending binary and its libraries.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  binaries:
    description: Paths of the executables.
    type: list
    elements: path
    required: true
  allowlist:
    description: Shared libraries that may stay dynamic (e.g. libibverbs.so.1 for RDMA builds); an entry may be a pattern (libcublas.so.*).
    type: list
    elements: str
    default: []
  runpaths:
    description: The RUNPATH entries a binary may carry ($ORIGIN/../lib where the release ships cuBLAS); any other is refused.
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Check the static link
  runtime_link_check:
    binaries: [/opt/twinrail/runtime/0123abcd/bin/llama-server]
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
binaries:
  description: Per binary, static, needed libraries, offending libraries, file's verdict.
  returned: always
  type: list
  elements: dict
static:
  description: Whether every binary is fully static.
  returned: always
  type: bool
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.runtime.elf_link import verdict


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "binaries": {"type": "list", "elements": "path", "required": True},
            "allowlist": {"type": "list", "elements": "str", "default": []},
            "runpaths": {"type": "list", "elements": "str", "default": []},
            "host": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    host = module.params["host"]
    results = []
    for path in module.params["binaries"]:
        if not os.path.isfile(path):
            module.fail_json(msg=f"runtime: {host}: {path} does not exist")
        rc, dyn, err = module.run_command(["readelf", "-d", path], environ_update={"LC_ALL": "C"})
        if rc != 0:
            module.fail_json(msg=f"runtime: {host}: readelf -d {path}: {err.strip()}")
        rc, fout, err = module.run_command(["file", "-b", path], environ_update={"LC_ALL": "C"})
        if rc != 0:
            module.fail_json(msg=f"runtime: {host}: file {path}: {err.strip()}")
        results.append(verdict(os.path.basename(path), dyn, fout,
                               module.params["allowlist"], module.params["runpaths"]))
    bad = [r for r in results if not r["passed"]]
    outcome = {"changed": False, "binaries": results,
               "static": all(r["static"] for r in results)}
    needs = [r for r in bad if r["offending"]]
    if needs:
        listing = "; ".join(f"{r['binary']} needs {', '.join(r['offending'])}" for r in needs)
        module.fail_json(msg=f"runtime: {host}: not statically linked: {listing} "
                             f"(allowed dynamic: {module.params['allowlist'] or 'none'})",
                         **outcome)
    if bad:
        listing = "; ".join(f"{r['binary']} searches {', '.join(r['offending_runpath'])}" for r in bad)
        module.fail_json(msg=f"runtime: {host}: a RUNPATH that does not ship: {listing} (a build-tree or toolkit "
                             f"path: the binary would load what the build machine had; allowed: "
                             f"{', '.join(module.params['runpaths']) or 'none'})", **outcome)
    module.exit_json(**outcome)


if __name__ == "__main__":
    main()
