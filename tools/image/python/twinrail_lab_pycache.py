"""The lab nodes' bytecode cache for modules imported from zip files.

Python compiles a module it imports from a zip file (zipimport) from its
source every time and keeps no .pyc. Every Ansible module run is such an
import (AnsiballZ): ansible.module_utils is compiled again for each task,
about 0.15 s of CPU, which on the lab's 2 shared cores is most of a module
run's cost. This keeps the compiled code in CACHE_DIR, keyed by the
Python's cache tag, the optimization level and the source's sha256, so what
runs is exactly what the source compiles to (the file name in tracebacks
is the current one). Any error reading or writing the cache falls back to
compiling, as Python does without it.

Lab only: tools/lab.py mounts this file and its .pth into every node's
/usr/local/lib/python3.11/dist-packages; no stage installs it on a real
node.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
import types
import zipimport

CACHE_DIR = "/var/cache/twinrail-lab/pycache"
_compile_source = zipimport._compile_source  # noqa: SLF001 (what zipimport calls)


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def cache_path(source: bytes) -> str:
    digest = hashlib.sha256(source).hexdigest()
    return os.path.join(CACHE_DIR, f"{digest}.{sys.implementation.cache_tag}.opt{sys.flags.optimize}")


def compile_source(pathname: str, source: bytes) -> types.CodeType:
    """zipimport's _compile_source, through the cache."""
    try:
        path = cache_path(source)
    except Exception:  # noqa: BLE001 (any failure: compile as Python would)
        return _compile_source(pathname, source)
    try:
        with open(path, "rb") as handle:
            return _renamed(marshal.load(handle), pathname)
    except Exception:  # noqa: BLE001
        pass
    code = _compile_source(pathname, source)
    try:
        os.makedirs(CACHE_DIR, exist_ok=True)
        partial = f"{path}.{os.getpid()}"
        with open(partial, "wb") as handle:
            marshal.dump(code, handle)
        os.replace(partial, path)
    except Exception:  # noqa: BLE001 (a read-only or full disk: no cache)
        pass
    return code


zipimport._compile_source = compile_source  # noqa: SLF001
