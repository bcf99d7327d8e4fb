# -*- coding: utf-8 -*-
"""What a site serves, as its inventory says it: the weight sets to sync
(twinrail_weights) and the model's figures (twinrail_model), each problem
as (variable, expected form, value) for inventory_rules' Validator to
name with its host. Kept free of Ansible imports but for memory_plan's
KV cache types."""

from __future__ import annotations

import re

from ansible.module_utils.inventory.memory_plan import KV_TYPES

MODEL_INTS = ("layers", "kv_heads", "head_dim", "context", "parallel")
MODEL_NUMBERS = ("params_b", "bits_per_param")
WEIGHT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
WEIGHT_SOURCES = ("controller", "url", "master")
WEIGHT_KEYS = {"model", "revision", "source", "path", "base_url", "manifest",
               "trust_first_copy", "current"}


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def weights_problems(sets) -> list[tuple]:
    """twinrail_weights, the weight sets to sync, each a mapping: its
    problems as (variable, expected form, value)."""
    problems = []
    if not isinstance(sets, list) or not sets:
        problems.append(("twinrail_weights", "a list of weight sets (model, revision, "
                         "source, path or base_url, manifest)", sets))
        return problems
    seen, current = set(), {}
    for index, item in enumerate(sets):
        where = f"twinrail_weights[{index}]"
        if not isinstance(item, dict):
            problems.append((where, "a mapping (model, revision, source, ...)", item))
            continue
        for key in sorted(set(item) - WEIGHT_KEYS):
            problems.append((f"{where}.{key}",
                             f"one of the known keys ({', '.join(sorted(WEIGHT_KEYS))})", key))
        for key in ("model", "revision"):
            value = item.get(key)
            if not isinstance(value, str) or not WEIGHT_NAME_RE.match(value):
                problems.append((f"{where}.{key}", "a directory name of letters, digits, "
                                 "'.', '_' and '-' (not starting with '.' or '-')", value))
        source = item.get("source")
        if source not in WEIGHT_SOURCES:
            problems.append((f"{where}.source", f"one of {', '.join(WEIGHT_SOURCES)}", source))
        for key in ("trust_first_copy", "current"):
            if key in item and not isinstance(item[key], bool):
                problems.append((f"{where}.{key}", "a boolean (true or false)", item[key]))
        manifest = item.get("manifest", "SHA256SUMS")
        if source in ("controller", "master"):
            path = item.get("path")
            if not isinstance(path, str) or not path.startswith("/"):
                problems.append((f"{where}.path", f"an absolute path of a directory on the "
                                 f"{source}", path))
            if manifest not in (None, "") and (not isinstance(manifest, str) or
                                               manifest.startswith("/") or ".." in manifest):
                problems.append((f"{where}.manifest", "a file name inside path "
                                 "(e.g. SHA256SUMS), or empty with trust_first_copy", manifest))
        if source == "url":
            base = item.get("base_url")
            if not isinstance(base, str) or not re.match(r"^https?://[^/\s]+/\S*$", base):
                problems.append((f"{where}.base_url",
                                 "an http(s) URL the manifest's paths are appended to", base))
            if manifest in (None, ""):
                problems.append((f"{where}.manifest", "the manifest's URL or file name under "
                                 "base_url: for a url source it is the list of files", manifest))
        if manifest in (None, "") and item.get("trust_first_copy") is not True:
            problems.append((f"{where}.manifest", "a SHA256SUMS manifest, or "
                             "trust_first_copy: true to make it from the master's first copy",
                             manifest))
        key = (item.get("model"), item.get("revision"))
        if key in seen:
            problems.append((where, "each model and revision once", f"{key[0]}/{key[1]}"))
        seen.add(key)
        if item.get("current", True) is True:
            if item.get("model") in current:
                problems.append((f"{where}.current", f"one current revision per model "
                                 f"({current[item.get('model')]} is current already; "
                                 f"set current: false on one)", item.get("revision")))
            current[item.get("model")] = item.get("revision")
    return problems


def model_problems(model) -> list[tuple]:
    """twinrail_model, the model's figures: its problems as (variable,
    expected form, value)."""
    problems = []
    if not isinstance(model, dict):
        problems.append(("twinrail_model", "a mapping (name, params_b, bits_per_param, "
                         "layers, kv_heads, head_dim, context, kv_type, parallel)", model))
        return problems
    name = model.get("name")
    if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name):
        problems.append(("twinrail_model.name",
                         "a name of letters, digits, '.', '_' and '-'", name))
    gguf = model.get("gguf", "")
    if gguf not in ("", None) and (not isinstance(gguf, str) or not gguf.startswith("/")):
        problems.append(("twinrail_model.gguf",
                         "an absolute path on the controller, or empty", gguf))
    for key in MODEL_INTS:
        value = model.get(key)
        if not is_int(value) or value <= 0:
            problems.append((f"twinrail_model.{key}", "a positive integer", value))
    for key in MODEL_NUMBERS:
        value = model.get(key)
        if not is_number(value) or value <= 0:
            problems.append((f"twinrail_model.{key}", "a positive number", value))
    kv_type = model.get("kv_type")
    if "kv_bytes" in model:
        problems.append(("twinrail_model.kv_bytes", "no kv_bytes: it became kv_type, the KV cache type "
                         f"llama-server is given (one of {', '.join(KV_TYPES)}), whose bytes per element the plan "
                         "knows", model.get("kv_bytes")))
    if kv_type not in KV_TYPES:
        problems.append(("twinrail_model.kv_type", "a KV cache type llama.cpp has: "
                         + ", ".join(f"{name} ({size:g} bytes per element)" for name, size in KV_TYPES.items()),
                         kv_type))
    bits = model.get("bits_per_param")
    if is_number(bits) and bits > 32:
        problems.append(("twinrail_model.bits_per_param", "at most 32 bits", bits))
    return problems
