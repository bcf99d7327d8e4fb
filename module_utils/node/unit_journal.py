# -*- coding: utf-8 -*-
"""A unit's journal since it last started (its invocation id), for the
modules that judge what a service logged: rpc_transport_facts (each RPC
server's connections) and tensor_split_gate (llama-server's loader).

The journal is read as journald's records (``journalctl -o json``), so
systemd's own verdicts about the unit are known by their MESSAGE_ID and
fields (the ids of systemd's catalog, /usr/lib/systemd/catalog/
systemd.catalog), whatever words or language a systemd version prints;
the words are read too, for journals whose records carry no id (older
systemd) and for text an operator pastes. The kernel's out-of-memory
lines about the unit's cgroup are read beside the unit's own records: a
process of the unit killed by the OOM killer is a failure even where the
unit goes on (a child killed) or ends "successfully"."""

from __future__ import annotations

import json
import re
from typing import NamedTuple

# systemd's catalog ids (systemd.catalog: "A process of @UNIT@ unit has been
# killed by the OOM killer.", "Unit process exited", "Unit failed")
OOM_KILL_ID = "fe6faa94e7774663a0da52717891d8ef"
PROCESS_EXIT_ID = "98e322203f7a4ed290d09fe03c09fe15"
UNIT_FAILED_ID = "d9b373ed55a64feb8242e02dbe79a49c"

# systemd's words for a unit's process that ended badly (its journal, or
# `journalctl -u`), old and new spellings: "main process exited, code=dumped,
# status=11/SEGV", "Main process exited, code=exited, status=1/FAILURE",
# "Failed with result 'core-dump'.", "Unit x.service entered failed state.",
# "A process of this unit has been killed by the OOM killer."
_UNIT_FAILED = re.compile(r"(?:[Mm]ain process exited, code=(?:dumped|killed|exited), status=(?!0/)\S+"
                          r"|Failed with result '[^']+'|entered failed state"
                          r"|(?:process|processes) of this unit (?:has|have) been killed by the OOM killer)")
# the kernel's: "Out of memory: Killed process 1234 (llama-server) total-vm:...",
# "Memory cgroup out of memory: Killed process ..." and, naming the cgroup,
# "oom-kill:constraint=CONSTRAINT_MEMCG,...,task_memcg=/system.slice/x.service,task=...,pid=..."
_KERNEL_OOM = re.compile(r"(?:Memory cgroup out of memory|Out of memory): Killed process \d+ \([^)]*\)")
_OOM_CGROUP = re.compile(r"oom-kill:.*?task_memcg=(?P<cgroup>[^,\s]+)")
# journalctl's own words for a journal it could not show
_UNREADABLE = ("-- No entries --", "You are currently not seeing messages from other users",
               "No journal files were found")


class Journal(NamedTuple):
    """A unit's journal since its last start: its invocation id ('' when it
    was not started), journalctl's rc, the messages as text (one a line),
    journalctl's stderr, and the records (journald's fields)."""
    invocation: str
    rc: int
    text: str
    err: str
    records: list


def unit_state(module, unit: str) -> dict:
    """What systemd says of ``unit``'s current run: InvocationID,
    InactiveExitTimestamp (its start), ActiveState (none of them when it
    cannot say), with systemctl's ``rc`` and ``err``."""
    systemctl = module.get_bin_path("systemctl", True)
    rc, shown, err = module.run_command([systemctl, "show", "-p", "InvocationID", "-p", "InactiveExitTimestamp",
                                         "-p", "ActiveState", unit], environ_update={"LC_ALL": "C"})
    props = dict(line.split("=", 1) for line in shown.splitlines() if "=" in line) if rc == 0 else {}
    return dict({k: v.strip() for k, v in props.items()}, rc=rc, err=err)


