# -*- coding: utf-8 -*-
"""How an executable is linked, from `readelf -d` and `file` output."""

from __future__ import annotations

import re

_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")


def needed_libraries(readelf_dynamic: str) -> list[str]:
    """The NEEDED entries of `readelf -d` (empty for a static executable)."""
    return _NEEDED.findall(readelf_dynamic)


def has_dynamic_section(readelf_dynamic: str) -> bool:
    return "There is no dynamic section in this file." not in readelf_dynamic


def file_says_static(file_output: str) -> bool:
    """`file` says "statically linked" (or "static-pie linked")."""
    return bool(re.search(r"\bstatic(ally|-pie)? linked\b", file_output))


def verdict(name: str, readelf_dynamic: str, file_output: str, allowlist: list[str]) -> dict:
    needed = needed_libraries(readelf_dynamic)
    offending = [lib for lib in needed if lib not in allowlist]
    static = not has_dynamic_section(readelf_dynamic) or (not needed and
                                                          file_says_static(file_output))
    return {"binary": name, "static": static, "needed": needed, "offending": offending,
            "file": file_output.strip(), "passed": not offending}
