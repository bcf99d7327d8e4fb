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

from ansible.module_utils.gpu.cuda_code import compute_capability
from ansible.module_utils.gpu.health import HANDLE_WORDS, health_of, quote_output

# the table's header: "NVIDIA-SMI 565.57.01  Driver Version: 565.57.01  CUDA
# Version: 12.7"; drivers from 610 on say "KMD Version:" and "CUDA UMD Version:"
_VERSIONS = re.compile(r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?:Driver|KMD) Version:\s+(?P<driver>\S+)\s+"
                       r"CUDA (?:UMD )?Version:\s+(?P<cuda>\S+)")
# first line of a GPU's block: "|   0  NVIDIA GB10      Off |   0000000F:01:00.0 Off |   N/A |"
# (Windows drivers print the driver model, WDDM or TCC, where Linux's print persistence)
_GPU = re.compile(r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<persistence>On|Off|WDDM|TCC)\s*\|\s*(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:"
                  r"[0-9A-Fa-f]{2}\.\d)\s+(?P<disp>On|Off)\s*\|")
# any row that opens a GPU's block, read or not: "|   3  ..." (a MIG device row has 4 numbers and no bus id)
_GPU_ROW = re.compile(r"^\|\s+\d+\s+\S.*\|.*\|.*\|\s*$")
_MEMORY = re.compile(r"(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB")
_UTIL = re.compile(r"\|\s*(?P<util>\d+)%\s+\S+\s*\|\s*$")
# "Pwr:Usage/Cap": "152W / 700W" (a GB10: "11W / N/A", no cap)
_POWER = re.compile(r"(?P<draw>\d+(?:\.\d+)?)W\s*/\s*(?:(?P<cap>\d+(?:\.\d+)?)W|N/A)")
_MIG = re.compile(r"\|\s*(?P<mig>Enabled|Disabled|N/A)\s*\|\s*$")
UNAVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "")
# The GPUs whose memory is the CPU's (unified): nvidia-smi's "Not Supported"
# is their reading. On any other product the same words, or "N/A", mean
# nvidia-smi could not read the memory, a problem, never unified memory.
UNIFIED_MEMORY_PRODUCTS = ("NVIDIA GB10",)
# what nvidia-smi prints instead of its table when it cannot work
_FAILURES = ("NVIDIA-SMI has failed", "No devices were found", "Failed to initialize NVML",
             "Unable to determine the device handle", "GPU is lost", "Unknown Error")


_HANDLE_WORDS = re.compile(HANDLE_WORDS, re.IGNORECASE)


class ParseError(ValueError):
    """Not the nvidia-smi output the parser expects."""


# what nvidia-smi says for a unified-memory GPU's framebuffer: "Not
# Supported" in its table, "[N/A]" in the query form (captures of both)
# and "N/A" in -q's FB Memory Usage (a GB10 capture, nvtop's pull request 466)
UNIFIED_READINGS = {"table": ("Not Supported",), "query": ("[N/A]", "[Not Supported]"), "detail": ("N/A", "Not Supported")}


def unified_memory(name: str, reading: str, form: str = "table") -> bool:
    """A GPU's memory is unified with the CPU's only where both show it:
    a product known to be built so, and the reading nvidia-smi gives such a
    product in that form; a missing figure alone never says so."""
    return name in UNIFIED_MEMORY_PRODUCTS and reading.strip() in UNIFIED_READINGS[form]


def _quote(text: str, limit: int = 300) -> str:
    return quote_output(text, limit, _FAILURES)


def has_table(text: str) -> bool:
    """nvidia-smi printed its table (the header with its versions), in
    either driver's words."""
    return _VERSIONS.search(text) is not None


