# -*- coding: utf-8 -*-
"""What nvidia-smi says about a node's GPUs, and the gate that every node
runs the same driver and CUDA (issue: the seed's hardware, GB10).

Parsers for the two forms nvidia-smi prints: its table (`nvidia-smi`: the
driver and CUDA versions live only in its header) and the query format
(`--query-gpu=... --format=csv[,noheader][,nounits]`). On GB10, memory is
unified with the CPU's: nvidia-smi says `Not Supported` (table) or `[N/A]`
(query) for framebuffer memory, and the memory figures come from
/proc/meminfo instead. Unified memory is decided by what identifies it
(the product and that reading together), never by a missing figure: a
discrete GPU whose memory reads "N/A" is a problem, named. Pure Python, tested on real
captures (tests/fixtures/hardware/).
"""

from __future__ import annotations

import re

_VERSIONS = re.compile(r"NVIDIA-SMI\s+(?P<smi>\S+)\s+Driver Version:\s+(?P<driver>\S+)\s+CUDA Version:\s+(?P<cuda>\S+)")
# first line of a GPU's block: "|   0  NVIDIA GB10      Off |   0000000F:01:00.0 Off |   N/A |"
_GPU = re.compile(r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<persistence>On|Off)\s*\|\s*(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:"
                  r"[0-9A-Fa-f]{2}\.\d)\s+(?P<disp>On|Off)\s*\|")
# any row that opens a GPU's block, read or not: "|   3  ..." (a MIG device row has 4 numbers and no bus id)
_GPU_ROW = re.compile(r"^\|\s+\d+\s+\S.*\|.*\|.*\|\s*$")
_MEMORY = re.compile(r"(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB")
_UTIL = re.compile(r"\|\s*(?P<util>\d+)%\s+\S+\s*\|\s*$")
_MIG = re.compile(r"\|\s*(?P<mig>Enabled|Disabled|N/A)\s*\|\s*$")
UNAVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "")
# The GPUs whose memory is the CPU's (unified): nvidia-smi's "Not Supported"
# is their reading. On any other product the same words, or "N/A", mean
# nvidia-smi could not read the memory, a problem, never unified memory.
UNIFIED_MEMORY_PRODUCTS = ("NVIDIA GB10",)
# what nvidia-smi prints instead of its table when it cannot work
_FAILURES = ("NVIDIA-SMI has failed", "No devices were found", "Failed to initialize NVML",
             "Unable to determine the device handle", "GPU is lost", "Unknown Error")


class ParseError(ValueError):
    """Not the nvidia-smi output the parser expects."""


# what nvidia-smi says for a unified-memory GPU's framebuffer: "Not
# Supported" in its table, "[N/A]" in the query form (captures of both)
UNIFIED_READINGS = {"table": ("Not Supported",), "query": ("[N/A]", "[Not Supported]")}


def unified_memory(name: str, reading: str, form: str = "table") -> bool:
    """A GPU's memory is unified with the CPU's only where both show it:
    a product known to be built so, and the reading nvidia-smi gives such a
    product in that form; a missing figure alone never says so."""
    return name in UNIFIED_MEMORY_PRODUCTS and reading.strip() in UNIFIED_READINGS[form]


