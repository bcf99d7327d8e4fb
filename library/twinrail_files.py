#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Install a stage's rendered files on a node in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: twinrail_files
short_description: Install a stage's files on a node in one module run
description:
  - Each file's content (rendered on the controller, C(lookup('ansible.builtin.template', ...))), mode, owner and
    group are compared with what the node holds, and only the files that differ are written, each atomically (a
    temporary file beside it, checked by its O(files[].validate) command when it has one, then moved into place), with
    any missing parent directory created.
  - One module run for a stage's files where a template task per file costs two (a stat, then the copy) and a
    task's overhead each; a re-run that changes nothing reads every file once.
  - A file whose validation fails is not installed, and the module fails naming it and what the command said; files
    written before it stay written (each is whole, and the next run compares them again).
  - In check mode nothing is written; with C(--diff) each file that would change is shown.
version_added: "0.1.0"
author: twinrail developers
options:
  files:
    description: The files to install.
    type: list
    elements: dict
    required: true
    suboptions:
      dest: {description: The file's absolute path., type: path, required: true}
      content: {description: What the file holds., type: str, required: true}
      mode: {description: Its mode (octal string)., type: str, default: "0644"}
      owner: {description: Its owner., type: str, default: root}
      group: {description: Its group., type: str, default: root}
      validate:
        description: A command that must accept the new content before it is installed; C(%s) is the temporary file.
        type: str
  directories:
    description:
      - Directories the stage keeps (absolute paths), each made or put back to mode 0755, owner and group root.
        A file's missing parent is made the same way.
    type: list
    elements: path
    default: []
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Install Prometheus's configuration and settings
  twinrail_files:
    files:
      - dest: /etc/prometheus/prometheus.yml
        content: "{{ lookup('ansible.builtin.template', 'prometheus.yml.j2') }}"
        validate: promtool check config --syntax-only %s
      - dest: /etc/default/prometheus
        content: "{{ lookup('ansible.builtin.template', 'prometheus.default.j2') }}"
  register: __files
"""

RETURN = r"""
changed_files:
  description: >-
    The path of each directory made or put back and each file written (or, in check mode, that would be), in the
    order given.
  returned: always
  type: list
  elements: str
"""

import grp
import os
import pwd
import shlex
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule

FILE_SPEC = {"dest": {"type": "path", "required": True}, "content": {"type": "str", "required": True},
             "mode": {"type": "str", "default": "0644"}, "owner": {"type": "str", "default": "root"},
             "group": {"type": "str", "default": "root"}, "validate": {"type": "str"}}


def wanted(spec: dict) -> tuple[int, int, int]:
    """(mode, uid, gid) the file must have; KeyError/ValueError name what is wrong."""
    return int(spec["mode"], 8), pwd.getpwnam(spec["owner"]).pw_uid, grp.getgrnam(spec["group"]).gr_gid


def current(dest: str) -> tuple[bytes | None, tuple | None]:
    """The file's bytes and (mode, uid, gid); (None, None) when it is not there."""
    try:
        with open(dest, "rb") as handle:
            data = handle.read()
        st = os.stat(dest)
    except FileNotFoundError:
        return None, None
    return data, (st.st_mode & 0o7777, st.st_uid, st.st_gid)


def write(module: AnsibleModule, spec: dict, data: bytes, mode: int, uid: int, gid: int) -> str | None:
    """Install one file atomically; why not, when its validation refused it."""
    directory = os.path.dirname(spec["dest"])
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".twinrail.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.chown(tmp, uid, gid)
        if spec.get("validate"):
            argv = [word.replace("%s", tmp) for word in shlex.split(spec["validate"])]
            rc, out, err = module.run_command(argv)
            if rc != 0:
                return (f"{spec['dest']}: its new content fails `{spec['validate']}` (exit {rc}): "
                        f"{(err or out).strip()[-1000:]}; the file was left as it was")
        module.atomic_move(tmp, spec["dest"], unsafe_writes=False)
        tmp = None
        # atomic_move gives a file that was there its old mode and owner, a new one the umask's
        os.chmod(spec["dest"], mode)
        os.chown(spec["dest"], uid, gid)
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
    return None


def main() -> None:
    module = AnsibleModule(argument_spec={"files": {"type": "list", "elements": "dict", "required": True,
                                                    "options": FILE_SPEC},
                                          "directories": {"type": "list", "elements": "path", "default": []}},
                           supports_check_mode=True)
    # every file's arguments judged before any file is touched
    plan, seen = [], set()
    for spec in module.params["files"]:
        dest = spec["dest"]
        if not os.path.isabs(dest):
            module.fail_json(msg=f"files: dest {dest!r} is not an absolute path; nothing was written")
        if dest in seen:
            module.fail_json(msg=f"files: {dest} is given twice; nothing was written")
        if spec.get("validate") and "%s" not in spec["validate"]:
            module.fail_json(msg=f"{dest}: validate must name the file to check as %s: {spec['validate']!r}; "
                                 "nothing was written")
        seen.add(dest)
        try:
            plan.append((spec, *wanted(spec)))
        except (KeyError, ValueError) as exc:
            module.fail_json(msg=f"{dest}: mode {spec['mode']!r}, owner {spec['owner']!r}, group {spec['group']!r}: "
                                 f"{exc}; nothing was written")
    for path in module.params["directories"]:
        if not os.path.isabs(path):
            module.fail_json(msg=f"directories: {path!r} is not an absolute path; nothing was written")
    changed, diffs = [], []
    for path in module.params["directories"]:
        st = os.stat(path) if os.path.isdir(path) else None
        if st and (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o755, 0, 0):
            continue
        changed.append(path)
        if not module.check_mode:
            os.makedirs(path, mode=0o755, exist_ok=True)
            os.chmod(path, 0o755)
            os.chown(path, 0, 0)
    for spec, mode, uid, gid in plan:
        dest, data = spec["dest"], spec["content"].encode()
        before, attrs = current(dest)
        if before == data and attrs == (mode, uid, gid):
            continue
        changed.append(dest)
        if module._diff:  # pylint: disable=protected-access
            diffs.append({"before_header": dest, "after_header": dest,
                          "before": (before or b"").decode(errors="replace"), "after": spec["content"]})
        if module.check_mode:
            continue
        if before == data:
            os.chmod(dest, mode)
            os.chown(dest, uid, gid)
            continue
        refused = write(module, spec, data, mode, uid, gid)
        if refused:
            module.fail_json(msg=refused, changed_files=changed[:-1])
    result = {"changed": bool(changed), "changed_files": changed}
    if diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
