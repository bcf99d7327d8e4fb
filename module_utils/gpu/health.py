# -*- coding: utf-8 -*-
"""Is a GPU well: what nvidia-smi -q says of its memory's health (ECC
mode and errors, retired pages, remapped rows), the kernel's Xid lines
about it, and what nvidia-smi's own failure means. A GPU that needs a
reset or should be retired is refused by preflight's GPU gate and named
by `twinrail status`; one whose errors are the application's is a
warning. Pure Python, tested on real captures (tests/fixtures/gpu-health/).

What the counters mean on real hardware (NVIDIA's "Xid Errors" and
"GPU Memory Error Management" documents):
- an uncorrectable ECC error since the driver loaded (volatile): the
  GPU's memory returned bad data; the pages or rows are retired or
  remapped at the next reset; until then the GPU is not to be trusted;
- pages pending retirement (Kepler to Turing) or a row remap pending
  (Ampere and newer): a reset of the GPU (or a reboot) applies it;
- a row remapping failure: the bank has no spare rows left: the GPU
  should be replaced;
- the aggregate counters are the GPU's lifetime: a past error, already
  handled, is a warning, not a refusal."""

from __future__ import annotations

import re

# nvidia-smi's words for a value it could not read: the GPU is in error
_UNREADABLE = ("Unknown Error", "ERR!", "requires reset", "GPU is lost")
# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=llama-server, GPU has fallen off the bus."
# older drivers: "NVRM: Xid (0000:03:00): 13, 0002 00000000 ..." (no "PCI:", no pid)
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})(?:\.\d)?\): "
                  r"(?P<xid>\d+),\s*(?P<rest>.*)$")
# the Xids after which a GPU needs a reset, a reboot or a replacement
# (NVIDIA's Xid catalog): double-bit ECC (48), an internal micro-controller
# halt (61, 62), a failure to record a retired page or remapped row (64),
# an NVLink error (74), fallen off the bus (79), a high single-bit ECC rate
# (92), an uncontained ECC error (95), the GSP firmware not answering
# (119, 120), an unrecovered ECC error (140), and the driver's own
# "recovery action" (154: reset or reboot required). The others (13, 31,
# 43, 45, 63, 94, ...) are an application's fault, or already contained.
XID_REFUSED = {48: "double-bit ECC error", 61: "internal micro-controller breakpoint",
               62: "internal micro-controller halt", 64: "ECC page retirement or row remapping failure",
               74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
               95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
               140: "unrecovered ECC error", 154: "GPU recovery action changed"}


