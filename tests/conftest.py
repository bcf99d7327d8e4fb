"""Shared helpers for twinrail's unit tests.

library/ is imported as plain modules, module_utils/ as Ansible ships it
(twinrail.loader), and inventories are read with Ansible's
own InventoryManager, so the tests see variables exactly as a play does.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# the ansible-* commands of the Python running the tests, as `make` arranges
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
FIXTURES = REPO / "tests" / "fixtures"
for sub in ("tools", "library"):
    path = str(REPO / sub)
    if path not in sys.path:
        sys.path.insert(0, path)

# Helpers are imported as a module on a node imports them
# (`from ansible.module_utils.gpu import facts`), after twinrail.loader, the
# one way the controller reaches them.
import twinrail.loader  # noqa: E402,F401  pylint: disable=wrong-import-position,unused-import


def filter_plugins():
    """Every function of the filter plugins (filter_plugins/*.py, a file per
    group of filters), by its Python name, as one namespace: each file
    loaded by its path, as Ansible's plugin loader does."""
    import importlib.util  # pylint: disable=import-outside-toplevel
    import types  # pylint: disable=import-outside-toplevel

    merged = types.SimpleNamespace()
    for path in sorted((REPO / "filter_plugins").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"twinrail_filter_{path.stem}", path)
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        for name, value in vars(loaded).items():
            if not name.startswith("_") and name != "FilterModule":
                setattr(merged, name, value)
    return merged


_LOADER_READY: list = []


def load_inventory(path: Path) -> tuple[dict, dict]:
    """(groups, nodes) as the preflight play hands them to twinrail_inventory."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader
    from ansible.vars.manager import VariableManager

    if not _LOADER_READY:
        init_plugin_loader()
        _LOADER_READY.append(True)
    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(path)])
    variables = VariableManager(loader=loader, inventory=inventory)
    groups = {name: [h.name for h in group.get_hosts()]
              for name, group in inventory.groups.items()}
    from ansible.template import Templar

    nodes = {}
    for host in groups.get("cluster", []):
        hv = variables.get_vars(host=inventory.get_host(host))
        templar = Templar(loader=loader, variables=hv)
        nodes[host] = {k: templar.template(v) for k, v in hv.items()
                       if k.startswith("twinrail_")}
    return groups, nodes


@pytest.fixture(name="repo")
def fixture_repo() -> Path:
    return REPO


def module_process(module: Path, args: dict, workdir: Path, env: dict | None = None) -> dict:
    """A library module run in a process of its own, as Ansible runs it on a
    node: its helpers under ansible.module_utils (twinrail.loader), its
    arguments from a file in workdir; its JSON result."""
    args_file = workdir / f"{module.stem}-args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    boot = ("import runpy, sys; import twinrail.loader; "
            "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", boot, str(module), str(args_file)], capture_output=True, text=True,
                         check=False, env=env)
    return json.loads(out.stdout)


@contextlib.contextmanager
def loopback_server(handler):
    """An HTTP server of ``handler`` on the loopback, in a thread: its port."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()


@pytest.fixture(scope="module")
def gpu_proof_prepared(tmp_path_factory):
    """make gpu-proof's preparation (tools/gpu_proof_prepare.py) in a
    folder of its own: (folder, manifest). It reads the bundle."""
    import gpu_proof_prepare  # pylint: disable=import-outside-toplevel
    if not gpu_proof_prepare.ARCHIVE.is_file() or not gpu_proof_prepare.SMOLLM2.is_file():
        pytest.fail("the bundle is absent: the tests run after make bundle")
    out = tmp_path_factory.mktemp("gpu-proof")
    return out, gpu_proof_prepare.prepare(out, 4)
