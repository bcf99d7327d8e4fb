# -*- coding: utf-8 -*-
"""sysctl keys and values: paths under /proc/sys and value comparison."""

from __future__ import annotations

import os

PROC_SYS = "/proc/sys"


def key_path(key: str, root: str = PROC_SYS) -> str:
    """net.ipv4.conf.ens1f0np0.arp_ignore -> /proc/sys/net/ipv4/conf/ens1f0np0/arp_ignore.

    As sysctl(8) does, a '/' in a key stands for a '.' inside one component
    (an interface named eth0.100 is written net.ipv4.conf.eth0/100.rp_filter).
    """
    parts = [p.replace("/", ".") for p in key.split(".")]
    return os.path.join(root, *parts)


def normalize(value) -> str:
    """Compare as the kernel prints: fields separated by single spaces."""
    return " ".join(str(value).split())


def read(key: str, root: str = PROC_SYS) -> str | None:
    try:
        with open(key_path(key, root), encoding="ascii") as handle:
            return normalize(handle.read())
    except OSError:
        return None


def mismatches(expected: dict, actual: dict) -> list[str]:
    out = []
    for key, want in expected.items():
        got = actual.get(key)
        if got != normalize(want):
            out.append(f"{key}: expected {normalize(want)!r}, got "
                       f"{'absent' if got is None else repr(got)}")
    return out
