#!/usr/bin/python
# -*- coding: utf-8 -*-
"""The guard's versioned artifact, built on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: guard_artifact
short_description: Build twinrail-guard as a zipapp named by its sha256
description:
  - Builds the C(twinrail) package's guard (C(twinrail/__init__.py) and
    C(twinrail/guard/)) as a zipapp the nodes' python3 runs, the same bytes
    from the same sources, and keeps it in O(cache) as
    C(<release>/twinrail-guard.pyz) with its C(.sha256). The release is
    C(<__version__>-<sha256[:12]>), so a changed guard is a new release.
  - Meant for the controller (delegated to localhost); writes only into
    O(cache), and only when the release is not there yet.
version_added: "0.1.0"
author: twinrail developers
options:
  source:
    description: The folder holding the C(twinrail) package (the project's C(src/)).
    type: path
    required: true
  cache:
    description: Folder of the built releases on the controller.
    type: path
    required: true
attributes:
  check_mode:
    support: full
    details: Builds in memory in check mode; reports what it would write.
  diff_mode:
    support: full
    details: Shows the zipapp's checksum line before and after (the zipapp itself is binary).
"""

EXAMPLES = r"""
- name: Build the guard's artifact
  guard_artifact:
    source: "{{ role_path }}/../../src"
    cache: ~/.cache/twinrail/guard
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
release:
  description: C(<version>-<sha256[:12]>), the name of the release on the nodes.
  returned: always
  type: str
sha256:
  description: sha256 of the zipapp.
  returned: always
  type: str
path:
  description: The zipapp in the cache.
  returned: always
  type: str
members:
  description: The package files inside.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.runtime.guard_zipapp import build
from ansible.module_utils.modules.module_diff import diff, file_text


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "source": {"type": "path", "required": True},
            "cache": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    try:
        data, meta = build(module.params["source"])
    except ValueError as exc:
        module.fail_json(msg=f"service: the guard's artifact: {exc}")
    directory = os.path.join(module.params["cache"], meta["release"])
    path = os.path.join(directory, "twinrail-guard.pyz")
    changed = True
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            changed = handle.read() != data
    result = {"changed": changed, "path": path, **meta}
    if module._diff and changed:  # pylint: disable=protected-access
        # the zipapp by its checksum file: a line, not its bytes
        result["diff"] = diff(path + ".sha256", file_text(path + ".sha256"),
                              f"{meta['sha256']}  twinrail-guard.pyz\n")
    if changed and not module.check_mode:
        os.makedirs(directory, exist_ok=True)
        for name, content in ((path, data), (path + ".sha256", f"{meta['sha256']}  twinrail-guard.pyz\n".encode())):
            with open(name + ".part", "wb") as handle:
                handle.write(content)
            os.replace(name + ".part", name)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