def parse_table(text: str) -> dict:
    """nvidia-smi's default table: versions, and per GPU index, name,
    persistence mode, bus id, memory (``memory``: ``discrete`` with its
    figures, ``unified`` with none, or ``unread``), MIG mode and use, power
    draw and limit (a GB10's limit reads N/A: None), and
    ``problems``: one sentence per GPU nvidia-smi could not read, quoting
    it. Every GPU row of a multi-GPU table is read or named."""
    versions = _VERSIONS.search(text)
    if not versions:
        said = [f for f in _FAILURES if f in text]
        raise ParseError(f"nvidia-smi printed no table (no 'NVIDIA-SMI ... Driver Version: ... CUDA Version: ...' "
                         f"or 'KMD Version: ... CUDA UMD Version: ...' header){': it failed' if said else ''}: "
                         f"{_quote(text)}")
    lines = text.splitlines()
    gpus, problems = [], []
    for i, line in enumerate(lines):
        if _HANDLE_WORDS.search(line) or "GPU is lost" in line:
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
        power = _POWER.search(detail)
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
            "power_watts": float(power.group("draw")) if power else None,
            "power_limit_watts": float(power.group("cap")) if power and power.group("cap") else None,
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


def _fields(header: str) -> list[str]:
    """The field names of a --format=csv header, their units ("[MiB]") dropped."""
    return [re.sub(r"\s*\[.*\]$", "", name.strip()) for name in header.split(",")]


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
        fields = _fields(header)
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


CAPS_QUERY = ("index", "compute_cap")


def compute_caps(text: str) -> dict:
    """``nvidia-smi --query-gpu=index,compute_cap --format=csv`` (with its
    header; any query holding both fields reads the same): {GPU index:
    "90"}, None for a GPU that did not say. nvidia-smi's failure, such as
    'Field "compute_cap" is not a valid field to query.' from a driver
    older than 510, is a ParseError quoting it, never an empty answer."""
    lines = [line for line in text.splitlines() if line.strip() and "nvidia-smi" not in line]
    if not set(CAPS_QUERY) <= set(_fields(lines[0]) if lines else []):
        raise ParseError(f"no {' and '.join(CAPS_QUERY)} columns: {_quote(text)}")
    return {int(row["index"]): compute_capability(row["compute_cap"]) for row in parse_query(text)}


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


# nvidia-smi -q: "GPU 00000000:18:00.0" opens a GPU's block; below it
# "Key : Value" lines and section titles, four spaces a level.
_DETAIL_GPU = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")
_DETAIL_LINE = re.compile(r"^(?P<indent> *)(?P<key>[^:]+?)\s*(?::\s?(?P<value>.*?))?\s*$")


def bus_key(bus_id: str) -> str:
    """One spelling of a PCI address for every nvidia-smi layout:
    00000000:18:00.0, 0000:18:00.0 and 18:00.0 all read '0000:18:00.0'."""
    parts = bus_id.strip().lower().split(":")
    domain = parts[0][-4:] if len(parts) == 3 else "0000"
    return f"{domain.rjust(4, '0')}:{parts[-2]}:{parts[-1]}"


def _tree(lines: list[str]) -> dict:
    """A GPU block of nvidia-smi -q as {'Section/Sub/Key': value}."""
    out, path = {}, []
    for line in lines:
        if not line.strip():
            continue
        match = _DETAIL_LINE.match(line)
        if not match:
            continue
        level = len(match.group("indent")) // 4 - 1
        path = path[:max(level, 0)]
        key = match.group("key").strip()
        if match.group("value") is None:
            path.append(key)
        else:
            out["/".join(path + [key])] = match.group("value").strip()
    return out


def _number(text: str | None, suffix: str = "") -> int | None:
    if text is None:
        return None
    match = re.fullmatch(r"(\d+)\s*" + re.escape(suffix), text.strip()) if suffix else re.fullmatch(r"\d+", text.strip())
    return int(match.group(1) if suffix else match.group(0)) if match else None