def since_start(module, unit: str, fallback_lines: int | None = None, state: dict | None = None) -> Journal:
    """``unit``'s journal since its last start. A unit with no invocation id
    (not started) gives '' and, with ``fallback_lines``, its newest lines
    instead; without, nothing is read. The kernel's records since the unit
    left the inactive state come with it (its OOM kills). ``state``:
    unit_state's answer when the caller read it already."""
    journalctl = module.get_bin_path("journalctl", True)
    props = state if state is not None else unit_state(module, unit)
    rc, err = props.get("rc", 0), props.get("err", "")
    invocation = props.get("InvocationID", "").strip()
    if invocation:
        # the unit's own lines, or (+) systemd's about this invocation ("Main
        # process exited ..."), or (+) the kernel's since it started
        match = [f"_SYSTEMD_INVOCATION_ID={invocation}", "+", f"INVOCATION_ID={invocation}"]
        started = props.get("InactiveExitTimestamp", "").strip()
        if started:
            match += ["+", "_TRANSPORT=kernel", "--since", started]
    elif fallback_lines:
        match = ["-u", unit, "-n", str(fallback_lines)]
    else:
        return Journal("", rc, "", err, [])
    rc, out, err = module.run_command([journalctl, "--no-pager", "-o", "json", *match],
                                      environ_update={"LC_ALL": "C"})
    if rc != 0 and "--since" in match:
        # a start time this journalctl cannot parse: the unit's own records alone
        match = match[:match.index("+", 2)]
        rc, out, err = module.run_command([journalctl, "--no-pager", "-o", "json", *match],
                                          environ_update={"LC_ALL": "C"})
    records = parse_records(out)
    unit_records = [r for r in records if r.get("_TRANSPORT") != "kernel" or kernel_oom_of(r, records, unit)]
    return Journal(invocation, rc, messages(unit_records) if records else out, err, unit_records)


def parse_records(text: str) -> list[dict]:
    """journalctl -o json's lines as dicts, MESSAGE as text (journald gives
    a message that is not UTF-8 as a list of bytes); other lines skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        message = record.get("MESSAGE")
        if isinstance(message, list):
            record["MESSAGE"] = bytes(message).decode(errors="replace")
        elif message is None:
            record["MESSAGE"] = ""
        out.append(record)
    return out


def messages(records: list[dict]) -> str:
    return "\n".join(str(r.get("MESSAGE", "")) for r in records)


def kernel_oom_of(record: dict, records: list[dict], unit: str) -> bool:
    """Whether a kernel record is an OOM kill in ``unit``'s cgroup: the
    oom-kill line naming it, or the "Killed process" line right after one."""
    message = str(record.get("MESSAGE", ""))
    cgroup = _OOM_CGROUP.search(message)
    if cgroup:
        return cgroup.group("cgroup").rstrip("/").endswith("/" + unit)
    if _KERNEL_OOM.search(message):
        index = records.index(record)
        before = [r for r in records[:index] if r.get("_TRANSPORT") == "kernel"][-3:]
        return any(kernel_oom_of(r, records, unit) for r in before if _OOM_CGROUP.search(str(r.get("MESSAGE", ""))))
    return False


def record_failures(records: list[dict]) -> list[str]:
    """systemd's and the kernel's records saying a process of the unit
    crashed, failed or was killed for memory, by their ids and fields
    where they have them, else by their words; as written, newest last."""
    out = []
    for record in records:
        message = str(record.get("MESSAGE", "")).strip()
        ident = record.get("MESSAGE_ID", "")
        if ident == OOM_KILL_ID:
            out.append(message)
        elif ident == PROCESS_EXIT_ID:
            if record.get("EXIT_CODE") not in (None, "exited") or str(record.get("EXIT_STATUS", "0")) != "0":
                out.append(message)
        elif ident == UNIT_FAILED_ID:
            out.append(message + (f" (result: {record['UNIT_RESULT']})" if record.get("UNIT_RESULT") and
                                  record["UNIT_RESULT"] not in message else ""))
        elif record.get("_TRANSPORT") == "kernel" and (_KERNEL_OOM.search(message) or _OOM_CGROUP.search(message)):
            said = _KERNEL_OOM.search(message)
            if said:
                out.append(f"kernel: {said.group(0)}")
        elif not ident and _UNIT_FAILED.search(message):
            out.append(message)
    return out


def unit_failures(text: str) -> list[str]:
    """systemd's and the kernel's lines saying the unit's process crashed,
    failed or was killed for memory, as written (the newest last): from
    journalctl -o json's records where the text is that, else from its
    words (journalctl -o cat, -u, or systemctl status)."""
    records = parse_records(text)
    if records:
        return record_failures(records)
    return [line.strip() for line in text.splitlines() if _UNIT_FAILED.search(line) or _KERNEL_OOM.search(line)]


def journal_problem(text: str) -> str | None:
    """journalctl's sentence when it showed nothing of the unit (no
    entries, a journal this user may not read), quoted; None otherwise."""
    for line in text.splitlines():
        if any(words in line for words in _UNREADABLE):
            return f"journalctl: {line.strip()}"
    return None