def _quote(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " / ".join(lines)[-limit:] or "(no output)"


def parse_table(text: str) -> dict:
    """nvidia-smi's default table: versions, and per GPU index, name,
    persistence mode, bus id, memory (``memory``: ``discrete`` with its
    figures, ``unified`` with none, or ``unread``), MIG mode and use, and
    ``problems``: one sentence per GPU nvidia-smi could not read, quoting
    it. Every GPU row of a multi-GPU table is read or named."""
    versions = _VERSIONS.search(text)
    if not versions:
        said = [f for f in _FAILURES if f in text]
        raise ParseError(f"nvidia-smi printed no table (no 'NVIDIA-SMI ... Driver Version: ... CUDA Version: ...' "
                         f"header){': it failed' if said else ''}: {_quote(text)}")
    lines = text.splitlines()
    gpus, problems = [], []
    for i, line in enumerate(lines):
        if "Unable to determine the device handle" in line or "GPU is lost" in line:
            problems.append(f"nvidia-smi: {line.strip()}")
            continue
        match = _GPU.match(line)
        if not match:
            # a row that opens a GPU block but does not read (a field the pattern does not know)
            if _GPU_ROW.match(line) and "MiB" not in line and i > 0 and not _is_mig_or_process(lines, i):
                problems.append(f"GPU row not read: {line.strip()}")
            continue
        detail = lines[i + 1] if i + 1 < len(lines) else ""
        third = lines[i + 2] if i + 2 < len(lines) else ""
        memory = _MEMORY.search(detail)
        util = _UTIL.search(detail)
        mig = _MIG.search(third)
        name = match.group("name").strip()
        cells = detail.split("|")
        reading = cells[2].strip() if len(cells) > 3 else ""
        kind = "discrete" if memory else "unified" if unified_memory(name, reading) else "unread"
        gpu = {
            "index": int(match.group("index")), "name": name,
            "persistence": match.group("persistence") == "On", "bus_id": match.group("bus"),
            "memory": kind,
            "memory_used_mib": int(memory.group("used")) if memory else None,
            "memory_total_mib": int(memory.group("total")) if memory else None,
            "memory_supported": memory is not None,
            "mig": None if not mig or mig.group("mig") == "N/A" else mig.group("mig") == "Enabled",
            "utilization_pct": int(util.group("util")) if util else None,
        }
        gpus.append(gpu)
        block = [line, detail] + ([third] if "|" in third and not third.startswith("+") else [])
        if any("ERR!" in row for row in block):
            problems.append(f"GPU {gpu['index']} ({gpu['bus_id']}): nvidia-smi shows ERR! where it reads the GPU "
                            f"(a GPU in error, often after an Xid): {_quote(chr(10).join(block))}")
        if kind == "unread":
            problems.append(f"GPU {gpu['index']} ({name}, {gpu['bus_id']}): nvidia-smi reads its memory as "
                            f"{reading or 'nothing'!r}, not a figure: a discrete GPU whose memory is unknown "
                            f"(only {', '.join(UNIFIED_MEMORY_PRODUCTS)} share the CPU's)")
    if not gpus and not problems:
        problems.append(f"nvidia-smi lists no GPU: {_quote(text[versions.end():], 200)}")
    return {"nvidia_smi": versions.group("smi"), "driver_version": versions.group("driver"),
            "cuda_version": versions.group("cuda"), "gpus": gpus, "problems": problems}


def _is_mig_or_process(lines: list[str], index: int) -> bool:
    """Whether a row sits in the MIG devices' or the processes' table
    (found by the title above it), not among the GPUs."""
    for line in reversed(lines[:index]):
        if "MIG devices:" in line or "Processes:" in line:
            return True
        if "GPU  Name" in line:
            return False
    return False


def _value(text: str):
    text = text.strip()
    if text in UNAVAILABLE:
        return None
    number = re.fullmatch(r"(-?\d+(?:\.\d+)?)(?:\s*(?:%|W|MiB|MHz|C))?", text)
    if number:
        return float(number.group(1)) if "." in number.group(1) else int(number.group(1))
    return text


def parse_query(text: str, fields: list[str] | None = None) -> list[dict]:
    """nvidia-smi --query-gpu=... --format=csv: one dict per GPU, keyed by
    field name (units dropped, unavailable values None). With noheader,
    `fields` names the columns in the order they were asked. Where the
    row has a name and memory.total, ``memory`` says discrete, unified or
    unread as parse_table does. nvidia-smi's own failure is an error
    quoting it, never an empty list."""
    said = [f for f in _FAILURES if f in text]
    if said:
        raise ParseError(f"nvidia-smi failed: {_quote(text)}")
    rows = [line for line in text.splitlines() if line.strip() and "nvidia-smi" not in line]
    if not rows:
        raise ParseError(f"no rows: not nvidia-smi's query output: {_quote(text)}")
    if fields is None:
        header, rows = rows[0], rows[1:]
        fields = [re.sub(r"\s*\[.*\]$", "", name.strip()) for name in header.split(",")]
    out = []
    for row in rows:
        cells = [cell for cell in row.split(",")]
        if len(cells) != len(fields):
            raise ParseError(f"{len(cells)} values for {len(fields)} fields in {row!r}")
        row = {field: _value(cell) for field, cell in zip(fields, cells)}
        raw = dict(zip(fields, (cell.strip() for cell in cells)))
        if "name" in raw and "memory.total" in raw:
            row["memory"] = ("discrete" if isinstance(row["memory.total"], (int, float))
                             else "unified" if unified_memory(raw["name"], raw["memory.total"], "query")
                             else "unread")
        out.append(row)
    return out


def gpu_gate(facts: dict, cuda_required: bool) -> list[str]:
    """Every node with a GPU when CUDA is on, and the same driver and CUDA on
    every node; one sentence per problem, naming node and versions.

    facts: {host: parse_table() result, or None where nvidia-smi is absent}."""
    failures = []
    hosts = sorted(facts)
    for host in hosts:
        if cuda_required and (not facts[host] or not facts[host]["gpus"]):
            failures.append(f"{host}: no NVIDIA GPU found (nvidia-smi "
                            f"{'lists none' if facts[host] else 'is not installed'}) while the runtime is built "
                            f"with CUDA (runtime_build_cuda)")
    seen = [h for h in hosts if facts[h]]
    for host in seen:
        # what nvidia-smi could not read is the node's problem, never a default
        failures.extend(f"{host}: {problem}" for problem in facts[host].get("problems") or [])
    if seen:
        ref = seen[0]
        for host in seen[1:]:
            for key in ("driver_version", "cuda_version"):
                if facts[host][key] != facts[ref][key]:
                    failures.append(f"{host}: NVIDIA {key.replace('_', ' ')} {facts[host][key]}, expected "
                                    f"{facts[ref][key]} as on {ref} (every node runs the same)")
    return failures