def parse_detail(text: str) -> dict:
    """nvidia-smi -q: the versions, the count nvidia-smi says is attached,
    and per GPU (in its order, which is the PCI bus order nvidia-smi's
    indexes follow): index, name, bus_id, MIG mode, framebuffer memory
    (``memory``: discrete with ``memory_total_mib``, unified, or unread,
    as parse_table decides) and the PCIe link (``pcie``: gen_max, the
    most the link can train to, gen_current, gen_device_max, gen_host_max,
    width_max, width_current; None where nvidia-smi does not say) and
    ``health`` (gpu_health.health_of: ECC, retired pages, remapped rows)."""
    if "NVSMI LOG" not in text and "Attached GPUs" not in text:
        said = [f for f in _FAILURES if f in text]
        raise ParseError(f"nvidia-smi -q printed no log (no 'Attached GPUs'){': it failed' if said else ''}: "
                         f"{_quote(text)}")
    lines = text.splitlines()
    head = _tree([line for line in lines[:20] if not line.startswith(" ")])
    starts = [i for i, line in enumerate(lines) if _DETAIL_GPU.match(line)]
    gpus, problems = [], []
    for n, start in enumerate(starts):
        block = lines[start + 1:starts[n + 1] if n + 1 < len(starts) else len(lines)]
        tree = _tree(block)
        name = tree.get("Product Name", "")
        total = tree.get("FB Memory Usage/Total", "")
        mib = _number(total, "MiB")
        link = "PCI/GPU Link Info/"
        gpu = {
            "index": n, "name": name, "bus_id": _DETAIL_GPU.match(lines[start]).group("bus"),
            "mig": {"Enabled": True, "Disabled": False}.get(tree.get("MIG Mode/Current", "")),
            "memory": "discrete" if mib is not None else "unified" if unified_memory(name, total, "detail") else "unread",
            "memory_total_mib": mib,
            "pcie": {
                "gen_max": _number(tree.get(link + "PCIe Generation/Max")),
                "gen_current": _number(tree.get(link + "PCIe Generation/Current")),
                "gen_device_max": _number(tree.get(link + "PCIe Generation/Device Max")),
                "gen_host_max": _number(tree.get(link + "PCIe Generation/Host Max")),
                "width_max": _number(tree.get(link + "Link Width/Max"), "x"),
                "width_current": _number(tree.get(link + "Link Width/Current"), "x"),
            },
            "health": health_of(tree),
        }
        gpus.append(gpu)
        if gpu["memory"] == "unread":
            problems.append(f"GPU {n} ({name}, {gpu['bus_id']}): nvidia-smi -q reads its framebuffer memory as "
                            f"{total or 'nothing'!r}, not a figure")
    attached = _number(head.get("Attached GPUs"))
    if attached is not None and attached != len(gpus):
        problems.append(f"nvidia-smi -q says {attached} GPU(s) attached and describes {len(gpus)}")
    return {"driver_version": _head_version(head, "KMD Version", "Driver Version"),
            "cuda_version": _head_version(head, "CUDA UMD Version", "CUDA Version"),
            "attached": attached, "gpus": gpus, "problems": problems}


def _head_version(head: dict, new: str, old: str) -> str | None:
    """A version of -q's head by its new key, else its old one without the
    note newer drivers add ("616.92 [Deprecated; ... Use KMD Version instead]")."""
    value = head.get(new) or head.get(old)
    return value.split("[", 1)[0].strip() or None if value else None


