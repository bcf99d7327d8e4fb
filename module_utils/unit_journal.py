# -*- coding: utf-8 -*-
"""A unit's journal since it last started (its invocation id), for the
modules that judge what a service logged: rpc_transport_facts (each RPC
server's connections) and tensor_split_gate (llama-server's loader)."""

from __future__ import annotations

import re

# systemd's words for a unit's process that ended badly (its journal, or
# `journalctl -u`), old and new spellings: "main process exited, code=dumped,
# status=11/SEGV", "Main process exited, code=exited, status=1/FAILURE",
# "Failed with result 'core-dump'.", "Unit x.service entered failed state."
_UNIT_FAILED = re.compile(r"(?:[Mm]ain process exited, code=(?:dumped|killed|exited), status=(?!0/)\S+"
                          r"|Failed with result '[^']+'|entered failed state)")
# journalctl's own words for a journal it could not show
_UNREADABLE = ("-- No entries --", "You are currently not seeing messages from other users",
               "No journal files were found")


def since_start(module, unit: str, fallback_lines: int | None = None) -> tuple[str, int, str, str]:
    """(invocation id, rc, journal text, stderr) of ``unit`` since its last
    start. A unit with no invocation id (not started) gives '' and, with
    ``fallback_lines``, its newest lines instead; without, nothing is read."""
    systemctl, journalctl = module.get_bin_path("systemctl", True), module.get_bin_path("journalctl", True)
    rc, invocation, err = module.run_command([systemctl, "show", "-p", "InvocationID", "--value", unit])
    invocation = invocation.strip() if rc == 0 else ""
    if invocation:
        # the unit's own lines, or (+) systemd's about this invocation ("Main process exited ...")
        match = [f"_SYSTEMD_INVOCATION_ID={invocation}", "+", f"INVOCATION_ID={invocation}"]
    elif fallback_lines:
        match = ["-u", unit, "-n", str(fallback_lines)]
    else:
        return "", rc, "", err
    rc, text, err = module.run_command([journalctl, "--no-pager", "-o", "cat", *match])
    return invocation, rc, text, err


def unit_failures(text: str) -> list[str]:
    """systemd's lines saying the unit's process crashed or failed, as
    written (the newest last)."""
    return [line.strip() for line in text.splitlines() if _UNIT_FAILED.search(line)]


def journal_problem(text: str) -> str | None:
    """journalctl's sentence when it showed nothing of the unit (no
    entries, a journal this user may not read), quoted; None otherwise."""
    for line in text.splitlines():
        if any(words in line for words in _UNREADABLE):
            return f"journalctl: {line.strip()}"
    return None
