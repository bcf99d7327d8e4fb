"""``twinrail-guard gpu``: each GPU's telemetry for node_exporter's textfile
collector (run by a timer on every node with a GPU): memory used and
total, utilization, power draw and limit, temperature, uncorrected ECC
errors, and the kernel's Xid lines since boot.

Read with ``nvidia-smi --query-gpu=... --format=csv`` (the header names
each column and its unit, so a driver that orders or words them
differently still reads right). A field the GPU does not report
(``[N/A]``, ``[Not Supported]``, a deprecated query) is no sample, never a
zero. A GB10 (DGX Spark) reports no framebuffer: its GPU and CPU share
the node's memory, so its memory figures are the node's own
(``/proc/meminfo``), marked ``unified``. When nvidia-smi fails the file
says so (``twinrail_gpu_smi_up 0``) with its first line, and no GPU's
figures: a stale reading never looks current.

The controller reads the same functions (``twinrail status``)."""

from __future__ import annotations

import re
import subprocess
import time

from twinrail.guard.memory import read_meminfo
from twinrail.guard.metrics import Exposition
from twinrail.guard.textfile import write_atomic

QUERY = ("index", "pci.bus_id", "name", "memory.used", "memory.total", "utilization.gpu", "power.draw",
         "power.limit", "temperature.gpu", "ecc.errors.uncorrected.volatile.total")
# what nvidia-smi prints for a field this GPU or driver does not report: no sample
NOT_READ = ("N/A", "Not Supported", "Requested functionality has been deprecated", "Insufficient Permissions", "")
# what it prints for a field of a GPU in error: that GPU is broken (its own
# series, an alert, twinrail status ERR), never "not supported"
BROKEN = ("GPU requires reset", "Unknown Error", "GPU is lost", "ERR!")
# The GPUs whose memory is the CPU's (unified): their framebuffer reads
# [N/A] and the node's memory is theirs. Any other GPU whose memory is not
# read has unknown memory, never the node's. The same rule as the GPU gate's
# (module_utils/gpu/facts.py UNIFIED_MEMORY_PRODUCTS; a test holds them equal).
UNIFIED_MEMORY_PRODUCTS = ("NVIDIA GB10",)
UNITS = ("MiB", "%", "W", "C", "MHz")
# a header's column: the field's name, its unit in brackets where it has one
FIELD = re.compile(r"^[a-z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*( \[[^\]]+\])?$")


class QueryError(ValueError):
    """What nvidia-smi printed is not its CSV answer: its own words, quoted."""


def _cell(text: str) -> str | None:
    value = text.strip()
    if value.strip("[]") in NOT_READ or value.strip("[]") in BROKEN:
        return None
    parts = value.rsplit(" ", 1)
    return parts[0] if len(parts) == 2 and parts[1] in UNITS else value


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_query(text: str) -> list[dict]:
    """``--query-gpu=... --format=csv`` with its header: one dict per GPU,
    by the query's field names (the header's units dropped), None for a
    field not read; a GPU in error (a field reads "[GPU requires reset]",
    "[Unknown Error]") also carries ``_broken``: field -> those words. A
    command line echoed before it ("$ ...", "nvidia-smi ...") is skipped."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("$ ")
             and not re.match(r"nvidia-smi(\.exe)?\s", line)]
    if not lines or not all(FIELD.match(column.strip()) for column in lines[0].split(",")):
        raise QueryError(f"nvidia-smi answered no CSV: {' '.join(text.split())[:300] or '(nothing)'}")
    names = [column.strip().split(" [", 1)[0] for column in lines[0].split(",")]
    rows = []
    for line in lines[1:]:
        cells = line.split(",")
        if len(cells) != len(names):
            raise QueryError(f"nvidia-smi answered a row of {len(cells)} fields for {len(names)} columns: "
                             f"{line.strip()[:300]}")
        row = {name: _cell(cell) for name, cell in zip(names, cells)}
        broken = {name: cell.strip().strip("[]") for name, cell in zip(names, cells)
                  if cell.strip().strip("[]") in BROKEN}
        if broken:
            row["_broken"] = broken
        rows.append(row)
    return rows


def telemetry(rows: list[dict], meminfo: dict | None = None) -> list[dict]:
    """Each GPU's figures in base units (bytes, ratio, watts, °C), None
    where not read, and ``broken``: "field: words" of each field nvidia-smi
    read as an error of the GPU. A GB10 (UNIFIED_MEMORY_PRODUCTS) with no
    framebuffer figure and ``meminfo`` given (the node's /proc/meminfo, in
    bytes) has the node's memory: unified, total = MemTotal, used =
    MemTotal - MemAvailable; another GPU's unread memory stays unknown."""
    gpus = []
    for position, row in enumerate(rows):
        used, total = _number(row.get("memory.used")), _number(row.get("memory.total"))
        gpu = {"gpu": row.get("index") if row.get("index") is not None else str(position),
               "bus_id": row.get("pci.bus_id") or "", "name": row.get("name") or "",
               "memory_used_bytes": used * 2**20 if used is not None else None,
               "memory_total_bytes": total * 2**20 if total is not None else None, "memory_unified": False,
               "utilization_ratio": None, "power_watts": _number(row.get("power.draw")),
               "power_limit_watts": _number(row.get("power.limit")),
               "temperature_celsius": _number(row.get("temperature.gpu")),
               "ecc_uncorrected_errors": _number(row.get("ecc.errors.uncorrected.volatile.total")),
               "broken": [f"{field}: [{words}]" for field, words in sorted((row.get("_broken") or {}).items())]}
        utilization = _number(row.get("utilization.gpu"))
        if utilization is not None:
            gpu["utilization_ratio"] = round(utilization / 100.0, 4)
        if total is None and meminfo and "MemTotal" in meminfo and gpu["name"] in UNIFIED_MEMORY_PRODUCTS:
            gpu.update(memory_unified=True, memory_total_bytes=float(meminfo["MemTotal"]),
                       memory_used_bytes=float(meminfo["MemTotal"] - meminfo.get("MemAvailable",
                                                                                 meminfo.get("MemFree", 0))))
        gpus.append(gpu)
    return gpus


