"""The one way code on the controller reaches the repository's module_utils.

A module on a node imports its helpers as `ansible.module_utils.<name>`,
because Ansible ships them there. Everything that runs on the controller
(action plugins, filters, the `twinrail` command, the unit tests) imports
them under the same name, after `install()` has added the repository's
`module_utils/` to that package's search path. So there is one copy of
each helper in a process, whoever imported it first, and a helper that
imports another (`from ansible.module_utils.memory_plan import ...`) works
the same on a node and here.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
MODULE_UTILS = REPO / "module_utils"


def install() -> None:
    """Put the repository's module_utils/ on ansible.module_utils' path (once).

    On a machine without Ansible (the GPU proof's, tools/gpu_proof.py, which
    runs there from a copy of the tree), the package of that name is made
    bare over module_utils/: the pure helpers import the same way."""
    try:
        import ansible.module_utils  # pylint: disable=import-outside-toplevel
    except ImportError:
        _bare_package()
        return
    path = str(MODULE_UTILS)
    if path not in ansible.module_utils.__path__:
        ansible.module_utils.__path__.append(path)


def _bare_package() -> None:
    if "ansible.module_utils" in sys.modules:
        return
    top = sys.modules.get("ansible")
    if top is None:
        top = sys.modules["ansible"] = ModuleType("ansible")
    top.__path__ = []  # a package, holding only module_utils
    package = ModuleType("ansible.module_utils")
    package.__path__ = [str(MODULE_UTILS)]
    sys.modules["ansible.module_utils"] = package
    top.module_utils = package


def module_utils(name: str) -> ModuleType:
    """The module_utils `name`, as a module on a node imports it."""
    install()
    return importlib.import_module(f"ansible.module_utils.{name}")
