# -*- coding: utf-8 -*-
"""twinrail's Jinja filters for the weights: what a node lacks of a weight set,
what the controller sends, where the model is. Plain functions over plain
data, so the stages compute nothing in Jinja loops; unit-tested
(tests/unit/test_filters.py and the tests of what they serve)."""

from __future__ import annotations

import os

DOCUMENTATION = r"""
name: weights
short_description: twinrail's filters for the weights
description:
  - "C(twinrail_weights_needed): file -> its size at the source, for every file the check found bad (missing or not matching the manifest)."
  - "C(twinrail_checksum_mismatches): The looped-over names whose stat checksum is not the one wanted (a missing file has none)."
  - "C(twinrail_weights_controller_sources): 'SET: its controller source' -> every file under the source's path (relative name, size, mtime and ctime in ns), what preflight's disk check counts (weights_controller_bytes); nothing is read. Sets from the master or a URL are left out. A path that is not there lists as None."
  - "C(twinrail_model_on_master): The model's first GGUF file on the master, when its figures must be read there: twinrail_model names no GGUF on the controller, and the set that serves it (twinrail_weights' entry of twinrail_model.name) comes from the master. '' otherwise (the figures come from the controller's GGUF, or from the inventory)."
  - "C(twinrail_weights_controller_bytes): The bytes of every file of the sets kept on the controller (as twinrail_weights_controller_sources lists them), for preflight's disk gate: read where they are, no module started for it."
"""


def weights_needed(bad: list[dict], sizes: dict) -> dict:
    """file -> its size at the source, for every file the check found bad
    (missing or not matching the manifest)."""
    return {item["file"]: sizes.get(item["file"], 0) for item in bad or []}


def checksum_mismatches(results: list[dict], want: dict, loop_var: str) -> list[str]:
    """The looped-over names whose stat checksum is not the one wanted
    (a missing file has none)."""
    return [r[loop_var] for r in results or []
            if (r.get("stat") or {}).get("checksum", "") != want.get(r[loop_var])]


def weights_controller_sources(sets: list[dict]) -> dict:
    """"SET: its controller source" -> every file under the source's path
    (relative name, size, mtime and ctime in ns), what preflight's disk
    check counts (weights_controller_bytes); nothing is read. Sets from the
    master or a URL are left out. A path that is not there lists as None."""
    out = {}
    for item in sets or []:
        if item.get("source") != "controller":
            continue
        root = str(item.get("path", ""))
        files = None
        if os.path.isdir(root):
            files = []
            for top, dirs, names in os.walk(root, followlinks=True):
                dirs.sort()
                for name in sorted(names):
                    path = os.path.join(top, name)
                    try:
                        info = os.stat(path)
                    except OSError:
                        files.append([os.path.relpath(path, root), None])
                        continue
                    files.append([os.path.relpath(path, root), info.st_size, info.st_mtime_ns, info.st_ctime_ns])
        out[f"{item.get('model')}/{item.get('revision')}: its controller source"] = files
    return out


def model_on_master(model: dict, sets: list[dict], model_file: str) -> str:
    """The model's first GGUF file on the master, when its figures must be
    read there: twinrail_model names no GGUF on the controller, and the set
    that serves it (twinrail_weights' entry of twinrail_model.name) comes
    from the master. "" otherwise (the figures come from the controller's
    GGUF, or from the inventory)."""
    if (model or {}).get("gguf") or not model_file:
        return ""
    served = next((s for s in sets or [] if s.get("model") == (model or {}).get("name")), None)
    if not served or served.get("source") != "master":
        return ""
    return os.path.join(str(served.get("path", "")), str(model_file))


def weights_controller_bytes(sets: list[dict]) -> int:
    """The bytes of every file of the sets kept on the controller (as
    twinrail_weights_controller_sources lists them), for preflight's disk
    gate: read where they are, no module started for it."""
    return sum(entry[1] for files in weights_controller_sources(sets).values() for entry in files or []
               if entry[1] is not None)


class FilterModule:  # pylint: disable=too-few-public-methods
    """twinrail's filters for the weights."""

    def filters(self):
        return {
            "twinrail_weights_needed": weights_needed,
            "twinrail_checksum_mismatches": checksum_mismatches,
            "twinrail_weights_controller_sources": weights_controller_sources,
            "twinrail_model_on_master": model_on_master,
            "twinrail_weights_controller_bytes": weights_controller_bytes,
        }
