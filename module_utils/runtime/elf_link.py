# -*- coding: utf-8 -*-
"""How an executable is linked, from `readelf -d` and `file` output."""

from __future__ import annotations

import fnmatch
import re

_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
# RUNPATH (or the older RPATH): colon-separated directories the loader searches first
_RUNPATH = re.compile(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]")
# an empty element of a non-empty RUNPATH ("$ORIGIN/../lib:"): the loader
# searches the current directory there (glibc's fillin_rpath reads it as "./")
CURRENT_DIRECTORY = "(an empty element: the current directory)"


def needed_libraries(readelf_dynamic: str) -> list[str]:
    """The NEEDED entries of `readelf -d` (empty for a static executable)."""
    return _NEEDED.findall(readelf_dynamic)


def runpath(readelf_dynamic: str) -> list[str]:
    """The RUNPATH (or RPATH) entries of `readelf -d`, in order; an empty
    element is the current directory (CURRENT_DIRECTORY), a wholly empty
    RUNPATH none."""
    return [entry or CURRENT_DIRECTORY for found in _RUNPATH.findall(readelf_dynamic) if found
            for entry in found.split(":")]


def has_dynamic_section(readelf_dynamic: str) -> bool:
    return "There is no dynamic section in this file." not in readelf_dynamic


def file_says_static(file_output: str) -> bool:
    """`file` says "statically linked" (or "static-pie linked")."""
    return bool(re.search(r"\bstatic(ally|-pie)? linked\b", file_output))


def verdict(name: str, readelf_dynamic: str, file_output: str, allowlist: list[str],
            runpaths: list[str] | None = None) -> dict:
    """Whether the binary needs only allowed libraries (an allowlist entry
    may be a pattern: libcublas.so.*) and searches no directory but the
    allowed RUNPATHs (a build-tree path left in what ships is offending)."""
    needed = needed_libraries(readelf_dynamic)
    offending = [lib for lib in needed if not any(fnmatch.fnmatchcase(lib, allowed) for allowed in allowlist)]
    paths = runpath(readelf_dynamic)
    stray = [path for path in paths if path not in (runpaths or [])]
    static = not has_dynamic_section(readelf_dynamic) or (not needed and
                                                          file_says_static(file_output))
    return {"binary": name, "static": static, "needed": needed, "offending": offending, "runpath": paths,
            "offending_runpath": stray, "file": file_output.strip(), "passed": not offending and not stray}
