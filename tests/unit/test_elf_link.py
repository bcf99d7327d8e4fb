"""The static-link verdict on real executables made here: one linked
statically, one dynamically, by the C compiler of this machine."""

from __future__ import annotations

import subprocess

import pytest

from elf_link import needed_libraries, verdict



@pytest.fixture(name="binaries", scope="module")
def fixture_binaries(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("elf")
    src = tmp / "hello.c"
    src.write_text('#include <math.h>\n#include <stdio.h>\n'
                   'int main(int c, char **v) { printf("%f\\n", sqrt(c)); return 0; }\n')
    static, dynamic = tmp / "static", tmp / "dynamic"
    subprocess.run(["gcc", "-O1", "-static", "-o", str(static), str(src), "-lm"], check=True)
    subprocess.run(["gcc", "-O1", "-o", str(dynamic), str(src), "-lm"], check=True)
    return static, dynamic


def inspect(path):
    dyn = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True,
                         check=True).stdout
    fout = subprocess.run(["file", "-b", str(path)], capture_output=True, text=True,
                          check=True).stdout
    return dyn, fout


def test_static_executable_passes_an_empty_allowlist(binaries):
    dyn, fout = inspect(binaries[0])
    result = verdict("static", dyn, fout, [])
    assert result["static"] and result["needed"] == [] and result["passed"]


def test_dynamic_executable_lists_its_libraries(binaries):
    dyn, fout = inspect(binaries[1])
    result = verdict("dynamic", dyn, fout, [])
    assert not result["static"] and not result["passed"]
    assert "libc.so.6" in result["needed"] and "libm.so.6" in result["needed"]
    assert result["offending"] == result["needed"]
    allowed = verdict("dynamic", dyn, fout, needed_libraries(dyn))
    assert allowed["passed"] and allowed["offending"] == [] and not allowed["static"]
