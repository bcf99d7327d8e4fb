"""The one way code on the controller reaches the repository's module_utils.

A module on a node imports its helpers as `ansible.module_utils.<package>.<name>`
(`from ansible.module_utils.gpu import facts`), because Ansible ships them
there. Everything that runs on the controller (action plugins, filters,
lookups, the `twinrail` command, the tools, the tests) imports them with the
same statement, after this module: importing it adds the repository's
`module_utils/` to that package's search path. So the loader's import comes
first and the helpers' after it, plain imports a reader and a tool can follow:

    import twinrail.loader  # noqa: F401  (first: module_utils/ joins ansible.module_utils)
    from ansible.module_utils.stages import catalogue

There is one copy of each helper in a process, whoever imported it first,
and a helper that imports another works the same on a node and here.
"""

from __future__ import annotations

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


install()
