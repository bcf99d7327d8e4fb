# -*- coding: utf-8 -*-
"""What nvidia-smi says about a node's GPUs, and the gate that every node
runs the same driver and CUDA (issue: the seed's hardware, GB10).

Parsers for the two forms nvidia-smi prints: its table (`nvidia-smi`: the
driver and CUDA versions live only in its header) and the query format
(`--query-gpu=... --format=csv[,noheader][,nounits]`). On GB10, memory is
unified with the CPU's: nvidia-smi says `Not Supported` (table) or `[N/A]`
(query) for framebuffer memory, and the memory figures come from
/proc/meminfo instead; both read as None here. Pure Python, tested on real
captures (tests/fixtures/hardware/).
"""

from __future__ import annotations

import re

_VERSIONS = re.compile(r"NVIDIA-SMI\s+(?P<smi>\S+)\s+Driver Version:\s+(?P<driver>\S+)\s+CUDA Version:\s+(?P<cuda>\S+)")
# first line of a GPU's block: "|   0  NVIDIA GB10      Off |   0000000F:01:00.0 Off |   N/A |"
_GPU = re.compile(r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<persistence>On|Off)\s*\|\s*(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:"
                  r"[0-9A-Fa-f]{2}\.\d)\s+(?P<disp>On|Off)\s*\|")
_MEMORY = re.compile(r"(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB")
_UTIL = re.compile(r"\|\s*(?P<util>\d+)%\s+\S+\s*\|\s*$")
UNAVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "")


class ParseError(ValueError):
    """Not the nvidia-smi output the parser expects."""


def parse_table(text: str) -> dict:
    """nvidia-smi's default table: versions, and per GPU index, name,
    persistence mode, bus id, memory (None where not supported) and use."""
    versions = _VERSIONS.search(text)
    if not versions:
        raise ParseError("no 'NVIDIA-SMI ... Driver Version: ... CUDA Version: ...' header: not nvidia-smi's table")
    lines = text.splitlines()
    gpus = []
    for i, line in enumerate(lines):
        match = _GPU.match(line)
        if not match:
            continue
        detail = lines[i + 1] if i + 1 < len(lines) else ""
        memory = _MEMORY.search(detail)
        util = _UTIL.search(detail)
        gpus.append({
            "index": int(match.group("index")), "name": match.group("name").strip(),
            "persistence": match.group("persistence") == "On", "bus_id": match.group("bus"),
            "memory_used_mib": int(memory.group("used")) if memory else None,
            "memory_total_mib": int(memory.group("total")) if memory else None,
            "memory_supported": memory is not None,
            "utilization_pct": int(util.group("util")) if util else None,
        })
    return {"nvidia_smi": versions.group("smi"), "driver_version": versions.group("driver"),
            "cuda_version": versions.group("cuda"), "gpus": gpus}


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
    `fields` names the columns in the order they were asked."""
    rows = [line for line in text.splitlines() if line.strip() and "nvidia-smi" not in line]
    if not rows:
        raise ParseError("no rows: not nvidia-smi's query output")
    if fields is None:
        header, rows = rows[0], rows[1:]
        fields = [re.sub(r"\s*\[.*\]$", "", name.strip()) for name in header.split(",")]
    out = []
    for row in rows:
        cells = [cell for cell in row.split(",")]
        if len(cells) != len(fields):
            raise ParseError(f"{len(cells)} values for {len(fields)} fields in {row!r}")
        out.append({field: _value(cell) for field, cell in zip(fields, cells)})
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
    if seen:
        ref = seen[0]
        for host in seen[1:]:
            for key in ("driver_version", "cuda_version"):
                if facts[host][key] != facts[ref][key]:
                    failures.append(f"{host}: NVIDIA {key.replace('_', ' ')} {facts[host][key]}, expected "
                                    f"{facts[ref][key]} as on {ref} (every node runs the same)")
    return failures