def _count(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip()
    return int(value) if value.isdigit() else None


def unreadable(value: str | None) -> bool:
    return bool(value) and any(words in value for words in _UNREADABLE)


def health_of(tree: dict) -> dict:
    """One GPU's health from its nvidia-smi -q block ({'Section/Key':
    value}, gpu_facts' reading): ECC mode, uncorrectable errors volatile
    and aggregate (DRAM and SRAM, or the older Double Bit totals), retired
    pages (single- and double-bit counts, pending), remapped rows (uncorrectable,
    pending, failure), and ``unread``: the fields nvidia-smi could not
    read, as 'field: value'."""
    def summed(scope: str) -> int | None:
        keys = [k for k in tree if k.startswith(f"ECC Errors/{scope}/")
                and ("Uncorrectable" in k and "Sources" not in k or k.endswith("Double Bit/Total"))]
        counts = [_count(tree[k]) for k in keys]
        return sum(c for c in counts if c is not None) if any(c is not None for c in counts) else None

    pending = tree.get("Retired Pages/Pending Page Blacklist", tree.get("Retired Pages/Pending"))
    health = {
        "ecc_mode": tree.get("ECC Mode/Current"),
        "ecc_pending_mode": tree.get("ECC Mode/Pending"),
        "volatile_uncorrectable": summed("Volatile"),
        "aggregate_uncorrectable": summed("Aggregate"),
        "retired_single_bit": _count(tree.get("Retired Pages/Single Bit ECC",
                                              tree.get("Retired Pages/Single Bit ECC/Count"))),
        "retired_double_bit": _count(tree.get("Retired Pages/Double Bit ECC",
                                              tree.get("Retired Pages/Double Bit ECC/Count"))),
        "retired_pending": {"Yes": True, "No": False}.get((pending or "").strip()),
        "remapped_uncorrectable": _count(tree.get("Remapped Rows/Uncorrectable Error")),
        "remap_pending": {"Yes": True, "No": False}.get(tree.get("Remapped Rows/Pending", "").strip()),
        "remap_failure": {"Yes": True, "No": False}.get(tree.get("Remapped Rows/Remapping Failure Occurred",
                                                                 "").strip()),
    }
    health["unread"] = [f"{key}: {value}" for key, value in tree.items()
                        if key.split("/")[0] in ("ECC Mode", "ECC Errors", "Retired Pages", "Remapped Rows")
                        and unreadable(value)]
    return health


def health_problems(label: str, health: dict) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for one GPU, each a sentence starting with
    ``label`` (node, GPU index, name, bus id), naming the counter."""
    refused, warned = [], []
    if health.get("unread"):
        refused.append(f"{label}: nvidia-smi cannot read its memory's health ({'; '.join(health['unread'][:3])}): "
                       f"a GPU in error; reset it (nvidia-smi -r) or reboot the node")
    volatile = health.get("volatile_uncorrectable")
    if volatile:
        refused.append(f"{label}: {volatile} uncorrectable ECC error(s) since the driver loaded (ECC Errors / "
                       f"Volatile): its memory returned bad data; reset the GPU or reboot, and replace it if "
                       f"they come back")
    if health.get("retired_pending"):
        refused.append(f"{label}: memory pages are waiting to be retired (Retired Pages / Pending: Yes): "
                       f"reset the GPU or reboot to retire them")
    if health.get("remap_failure"):
        refused.append(f"{label}: a row remapping failed (Remapped Rows / Remapping Failure Occurred: Yes): "
                       f"a memory bank has no spare rows left; the GPU should be replaced")
    if health.get("remap_pending"):
        refused.append(f"{label}: a row remap is pending (Remapped Rows / Pending: Yes, "
                       f"{health.get('remapped_uncorrectable') or 0} row(s) for uncorrectable errors): reset the "
                       f"GPU or reboot to apply it")
    aggregate = health.get("aggregate_uncorrectable")
    if aggregate and not volatile:
        warned.append(f"{label}: {aggregate} uncorrectable ECC error(s) in its lifetime (ECC Errors / Aggregate), "
                      f"none since the driver loaded")
    retired = (health.get("retired_single_bit") or 0) + (health.get("retired_double_bit") or 0)
    if retired:
        warned.append(f"{label}: {retired} memory page(s) retired (Retired Pages: single-bit "
                      f"{health.get('retired_single_bit') or 0}, double-bit {health.get('retired_double_bit') or 0}): "
                      f"handled; a GPU that keeps retiring pages should be replaced")
    mode, wanted = health.get("ecc_mode"), health.get("ecc_pending_mode")
    if mode in ("Enabled", "Disabled") and wanted in ("Enabled", "Disabled") and mode != wanted:
        warned.append(f"{label}: ECC mode is {mode} and becomes {wanted} at the next reset (ECC Mode / Pending)")
    return refused, warned


def parse_xids(text: str) -> list[dict]:
    """The kernel's Xid lines (dmesg, journalctl -k) in order: bus (as
    bus_key spells it), xid, the line's own text after the number, and
    the whole line."""
    out = []
    for line in text.splitlines():
        match = _XID.search(line)
        if match:
            parts = match.group("bus").lower().split(":")
            out.append({"bus": f"{parts[0][-4:].rjust(4, '0')}:{parts[1]}:{parts[2]}.0", "xid": int(match.group("xid")),
                        "text": match.group("rest").strip(), "line": line[match.start():].strip()})
    return out


# NVLink's own Xids on recent GPUs (NVIDIA's Xid catalogue: 144 SAW, 145 RLW,
# 146 TLW, 147 TREX, 148 NVLPW_CTRL, 149 NETIR, 150 MSE); each line says its
# severity ("Fatal" or "Nonfatal"): a fatal one needs the GPU reset, a
# nonfatal one was contained and is counted
XID_NVLINK = {144: "NVLink SAW error", 145: "NVLink RLW error", 146: "NVLink TLW error", 147: "NVLink TREX error",
              148: "NVLink NVLPW_CTRL error", 149: "NVLink NETIR error", 150: "NVLink MSE error"}
# "45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149"
_CAUSE = re.compile(r"caused by previous Xid (?P<xid>\d+)")
_NONFATAL = re.compile(r"\bNonfatal\b", re.IGNORECASE)


def xid_severity(xid: dict, xids: list[dict] | None = None) -> tuple[str, str]:
    """("refused"|"warned", why) for one Xid line, by NVIDIA's catalogue:
    the Xids after which a GPU needs a reset, NVLink's by the severity its
    line states, and a line that names the Xid that caused it (an Xid 45's
    "caused by previous Xid 149") by that cause, read from the same bus's
    line where the log has it."""
    number = xid["xid"]
    if number in XID_REFUSED:
        return "refused", XID_REFUSED[number]
    if number in XID_NVLINK:
        if _NONFATAL.search(xid["text"]):
            return "warned", f"{XID_NVLINK[number]}, nonfatal (contained; count them)"
        return "refused", f"{XID_NVLINK[number]}, fatal"
    cause = _CAUSE.search(xid["text"])
    if cause and int(cause.group("xid")) != number:
        number = int(cause.group("xid"))
        earlier = [x for x in xids or [] if x["bus"] == xid["bus"] and x["xid"] == number]
        if earlier:
            verdict, why = xid_severity(earlier[-1])
        elif number in XID_NVLINK:  # its own line, with its severity, is not in this log
            verdict, why = "refused", f"{XID_NVLINK[number]}, its own line not in the log"
        else:
            verdict, why = xid_severity({"xid": number, "text": ""})
        return verdict, f"caused by Xid {number} ({why})"
    return "warned", "an application's fault or a contained error"


def xid_problems(host: str, xids: list[dict], labels: dict) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for a node's Xid lines since boot, one per GPU
    and Xid (the newest line quoted). ``labels``: bus -> the GPU's label;
    an Xid of a bus nvidia-smi no longer lists names the bus."""
    newest = {}
    for xid in xids:
        newest[(xid["bus"], xid["xid"])] = xid
    refused, warned = [], []
    for (bus, number), xid in sorted(newest.items()):
        count = sum(1 for x in xids if (x["bus"], x["xid"]) == (bus, number))
        label = labels.get(bus) or f"{host}: the GPU at {bus} (nvidia-smi does not list it)"
        said = f"{label}: Xid {number} in the kernel log since boot ({count}x, newest: {xid['line']})"
        verdict, why = xid_severity(xid, xids)
        if verdict == "refused":
            refused.append(f"{said}: {why}; the GPU needs a reset or a reboot (and a replacement if it comes back)")
        else:
            warned.append(f"{said}: {why}")
    return refused, warned


