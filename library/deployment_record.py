#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Write the node's deployment record: what is deployed, named by its content."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deployment_record
short_description: Record what is deployed on a node (the seed's deployment record)
description:
  - Reads what the node runs, its machine-id, kernel, distribution, the versions of the
    RDMA stack packages, the firmware of each rail's NIC where ethtool reads
    it, the runtime release behind C(current) with its manifest, every
    model's current revision with the sha256 of its manifest, the service
    configuration's version, and adds what the controller knows (the
    bandwidth baseline, the twinrail commit).
  - Writes it as C(<dir>/<digest>.json), the digest being that of the
    content without the time, and points C(<dir>/current) at it; a node
    whose deployment did not change keeps its record (no change).
    C(<dir>/history.json) lists the records in the order they became
    current; rollback reads the one before.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  dir:
    description: Directory of the records on the node (the system_backup stage passes system_backup_record_dir).
    type: path
    required: true
  runtime_root:
    description: >-
      Directory of the runtime releases (with a current link): llama.cpp's builds (their manifest.json), or the vLLM
      engine's environments (their .twinrail-env.json).
    type: path
    required: true
  weights_root:
    description: Directory of the models (<model>/current, .twinrail-manifests).
    type: path
    required: true
  config_root:
    description: Directory of the service configuration versions (with a current link).
    type: path
    default: /etc/twinrail/service
  guard_root:
    description: >-
      Directory of the guard's releases (C(<release>/twinrail-guard.pyz), with a current link);
      the record names the release and the zipapp's sha256.
    type: path
    required: true
  interfaces:
    description: Rail interfaces whose NIC firmware to read.
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: nvidia-smi, whose driver and CUDA versions and GPU names the record keeps (none where it is absent).
    type: str
    default: nvidia-smi
  packages:
    description: Packages whose installed versions to record.
    type: list
    elements: str
    default: [rdma-core, ibverbs-providers, libibverbs1, perftest, infiniband-diags]
  extra:
    description: What the controller adds to what is deployed (the twinrail commit).
    type: dict
    default: {}
  informational:
    description: Kept in a new record but not part of its digest (the bandwidth baseline, measured anew each run).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: Computes the record in check mode; reports whether it would write one.
  diff_mode:
    support: full
    details: Shows the record C(current) points to and the one it will.
"""

EXAMPLES = r"""
- name: Record what is deployed
  deployment_record:
    host: "{{ inventory_hostname }}"
    runtime_root: /opt/twinrail/runtime
    weights_root: /srv/twinrail/models
    interfaces: [ens1f0np0, ens1f1np1]
    extra: {twinrail_commit: "{{ commit }}"}
    informational: {bandwidth_baseline: "{{ baseline }}"}
"""

RETURN = r"""
record:
  description: The record.
  returned: always
  type: dict
path:
  description: Where it is on the node.
  returned: always
  type: str
digest:
  description: Its name (digest of the content without the time).
  returned: always
  type: str
