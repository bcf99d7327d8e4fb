"""make cuda-check's own logic (tools/cuda_check.py) that runs without the
toolkit: the profiles it builds and what it refuses."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import FIXTURES

import cuda_check
from ansible.module_utils.runtime.elf_link import needed_libraries, verdict
from ansible.module_utils.runtime.build import link_allowlist, runpaths, shipped


def test_each_cuda_profiles_architectures_are_read_from_the_profile():
    assert cuda_check.archs_of(cuda_check.profile_settings("dgx-spark")["runtime_build_cuda_archs"]) == ["121"]
    assert cuda_check.archs_of(cuda_check.profile_settings("gpu-server")["runtime_build_cuda_archs"]) == [
        "80", "86", "89", "90"]


@pytest.mark.parametrize("profile, words", [("lab", "runtime_build_cuda is off in profiles/lab.yml"),
                                            ("nowhere", "no profiles/nowhere.yml")])
def test_a_profile_without_cuda_is_refused_naming_it(profile, words):
    with pytest.raises(cuda_check.CheckError, match=words):
        cuda_check.profile_settings(profile)


def test_the_pins_are_one_toolkits_set():
    pins = dict(spec.split("==") for spec in cuda_check.WHEELS)
    # nvcc, cicc, the runtime, crt and cuobjdump of one release; cuBLAS and CCCL the versions it names
    assert {pins[n] for n in ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-runtime", "nvidia-cuda-crt",
                              "nvidia-cuda-cuobjdump")} == {cuda_check.TOOLKIT_VERSION}


CUDA = FIXTURES / "cuda"


def test_the_device_code_of_a_real_build_is_one_arch_specific_sm(tmp_path):
    """cuobjdump's list of a real sm 121 build, printed by a stand-in that
    replays it: 144 cubins, every one sm_121a (llama.cpp's name for 121)."""
    stand_in = tmp_path / "cuobjdump"
    stand_in.write_text(f"#!/bin/sh\ncat '{CUDA / 'cuobjdump_list_elf_llama-server_sm121.txt'}'\n")
    stand_in.chmod(0o755)
    assert cuda_check.elf_archs(stand_in, tmp_path / "llama-server") == ["121a"]
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\necho 'cuobjdump info    : File does not contain device code' >&2\nexit 1\n")
    failing.chmod(0o755)
    with pytest.raises(cuda_check.CheckError, match="cuobjdump --list-elf llama-server: cuobjdump info"):
        cuda_check.elf_archs(failing, tmp_path / "llama-server")


def test_the_release_ships_cublas_and_what_it_needs_of_the_toolkit():
    """The real binary needs libcublas.so.13 only; libcublas.so.13 needs
    libcublasLt.so.13: both ship, the driver's library and glibc do not."""
    binary = (CUDA / "readelf_d_llama-server_cuda_sm121_cublas_shared.txt").read_text()
    needed = needed_libraries(binary)
    needed_of = {"libcublas.so.13": needed_libraries((CUDA / "readelf_d_libcublas.so.13_pip_13.10.0.20.txt").read_text()),
                 "libcublasLt.so.13": needed_libraries(
                     (CUDA / "readelf_d_libcublasLt.so.13_pip_13.10.0.20.txt").read_text())}
    assert shipped(needed) == ["libcublas.so.13"]
    assert shipped(needed, needed_of) == ["libcublas.so.13", "libcublasLt.so.13"]
    # and the link gate passes the real binary with shared cuBLAS's allowlist and RUNPATH, refuses it without
    allow = link_allowlist([], [], True, False, "shared")
    assert verdict("llama-server", binary, "ELF 64-bit LSB pie executable, dynamically linked", allow,
                   runpaths(True, "shared"))["passed"]
    refused = verdict("llama-server", binary, "", link_allowlist([], [], True, False), runpaths(True))
    assert refused["offending"] == ["libcublas.so.13"] and refused["offending_runpath"] == ["$ORIGIN/../lib"]


@pytest.mark.parametrize("profile", cuda_check.PROFILES)
def test_the_last_green_cuda_check_vouches_for_the_cuda_build_as_it_is(profile):
    """make test's cached check: the committed record of the last green
    make cuda-check (tests/cuda-check/<profile>.json) was made from the
    archs, toolkit pins, runtime source and recipe files there are now. A
    change to any of them fails here until make cuda-check passes again."""
    path = cuda_check.RECORDS / f"{profile}.json"
    record = json.loads(path.read_text()) if path.is_file() else None
    assert cuda_check.stale(record, cuda_check.fingerprint(profile)) == [], (
        f"the CUDA build of {profile} changed since its last green make cuda-check: run "
        f"`make cuda-check CUDA_PROFILES={profile}` and commit {path.relative_to(cuda_check.REPO)}")
    assert record["sm"] and {sm.rstrip("a") for sm in record["sm"]} == set(record["fingerprint"]["archs"])


def test_a_recipe_or_arch_change_makes_the_record_stale(tmp_path):
    """On a copy of the tree: the record of the tree as it is holds; an arch
    added to the profile or a changed build script each make it stale,
    named."""
    for name in ("profiles", "roles/runtime_build/templates", "roles/runtime_build/defaults", "module_utils"):
        shutil.copytree(cuda_check.REPO / name, tmp_path / name)
    record = {"fingerprint": cuda_check.fingerprint("gpu-server", tmp_path)}
    assert cuda_check.stale(record, cuda_check.fingerprint("gpu-server", tmp_path)) == []
    profile = tmp_path / "profiles" / "gpu-server.yml"
    profile.write_text(profile.read_text().replace('"80;86;89;90"', '"80;86;89;90;100"'))
    script = tmp_path / "roles" / "runtime_build" / "templates" / "build.sh.j2"
    script.write_text(script.read_text() + "\n# another step\n")
    assert cuda_check.stale(record, cuda_check.fingerprint("gpu-server", tmp_path)) == [
        "archs ['80', '86', '89', '90'] -> ['80', '86', '89', '90', '100']",
        "roles/runtime_build/templates/build.sh.j2 changed"]
    assert cuda_check.stale(None, cuda_check.fingerprint("gpu-server", tmp_path)) == [
        "no green make cuda-check is recorded"]