FIGURES = (
    ("memory_used_bytes", "the GPU's memory in use, bytes (unified: the node's, shared with the CPU)"),
    ("memory_total_bytes", "the GPU's memory, bytes (unified: the node's)"),
    ("utilization_ratio", "the share of the last sample period a kernel ran on the GPU (0 to 1)"),
    ("power_watts", "the GPU's power draw, watts"),
    ("power_limit_watts", "the GPU's enforced power limit, watts"),
    ("temperature_celsius", "the GPU's core temperature, degrees Celsius"),
    ("ecc_uncorrected_errors", "uncorrected ECC errors since the driver loaded (volatile)"),
)


def render(gpus: list[dict], xid_lines: int | None, error: str | None, now: float) -> str:
    """The exposition: a family per figure, a sample per GPU that reads it."""
    out = Exposition()
    broken = [(g, field) for g in gpus for field in g.get("broken") or []]
    out.family("twinrail_gpu_smi_up", "gauge", "1 when nvidia-smi answered with every GPU's figures (0 also when a "
               "GPU reads as in error: twinrail_gpu_broken names it)", [({}, error is None and not broken)])
    if error is not None:
        out.family("twinrail_gpu_smi_error_info", "gauge", "what nvidia-smi said instead (1)",
                   [({"error": error[:200]}, 1)])
    labels = [{"gpu": g["gpu"], "bus_id": g["bus_id"], "name": g["name"]} for g in gpus]
    out.family("twinrail_gpu_info", "gauge", "a GPU nvidia-smi lists (1); memory=unified: no framebuffer, the node's "
               "memory is the GPU's", [(dict(lab, memory="unified" if g["memory_unified"] else "dedicated"), 1)
                                       for lab, g in zip(labels, gpus)])
    out.family("twinrail_gpu_broken", "gauge", "a field nvidia-smi reads as an error of the GPU ('GPU requires "
               "reset', 'Unknown Error'): the GPU is in error, not missing a figure (1)",
               [({"gpu": g["gpu"], "bus_id": g["bus_id"], "name": g["name"], "field": field.split(":", 1)[0],
                  "said": field.split(": ", 1)[1].strip("[]")}, 1) for g, field in broken])
    for key, help_text in FIGURES:
        out.family(f"twinrail_gpu_{key}", "gauge", help_text,
                   [(lab, g[key]) for lab, g in zip(labels, gpus) if g[key] is not None])
    if xid_lines is not None:
        out.family("twinrail_gpu_xid_errors", "gauge", "the kernel's NVRM Xid lines since boot (any GPU)",
                   [({}, xid_lines)])
    out.family("twinrail_gpu_checked_timestamp_seconds", "gauge", "when the GPUs were last read", [({}, round(now, 3))])
    return out.text()


def read_gpus(smi: str = "nvidia-smi", proc: str = "/proc") -> tuple[list[dict], str | None]:
    """(every GPU's telemetry, None), or ([], what nvidia-smi said) when it failed."""
    try:
        done = subprocess.run([smi, f"--query-gpu={','.join(QUERY)}", "--format=csv"], capture_output=True,
                              text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"{smi}: {exc}"
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        return [], f"exit {done.returncode}: {said[0] if said else '(nothing)'}"
    try:
        rows = parse_query(done.stdout)
    except QueryError as exc:
        return [], str(exc)
    return telemetry(rows, read_meminfo(proc)), None


def xid_lines() -> int | None:
    """The kernel's NVRM Xid lines since boot (journalctl's own match), None
    when the journal cannot be read."""
    done = subprocess.run(["journalctl", "-k", "-b", "--no-pager", "-o", "cat", "--grep", "NVRM: Xid"],
                          capture_output=True, text=True, check=False)
    # 1: nothing matched; other codes: no journal to read
    if done.returncode not in (0, 1):
        return None
    return sum(1 for line in done.stdout.splitlines() if "NVRM: Xid" in line)


def run_gpu(args) -> None:
    gpus, error = read_gpus(args.nvidia_smi)
    write_atomic(args.out, render(gpus, xid_lines(), error, time.time()))
