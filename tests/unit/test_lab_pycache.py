"""tools/image/python/twinrail_lab_pycache.py: the lab nodes' bytecode cache
for modules imported from zip files (what every Ansible module run is).

Each case runs a fresh Python that loads the hook the way the node's .pth
does, then imports a module from a zip file, as AnsiballZ does."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HOOK_DIR = REPO / "tools" / "image" / "python"

RUN = """
import sys, zipimport
import twinrail_lab_pycache as hook
hook.CACHE_DIR = sys.argv[1]
if sys.argv[3] == "no-compile":
    def refuse(*args):
        raise AssertionError("compiled")
    hook._compile_source = refuse
sys.path.insert(0, sys.argv[2])
import shipped
print(shipped.VALUE, shipped.where())
"""


def make_zip(path: Path, value: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("shipped.py", f"VALUE = {value!r}\n"
                                       "def where():\n"
                                       "    return where.__code__.co_filename\n")
    return path


def run(cache: Path, archive: Path, mode: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(HOOK_DIR), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", RUN, str(cache), str(archive), mode or "-"],
                          capture_output=True, text=True, env=env, check=False)


def test_the_pth_file_loads_the_hook():
    assert (HOOK_DIR / "twinrail-lab-pycache.pth").read_text().strip() == "import twinrail_lab_pycache"


def test_a_second_import_runs_the_cached_code_under_the_current_file_name(tmp_path):
    cache = tmp_path / "cache"
    first = run(cache, make_zip(tmp_path / "a.zip", "one"))
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["one", str(tmp_path / "a.zip" / "shipped.py")]
    assert len(list(cache.iterdir())) == 1
    # the same source in another zip file (AnsiballZ's temporary one): not compiled again
    second = run(cache, make_zip(tmp_path / "b.zip", "one"), "no-compile")
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["one", str(tmp_path / "b.zip" / "shipped.py")]


def test_a_changed_source_is_compiled_not_served_from_the_cache(tmp_path):
    cache = tmp_path / "cache"
    assert run(cache, make_zip(tmp_path / "a.zip", "one")).returncode == 0
    changed = run(cache, make_zip(tmp_path / "b.zip", "two"), "no-compile")
    assert changed.returncode != 0 and "compiled" in changed.stderr
    assert run(cache, tmp_path / "b.zip").stdout.split()[0] == "two"
    assert len(list(cache.iterdir())) == 2


def test_a_damaged_or_unwritable_cache_falls_back_to_compiling(tmp_path):
    cache = tmp_path / "cache"
    assert run(cache, make_zip(tmp_path / "a.zip", "one")).returncode == 0
    [entry] = cache.iterdir()
    entry.write_bytes(entry.read_bytes()[:10])
    again = run(cache, tmp_path / "a.zip")
    assert again.returncode == 0 and again.stdout.split()[0] == "one", again.stderr
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert run(blocked, tmp_path / "a.zip").stdout.split()[0] == "one"
