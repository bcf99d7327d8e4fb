"""module_utils/ as a reader follows it: packages by what they serve, each
import a plain statement that names a file, no helper reached by a string,
and a module (library/) never named like the logic it imports.

Read statically from every tracked Python file, so a stale import in a lab
test or a tool (which the unit tests never import) fails here too."""

from __future__ import annotations

import ast
import subprocess

from conftest import REPO

MODULE_UTILS = REPO / "module_utils"
# Ansible's own module_utils (ansible.module_utils.basic, .common, ...) are not ours
OURS = sorted(p.name for p in MODULE_UTILS.iterdir() if p.is_dir() and (p / "__init__.py").is_file())


def tracked_python() -> list:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / name for name in listed.stdout.split() if not name.startswith("tests/fixtures/")]


def our_imports(path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of each `from ansible.module_utils.<ours>... import names` of a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ansible.module_utils"):
            parts = node.module.split(".")[2:]
            if parts and parts[0] in OURS:
                found.append((node.lineno, node.module, [alias.name for alias in node.names]))
            elif not parts and any(alias.name in OURS for alias in node.names):
                found.append((node.lineno, node.module, [alias.name for alias in node.names]))
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith("ansible.module_utils."), (
                    f"{path.relative_to(REPO)}:{node.lineno}: `import {alias.name}`: import from a package "
                    f"(`from ansible.module_utils.<package> import <module>`)")
    return found


def test_module_utils_holds_packages_each_saying_what_it_serves():
    loose = sorted(p.name for p in MODULE_UTILS.glob("*.py"))
    assert loose == [], f"module_utils/ holds packages only; move {loose} into the package they serve"
    assert {"engines", "gpu", "inventory", "rails", "runtime", "weights", "acceptance"} <= set(OURS)
    for init in sorted(MODULE_UTILS.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, f"{init.relative_to(REPO)}: say in a docstring what the package serves"
    for folder in sorted(p for p in MODULE_UTILS.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        assert (folder / "__init__.py").is_file(), f"{folder.relative_to(REPO)}: a package needs __init__.py"


def test_every_import_of_module_utils_names_a_file_that_is_there():
    wrong = []
    for path in tracked_python():
        for line, module, names in our_imports(path):
            base = MODULE_UTILS.joinpath(*module.split(".")[2:])
            for name in names:
                there = (base / f"{name}.py").is_file() or (base / name / "__init__.py").is_file()
                if not there and (base.with_suffix(".py")).is_file():
                    there = name in {n.id if isinstance(n, ast.Name) else getattr(n, "name", "")
                                     for n in ast.walk(ast.parse(base.with_suffix(".py").read_text()))
                                     if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Name))}
                if not there:
                    wrong.append(f"{path.relative_to(REPO)}:{line}: from {module} import {name}")
    assert wrong == [], "imports that name no file or definition of module_utils/:\n" + "\n".join(wrong)


def test_no_helper_is_reached_by_a_string():
    """Only plain imports: no `module_utils("name")` look-up, no
    import_module of a computed ansible.module_utils name."""
    found = []
    for path in tracked_python():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0] if node.args else None
            text = ast.unparse(arg) if arg is not None else ""
            if name == "module_utils" or (name == "import_module" and "module_utils" in text):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "\n".join(found)


def test_a_module_is_never_named_like_the_logic_it_imports():
    """library/<name>.py is the module Ansible runs; its logic lives in
    module_utils/<package>/<other name>.py: a newcomer sees which is which."""
    modules = {p.stem for p in (REPO / "library").glob("*.py")}
    logic = {p.stem for p in MODULE_UTILS.rglob("*.py") if p.stem != "__init__"}
    assert modules & logic == set()
    assert modules & set(OURS) == set()