"""

import hashlib
import json
import os
import platform
import sys
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.modules.module_diff import diff, json_text

from ansible.module_utils.gpu.facts import ParseError, parse_table
from ansible.module_utils.weights.sums import sha256_file


def read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def os_release():
    values = {}
    try:
        with open("/etc/os-release", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.strip().partition("=")
                values[key] = value.strip('"')
    except OSError:
        pass
    return {"id": values.get("ID"), "version": values.get("VERSION_ID"), "name": values.get("PRETTY_NAME")}


def link_target(path):
    try:
        return os.path.basename(os.readlink(path))
    except OSError:
        return None


def manifest_digest(path):
    """The sha256 of a file (a weight set's manifest, the guard's zipapp), None when it is not there."""
    try:
        return sha256_file(path)
    except OSError:
        return None


def collect(module):
    p = module.params
    packages = {}
    for name in p["packages"]:
        rc, out, _ = module.run_command(["dpkg-query", "-W", "-f", "${Version}", name])
        packages[name] = out.strip() if rc == 0 and out.strip() else None
    firmware = {}
    ethtool = module.get_bin_path("ethtool")
    for interface in p["interfaces"]:
        firmware[interface] = None
        if ethtool:
            rc, out, _ = module.run_command([ethtool, "-i", interface])
            for line in out.splitlines() if rc == 0 else []:
                key, _, value = line.partition(":")
                if key.strip() == "firmware-version":
                    firmware[interface] = value.strip() or None
    guard = link_target(os.path.join(p["guard_root"], "current"))
    guard_sha256 = manifest_digest(os.path.join(p["guard_root"], guard, "twinrail-guard.pyz")) if guard else None
    release = link_target(os.path.join(p["runtime_root"], "current"))
    # a llama.cpp release's manifest, or the vLLM environment's mark
    manifest = (read_json(os.path.join(p["runtime_root"], "current", "manifest.json"))
                or read_json(os.path.join(p["runtime_root"], "current", ".twinrail-env.json"))) if release else None
    models = {}
    if os.path.isdir(p["weights_root"]):
        for model in sorted(os.listdir(p["weights_root"])):
            revision = link_target(os.path.join(p["weights_root"], model, "current"))
            if revision:
                manifest_path = os.path.join(p["weights_root"], model, ".twinrail-manifests", revision + ".sha256")
                models[model] = {"revision": revision, "manifest_sha256": manifest_digest(manifest_path)}
    # the GPU driver and CUDA a runtime built with CUDA runs on (None
    # without nvidia-smi): a driver update is a new deployment
    gpu = None
    smi = module.get_bin_path(p["nvidia_smi"])
    if smi:
        rc, out, _ = module.run_command([smi], environ_update={"LC_ALL": "C"})
        try:
            table = parse_table(out) if rc == 0 else None
        except ParseError:
            table = None
        gpu = {"driver_version": table["driver_version"], "cuda_version": table["cuda_version"],
               "gpus": [g["name"] for g in table["gpus"]]} if table else {"error": f"nvidia-smi exited {rc}"}
    try:
        with open("/etc/machine-id", encoding="ascii") as handle:
            machine_id = handle.read().strip() or None
    except OSError:
        machine_id = None
    return {
        "host": p["host"],
        # the node itself: a reinstalled or replaced box gets a new one, and
        # nothing measured on the old one holds for it
        "machine_id": machine_id,
        "kernel": platform.release(),
        "distribution": os_release(),
        "packages": packages,
        "nic_firmware": firmware,
        "gpu": gpu,
        "runtime": {"release": release, "manifest": manifest},
        "guard": {"release": guard, "sha256": guard_sha256},
        "models": models,
        "config_version": link_target(os.path.join(p["config_root"], "current")),
        **p["extra"],
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "required": True},
            "dir": {"type": "path", "required": True},
            "runtime_root": {"type": "path", "required": True},
            "weights_root": {"type": "path", "required": True},
            "config_root": {"type": "path", "default": "/etc/twinrail/service"},
            "guard_root": {"type": "path", "required": True},
            "interfaces": {"type": "list", "elements": "str", "default": []},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "packages": {"type": "list", "elements": "str",
                         "default": ["rdma-core", "ibverbs-providers", "libibverbs1", "perftest", "infiniband-diags"]},
            "extra": {"type": "dict", "default": {}},
            "informational": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    p = module.params
    content = collect(module)
    digest = hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]
    path = os.path.join(p["dir"], digest + ".json")
    current = os.path.join(p["dir"], "current")
    history_path = os.path.join(p["dir"], "history.json")
    existing = read_json(path)
    record = existing or dict(content, **p["informational"], digest=digest,
                              recorded=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    changed = existing is None or link_target(current) != digest + ".json"
    result = {"changed": changed, "record": record, "path": path, "digest": digest}
    if module._diff and changed:  # pylint: disable=protected-access
        # what `current` pointed to, and what it will
        before = read_json(os.path.join(p["dir"], link_target(current))) if link_target(current) else None
        result["diff"] = diff(current, json_text(before) if before else "", json_text(record))
    if changed and not module.check_mode:
        try:
            os.makedirs(p["dir"], mode=0o755, exist_ok=True)
            if existing is None:
                with open(path + ".tmp", "w", encoding="utf-8") as handle:
                    json.dump(record, handle, indent=2, sort_keys=True)
                os.rename(path + ".tmp", path)
            history = read_json(history_path) or []
            history.append({"digest": digest, "current_since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            with open(history_path + ".tmp", "w", encoding="utf-8") as handle:
                json.dump(history, handle, indent=2)
            os.rename(history_path + ".tmp", history_path)
            os.symlink(digest + ".json", current + ".tmp")
            os.rename(current + ".tmp", current)
        except OSError as exc:
            module.fail_json(msg=f"deployment record: {p['host']}: cannot write {p['dir']}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
