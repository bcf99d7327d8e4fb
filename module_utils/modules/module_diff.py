# -*- coding: utf-8 -*-
"""What a module that changes a file shows under ``--diff``: the text
before and after, with the file's path as both headers, the way Ansible's
copy and template modules and community.general's modules return it
(``diff`` in the result, rendered by the callback). A file that does not
exist reads as empty. Binary content is shown by its text stand-in (a
sha256 line), never raw."""

from __future__ import annotations

import json
import os


def file_text(path: str) -> str:
    """The file's text, or '' when it does not exist."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


def json_text(value) -> str:
    """A value as the module writes it: indented JSON with sorted keys."""
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def key_values(values: dict) -> str:
    """key = value lines, sorted by key (sysctl's own notation)."""
    return "".join(f"{key} = {values[key]}\n" for key in sorted(values))


def diff(path: str, before: str, after: str) -> dict:
    """The result's ``diff`` for one file: its path as both headers
    ('(absent)' before a file that did not exist)."""
    return {"before": before, "after": after, "after_header": path,
            "before_header": path if before or os.path.lexists(path) else f"{path} (absent)"}
