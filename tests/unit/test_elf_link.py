"""The static-link verdict on real executables made here: one linked
statically, one dynamically, by the C compiler of this machine."""

from __future__ import annotations

import subprocess

import pytest
from conftest import FIXTURES

from ansible.module_utils.runtime.elf_link import CURRENT_DIRECTORY, needed_libraries, verdict
from ansible.module_utils.runtime.elf_link import runpath as runpath_of



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


def test_a_runpath_outside_the_release_is_refused_and_origin_lib_allowed(tmp_path):
    """Executables linked here with the RUNPATH a release ships
    ($ORIGIN/../lib) and with a build machine's path (a toolkit's stubs)."""
    src = tmp_path / "hello.c"
    src.write_text('#include <math.h>\n#include <stdio.h>\nint main(int c, char **v) { printf("%f\\n", sqrt(c)); }\n')
    shipped, stray = tmp_path / "shipped", tmp_path / "stray"
    subprocess.run(["gcc", "-o", str(shipped), str(src), "-lm", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib"],
                   check=True)
    subprocess.run(["gcc", "-o", str(stray), str(src), "-lm", "-Wl,--enable-new-dtags",
                    f"-Wl,-rpath,$ORIGIN/../lib:{tmp_path}/cuda/lib64/stubs"], check=True)
    allow = ["libc.so.6", "libm.so.*"]  # a pattern, as shared cuBLAS's are
    good = verdict("shipped", *inspect(shipped), allow, ["$ORIGIN/../lib"])
    assert good["passed"] and good["runpath"] == ["$ORIGIN/../lib"] and good["offending"] == []
    bad = verdict("stray", *inspect(stray), allow, ["$ORIGIN/../lib"])
    assert not bad["passed"] and bad["offending_runpath"] == [f"{tmp_path}/cuda/lib64/stubs"]
    # no RUNPATH allowed (a static-cuBLAS build): even $ORIGIN/../lib is refused
    assert verdict("shipped", *inspect(shipped), allow)["offending_runpath"] == ["$ORIGIN/../lib"]
    # a pattern allows its versions, not another library
    assert verdict("shipped", *inspect(shipped), ["libc.so.6", "libm.so.5*"], ["$ORIGIN/../lib"])["offending"] == [
        "libm.so.6"]


def test_an_empty_runpath_element_is_the_current_directory_and_is_refused(tmp_path):
    """A release linked with `$ORIGIN/../lib:` (a trailing colon, as a
    build's joined list leaves it): the loader then takes a library from
    whatever directory the binary is started in. Linked here and run from
    a directory holding the library, it loads it; the verdict refuses it."""
    (tmp_path / "lib.c").write_text("int answer(void) { return 42; }\n")
    (tmp_path / "main.c").write_text('#include <stdio.h>\nint answer(void);\n'
                                     'int main(void) { printf("%d\\n", answer()); return 0; }\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libanswer.so"), str(tmp_path / "lib.c"),
                    "-Wl,-soname,libanswer.so"], check=True)
    (tmp_path / "bin").mkdir()
    made = {}
    for name, path in (("trailing", "$ORIGIN/../lib:"), ("shipped", "$ORIGIN/../lib")):
        made[name] = tmp_path / "bin" / name
        subprocess.run(["gcc", "-o", str(made[name]), str(tmp_path / "main.c"), f"-L{tmp_path}", "-lanswer",
                        f"-Wl,--enable-new-dtags,-rpath,{path}"], check=True)
    ran = {name: subprocess.run([str(path)], cwd=tmp_path, capture_output=True, text=True, check=False)
           for name, path in made.items()}
    assert ran["trailing"].stdout == "42\n" and ran["shipped"].returncode != 0  # the danger is real
    allow = ["libc.so.6", "libanswer.so"]
    bad = verdict("trailing", *inspect(made["trailing"]), allow, ["$ORIGIN/../lib"])
    assert not bad["passed"] and bad["offending_runpath"] == [CURRENT_DIRECTORY]
    assert bad["runpath"] == ["$ORIGIN/../lib", CURRENT_DIRECTORY]
    assert verdict("shipped", *inspect(made["shipped"]), allow, ["$ORIGIN/../lib"])["passed"]


@pytest.mark.parametrize("capture, runpath", [
    ("readelf-d_runpath_origin_trailing_empty_sherpa-ncnn_k2-fsa-docs.txt", ["$ORIGIN", CURRENT_DIRECTORY]),
    ("readelf-d_rpath_trailing_empty_entry_ceph-tools-demo_list-snaps_runsisi.txt",
     ["/home/runsisi/build/14.2.10/ceph-tools-demo/../build/boost/lib",
      "/home/runsisi/build/14.2.10/ceph-tools-demo/../build/lib", CURRENT_DIRECTORY])])
def test_real_listings_with_an_empty_element_are_read_with_it(capture, runpath):
    """readelf -d of public builds (tests/fixtures/elf/SOURCES.md): a
    RUNPATH and an older RPATH, each ending in an empty element."""
    listing = (FIXTURES / "elf" / capture).read_text()
    assert runpath_of(listing)[:len(runpath)] == runpath
    result = verdict("it", listing, "", needed_libraries(listing), [e for e in runpath if e != CURRENT_DIRECTORY])
    assert not result["passed"] and set(result["offending_runpath"]) == {CURRENT_DIRECTORY}
