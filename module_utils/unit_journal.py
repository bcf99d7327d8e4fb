# -*- coding: utf-8 -*-
"""A unit's journal since it last started (its invocation id), for the
modules that judge what a service logged: rpc_transport_facts (each RPC
server's connections) and tensor_split_gate (llama-server's loader)."""

from __future__ import annotations


def since_start(module, unit: str, fallback_lines: int | None = None) -> tuple[str, int, str, str]:
    """(invocation id, rc, journal text, stderr) of ``unit`` since its last
    start. A unit with no invocation id (not started) gives '' and, with
    ``fallback_lines``, its newest lines instead; without, nothing is read."""
    systemctl, journalctl = module.get_bin_path("systemctl", True), module.get_bin_path("journalctl", True)
    rc, invocation, err = module.run_command([systemctl, "show", "-p", "InvocationID", "--value", unit])
    invocation = invocation.strip() if rc == 0 else ""
    if invocation:
        match = [f"_SYSTEMD_INVOCATION_ID={invocation}"]
    elif fallback_lines:
        match = ["-u", unit, "-n", str(fallback_lines)]
    else:
        return "", rc, "", err
    rc, text, err = module.run_command([journalctl, "--no-pager", "-o", "cat", *match])
    return invocation, rc, text, err