def node_health(host: str, facts: dict) -> tuple[list[str], list[str]]:
    """(refusals, warnings) for one node's GPUs: each GPU's -q health
    (``facts['detail']['gpus'][i]['health']``) and the node's Xid lines
    (``facts['xids']``), each sentence naming node, GPU index, name and
    bus id."""
    refused, warned = [], []
    labels = {}
    for gpu in (facts.get("detail") or {}).get("gpus") or []:
        label = f"{host}: GPU {gpu['index']} ({gpu['name']}, {gpu['bus_id']})"
        parts = gpu["bus_id"].lower().split(":")
        labels[f"{parts[0][-4:].rjust(4, '0')}:{parts[-2]}:{parts[-1]}"] = label
        more = health_problems(label, gpu.get("health") or {})
        refused += more[0]
        warned += more[1]
    more = xid_problems(host, facts.get("xids") or [], labels)
    return refused + more[0], warned + more[1]


# "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error";
# newer drivers name the GPU's index too ("for GPU1: 0000:34:00.0: ..."),
# some print "gpu" or no space before the bus id
# the words nvidia-smi names a GPU that does not answer with (gpu_facts reads them in its table too)
HANDLE_WORDS = r"Unable to (?:determine|detect) the device handle"
_HANDLE = re.compile(HANDLE_WORDS + r" for GPU\s*(?:\d+:\s*)?"
                     r"(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d): (?P<why>[^\n]+)", re.IGNORECASE)


def quote_output(text: str, limit: int = 300, keep: tuple[str, ...] = ()) -> str:
    """A tool's output on one line, its lines joined by " / ": whole when
    short, else the lines that contain one of ``keep`` (what names the
    failure) followed by the tail that fits."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    joined = " / ".join(lines)
    if len(joined) <= limit:
        return joined or "(no output)"
    named = [line for line in lines if any(k.lower() in line.lower() for k in keep)]
    head = " / ".join(named)
    room = max(limit - len(head) - 5, 80)
    return (head + " / ... " if head else "... ") + joined[-room:]


def smi_failure(rc: int, text: str, module_loaded: bool) -> str:
    """What nvidia-smi's failure means, in words that send the operator to
    the right place: one GPU that did not answer (by its bus id), no GPU
    the loaded driver can drive, no driver, or a driver upgraded under
    the running one."""
    said = quote_output(text, keep=("device handle",))
    handles = list(_HANDLE.finditer(text))
    if handles:
        buses = ", ".join(f"{m.group('bus')} ({m.group('why').strip()})" for m in handles)
        return (f"nvidia-smi exited {rc}: {said}: the driver answered but the GPU at {buses} did not: it has "
                f"fallen off the bus or hung; reseat it, reset it (nvidia-smi -r -i <bus id>) or power-cycle the "
                f"node, and read the kernel log's Xid lines for that bus")
    if "No devices were found" in text:
        if module_loaded:
            return (f"nvidia-smi exited {rc}: {said}: the nvidia kernel module is loaded but drives no GPU: check "
                    f"that lspci lists the card, its power cables, the BIOS (Above 4G decoding, Resizable BAR) and "
                    f"the kernel log's NVRM lines")
        return f"nvidia-smi exited {rc}: {said}: the nvidia kernel module is not loaded (modprobe nvidia)"
    if "Driver/library version mismatch" in text:
        return (f"nvidia-smi exited {rc}: {said}: the loaded kernel module is not the installed driver's (a driver "
                f"upgraded without a reboot): reboot the node, or unload and reload the nvidia modules")
    return f"nvidia-smi exited {rc}: {said} (is the driver loaded?)"