def gpu_node_problems(host: str, facts: dict, expected_count: int | None = None, mig_allowed: bool = False,
                      min_width: int | None = None) -> list[str]:
    """One node's GPUs against what the inventory expects, one sentence a
    problem naming the node and the GPU (index, name, bus id). ``facts``:
    gpu_facts' reading, parse_table's with nvidia-smi -q's (parse_detail)
    as ``detail`` where it was read.

    - every GPU visible: ``expected_count`` of them (when set);
    - no MIG unless ``mig_allowed`` (from -q, else from the table);
    - each PCIe link at its maximum (from -q): the width it trained at is
      the card's widest (or at least ``min_width``, for a board that wires
      a slot narrower on purpose), and the generation the link can reach
      (nvidia-smi's Max) is the card's own (Device Max): a slot or riser of
      an older generation is named. The current generation is not judged:
      an idle GPU lowers it to save power (a real L4 at Gen1 of 4)."""
    problems = []
    detail = facts.get("detail") or {}
    table = {bus_key(gpu["bus_id"]): gpu for gpu in facts.get("gpus") or []}
    gpus = detail.get("gpus") or facts.get("gpus") or []
    expected_count = None if _unset(expected_count) else int(expected_count)
    min_width = None if _unset(min_width) else int(min_width)
    if expected_count is not None and len(gpus) != expected_count:
        problems.append(f"{host}: {len(gpus)} GPU(s) visible ({', '.join(g['bus_id'] for g in gpus) or 'none'}), "
                        f"expected {expected_count} (twinrail_gpu_count): a GPU lost or unseated, or hidden "
                        f"by CUDA_VISIBLE_DEVICES or a container")
    own = [gpu for gpu in gpus if gpu.get("memory") == "discrete"]
    if expected_count is None and len(own) > 1:
        problems.append(f"{host}: {len(own)} GPUs with memory of their own and twinrail_gpu_count unset: set "
                        f"twinrail_gpu_count: {len(own)} (each GPU one device of the split; unset, every RPC server "
                        f"would expose them all under one proportion)")
    for gpu in gpus:
        label = f"{host}: GPU {gpu['index']} ({gpu['name']}, {gpu['bus_id']})"
        mig = gpu.get("mig")
        if mig is None:
            mig = table.get(bus_key(gpu["bus_id"]), {}).get("mig")
        if mig and not mig_allowed:
            problems.append(f"{label}: MIG mode is enabled; llama.cpp gets one slice, not the GPU "
                            f"(nvidia-smi -i {gpu['index']} -mig 0, or set twinrail_gpu_mig: true)")
        # a unified-memory GPU (GB10) sits on the CPU's die, not in a slot:
        # its link figures are no slot's, and are not judged
        pcie = {} if gpu.get("memory") == "unified" else gpu.get("pcie") or {}
        width, widest = pcie.get("width_current"), pcie.get("width_max")
        wanted = int(min_width) if min_width else widest
        if width is not None and wanted is not None and width < wanted:
            problems.append(f"{label}: PCIe link x{width}, required x{wanted} (the card is x{widest}"
                            f"{'; twinrail_gpu_pcie_min_width' if min_width else ''}): a slot wired or trained "
                            f"narrower, a riser, or a card not seated")
        reach, own = pcie.get("gen_max"), pcie.get("gen_device_max")
        if reach is not None and own is not None and reach < own:
            problems.append(f"{label}: PCIe link reaches Gen{reach} at most, the card is Gen{own} (host side "
                            f"Gen{pcie.get('gen_host_max')}): a slot, riser or BIOS setting of an older generation")
    return problems


PCIE_WIDTHS = (1, 2, 4, 8, 16, 32)


def _unset(value) -> bool:
    return value is None or value == ""


def gpu_settings_problems(host: str, want: dict) -> list[str]:
    """The per-GPU settings of one host, read as the gate reads them: one
    sentence per bad value, naming the variable, the host and the form."""
    problems = []
    count = want.get("count")
    if not _unset(count) and (isinstance(count, bool) or not str(count).isdigit() or int(count) < 1):
        problems.append(f"{host}: twinrail_gpu_count: expected a whole number of GPUs, 1 or more (or unset), "
                        f"got {count!r}")
    width = want.get("min_width")
    if not _unset(width) and (isinstance(width, bool) or not str(width).isdigit() or int(width) not in PCIE_WIDTHS):
        problems.append(f"{host}: twinrail_gpu_pcie_min_width: expected a PCIe width, one of "
                        f"{', '.join(map(str, PCIE_WIDTHS))} (or unset), got {width!r}")
    mig = want.get("mig")
    if not _unset(mig) and not isinstance(mig, bool) and str(mig).lower() not in ("true", "false", "yes", "no"):
        problems.append(f"{host}: twinrail_gpu_mig: expected true or false, got {mig!r}")
    return problems
