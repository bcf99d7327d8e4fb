#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Weights gate: does a directory hold exactly what its manifest lists?"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_manifest
short_description: Verify a weights directory against a SHA256SUMS manifest
description:
  - Hashes the files a manifest lists in parallel threads, in large blocks,
    and reports each as ok, missing, size_mismatch, hash_mismatch or extra.
  - Keeps a verification cache beside the weights (size, mtime, inode and
    sha256 per file), so unchanged files are not read again; force re-hashes
    everything. Reports changed only when it wrote the cache, a manifest or
    moved files.
  - With promote_to, the directory is a staging area, the files that verify
    are moved into promote_to and complete ones that do not are deleted; a
    file shorter than its expected size (sizes) is kept for the next
    transfer to continue.
  - With create, a missing manifest is made from the files present (the
    inventory trusts this first copy).
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  path:
    description: The directory holding the files.
    type: path
    required: true
  manifest:
    description: The manifest file on the host, one sha256 and relative path per line.
    type: path
    required: true
  create:
    description: Write the manifest from the files under path when it does not exist.
    type: bool
    default: false
  only:
    description: Check these entries only (the ones just transferred); no extra report then.
    type: list
    elements: str
  sizes:
    description: Expected size per entry, when known; a different size is reported without reading the file.
    type: dict
  cache:
    description: Where the verification cache lives; the default is a hidden file in path.
    type: path
  force:
    description: Ignore the cache and read every file.
    type: bool
    default: false
  workers:
    description: Hashing threads; the default is the number of CPUs.
    type: int
  promote_to:
    description: Move the entries that verify from path into this directory, remove bad ones.
    type: path
  promote_cache:
    description: The verification cache of promote_to, which the moved entries join.
    type: path
  fail_on_mismatch:
    description: Fail naming each bad file, its expected and its actual sha256.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    details: Hashes and verifies in check mode; writes no manifest, cache or promotion.
  diff_mode:
    support: partial
    details: Shows a manifest it makes (trust_first_copy); verifying and promoting change no text to show.
"""

EXAMPLES = r"""
- name: Verify the master's copy (cached)
  weights_manifest:
    path: /srv/twinrail/models/smollm2/q4_1
    manifest: /srv/twinrail/models/smollm2/.twinrail/q4_1.sha256
    fail_on_mismatch: true
    host: "{{ inventory_hostname }}"
"""

RETURN = r"""
files:
  description: Status per relative path.
  returned: always
  type: dict
bad:
  description: One entry per file that is not ok (file, status, expected, actual, size).
  returned: always
  type: list
  elements: dict
hashed:
  description: The files read this time (the others were vouched for by the cache).
  returned: always
  type: list
  elements: str
hashed_bytes:
  description: Bytes read.
  returned: always
  type: int
seconds:
  description: Time spent verifying.
  returned: always
  type: float
sizes:
  description: Size of each file that verified.
  returned: always
  type: dict
moved:
  description: Files moved into promote_to.
  returned: when promote_to is set
  type: list
  elements: str
partial:
  description: Staged files shorter than expected, kept for the next transfer to continue.
  returned: when promote_to is set
  type: list
  elements: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.modules.module_diff import diff
from ansible.module_utils.weights.sums import (
    ManifestError, hash_files, list_files, load_cache, parse_sha256sums, promote,
    render_sha256sums, save_cache, verify)

CACHE_NAME = ".twinrail-verify.json"


def _read_manifest(module, params):
    path = params["manifest"]
    if not os.path.exists(path) and params["create"]:
        rels = list_files(params["path"])
        if not rels:
            module.fail_json(msg=f"weights: {params['host']}: no file under {params['path']} "
                                 f"to make a manifest of")
        manifest = hash_files(params["path"], rels, params["workers"])
        if not module.check_mode:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
                handle.write(render_sha256sums(manifest))
            os.replace(f"{path}.tmp", path)
        return manifest, True
    try:
        with open(path, encoding="utf-8") as handle:
            return parse_sha256sums(handle.read()), False
    except FileNotFoundError:
        module.fail_json(msg=f"weights: {params['host']}: manifest {path} does not exist")
    except (ManifestError, UnicodeDecodeError) as exc:
        module.fail_json(msg=f"weights: {params['host']}: manifest {path}: {exc}")
    return None, False


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "manifest": {"type": "path", "required": True},
            "create": {"type": "bool", "default": False},
            "only": {"type": "list", "elements": "str"},
            "sizes": {"type": "dict"},
            "cache": {"type": "path"},
            "force": {"type": "bool", "default": False},
            "workers": {"type": "int"},
            "promote_to": {"type": "path"},
            "promote_cache": {"type": "path"},
            "fail_on_mismatch": {"type": "bool", "default": False},
            "host": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    started = time.monotonic()
    manifest, created = _read_manifest(module, params)
    cache_path = params["cache"] or os.path.join(params["path"], CACHE_NAME)
    try:
        result = verify(params["path"], manifest, cache=load_cache(cache_path),
                        force=params["force"], workers=params["workers"],
                        sizes={k: int(v) for k, v in (params["sizes"] or {}).items()},
                        only=params["only"])
    except ManifestError as exc:
        module.fail_json(msg=f"weights: {params['host']}: {exc}")
    changed = created
    out = {"files": result["files"], "bad": result["bad"], "hashed": result["hashed"],
           "hashed_bytes": result["hashed_bytes"], "sizes": result["sizes"],
           "entries": len(manifest), "manifest_created": created}
    if created and module._diff:  # pylint: disable=protected-access
        out["diff"] = diff(params["manifest"], "", render_sha256sums(manifest))
    if params["promote_to"]:
        promote_cache = params["promote_cache"] or os.path.join(params["promote_to"], CACHE_NAME)
        if module.check_mode:
            out["moved"] = sorted(k for k, v in result["files"].items() if v == "ok")
        else:
            moved = promote(params["path"], params["promote_to"], result,
                            load_cache(promote_cache))
            out["moved"], out["removed"] = moved["moved"], moved["removed"]
            out["partial"] = moved["partial"]
            changed |= bool(moved["moved"] or moved["removed"])
            changed |= save_cache(promote_cache, moved["cache"])
        changed |= bool(out["moved"])
    elif not module.check_mode and os.path.isdir(params["path"]):
        changed |= save_cache(cache_path, result["cache"])
    out["seconds"] = round(time.monotonic() - started, 3)
    if params["fail_on_mismatch"] and result["bad"]:
        lines = []
        for item in result["bad"]:
            if item["status"] == "hash_mismatch":
                lines.append(f"{item['file']}: sha256 {item['actual']}, expected {item['expected']}")
            elif item["status"] == "size_mismatch":
                lines.append(f"{item['file']}: {item['size']} bytes, expected {item['expected_size']}")
            else:
                lines.append(f"{item['file']}: missing, expected sha256 {item['expected']}")
        module.fail_json(msg=f"weights: {params['host']}: {params['path']}: "
                             f"{len(lines)} of {len(manifest)} files wrong: " + "; ".join(lines),
                         changed=changed, **out)
    module.exit_json(changed=changed, **out)


if __name__ == "__main__":
    main()
