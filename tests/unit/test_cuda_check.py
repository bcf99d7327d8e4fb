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


def test_each_profile_is_built_for_its_own_architecture():
    """dgx-spark's nodes are aarch64: its build takes the CUDA runtime,
    cuBLAS and CCCL for aarch64 and this machine's compilers; the x86-64
    profiles take every package for x86-64."""
    assert cuda_check.profile_architecture("dgx-spark") == "aarch64"
    assert cuda_check.profile_architecture("gpu-server") == "x86_64"
    spark = cuda_check.fingerprint("dgx-spark")
    assert spark["target"] == "aarch64" and spark["isa_flags"][0] == "-march=armv9-a+i8mm+bf16"
    assert [p for p in spark["toolkit"] if p.endswith("(aarch64)")] == [
        "nvidia-cuda-runtime==13.5.37 (aarch64)", "nvidia-cuda-cccl==13.3.5.0.6 (aarch64)",
        "nvidia-cublas==13.10.0.20 (aarch64)"]
    server = cuda_check.fingerprint("gpu-server")["toolkit"]
    assert [p for p in server if "(" in p] == [
        "nvidia-cuda-runtime==13.5.37 (x86_64)", "nvidia-cuda-cccl==13.3.5.0.6 (x86_64)",
        "nvidia-cublas==13.10.0.20 (x86_64)"]
    # the compilers are whichever machine builds: not part of what the record vouches for by platform
    assert [p for p in server if "(" not in p] == [p for p in spark["toolkit"] if "(" not in p] == [
        "nvidia-cuda-nvcc==13.5.37", "nvidia-nvvm==13.5.37", "nvidia-cuda-crt==13.5.37",
        "nvidia-cuda-cuobjdump==13.5.37"]


def test_a_profile_of_an_architecture_it_cannot_build_is_refused(tmp_path):
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "odd.yml").write_text(
        "expect: {architecture: riscv64}\nsettings: {runtime_build_cuda: true, runtime_build_cuda_archs: '121'}\n")
    with pytest.raises(cuda_check.CheckError, match=r"expect.architecture in profiles/odd.yml is 'riscv64'; "
                                                    r"expected one of x86_64, aarch64"):
        cuda_check.profile_architecture("odd", tmp_path)


def test_another_architectures_build_gets_a_toolchain_file(tmp_path, monkeypatch):
    """The cross compilers for the C, C++ and CUDA host code, and libraries
    and headers looked up only in the target's sysroot and the toolkit;
    this machine's own architecture gets none."""
    monkeypatch.setattr(cuda_check, "CACHE", tmp_path)
    monkeypatch.setattr(cuda_check, "HOST", "x86_64")
    monkeypatch.setattr(cuda_check.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert cuda_check.toolchain_file("x86_64", tmp_path / "tk") is None
    text = cuda_check.toolchain_file("aarch64", tmp_path / "tk").read_text()
    for line in ("set(CMAKE_SYSTEM_PROCESSOR aarch64)", "set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)",
                 "set(CMAKE_CUDA_HOST_COMPILER aarch64-linux-gnu-g++)",
                 f"set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu {tmp_path / 'tk'})",
                 "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)", "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)"):
        assert line in text.splitlines()
    monkeypatch.setattr(cuda_check.shutil, "which", lambda name: None)
    with pytest.raises(cuda_check.CheckError, match=r"aarch64-linux-gnu-gcc is not installed: .*"
                                                    r"apt-get install g\+\+-aarch64-linux-gnu qemu-user-static"):
        cuda_check.toolchain_file("aarch64", tmp_path / "tk")


def replaying(tmp_path, name, capture):
    """A stand-in for a tool that prints a real capture."""
    stand_in = tmp_path / name
    stand_in.write_text(f"#!/bin/sh\ncat '{capture}'\n")
    stand_in.chmod(0o755)
    return stand_in


@pytest.mark.parametrize("capture, machine, interpreter", [
    ("readelf_h_l_llama-server_aarch64_sm121.txt", "AArch64", "/lib/ld-linux-aarch64.so.1"),
    ("readelf_h_l_libcublas.so.13_pip_13.10.0.20_aarch64.txt", "AArch64", None),
    ("readelf_h_l_llama-server_x86_64_sm80-90.txt", "Advanced Micro Devices X86-64", "/lib64/ld-linux-x86-64.so.2")])
def test_the_machine_and_interpreter_are_read_from_real_headers(tmp_path, monkeypatch, capture, machine, interpreter):
    replaying(tmp_path, "readelf", CUDA / capture)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert cuda_check.elf_header(tmp_path / "any") == {"machine": machine, "interpreter": interpreter}


RUNS = {  # the release's binaries run where there is no GPU (tests/fixtures/cuda/SOURCES.md)
    "none": "qemu-aarch64_llama-server_version_no_driver.txt",
    "stub-version": "qemu-aarch64_llama-server_version_stub_driver.txt",
    "stub-devices": "qemu-aarch64_llama-bench_list-devices_stub_driver.txt",
    "stub-bench": "qemu-aarch64_llama-bench_cpu_stub_driver.txt"}


def test_without_a_gpu_the_release_refuses_clearly_and_goes_on_with_the_stub(tmp_path, monkeypatch):
    """The real runs of the aarch64 release under qemu: the loader names
    libcuda.so.1; with the stub driver llama-server prints its version and
    llama-bench's device list gets the CUDA runtime's "driver version is
    insufficient" and goes on, and the small model runs on the CPU. A
    crash, a binary that loads without the driver or not with it, a device
    list without the runtime's answer or a bench without figures, each fail
    the check."""
    said = {key: (CUDA / name).read_text() for key, name in RUNS.items()}
    exits = {"none": 127, "stub-version": 0, "stub-devices": 0, "stub-bench": 0}

    def run(outcomes):
        def fake(target, argv, stub_dir=None):
            key = "none" if stub_dir is None else (
                "stub-version" if "--version" in argv else "stub-bench" if "-m" in argv else "stub-devices")
            text = outcomes[key][1]
            # the bench's stdout is its JSON, its stderr the CUDA runtime's line after it (as captured)
            out, _, err = text.rpartition("\n]") if key == "stub-bench" and "\n]" in text else ("", "", text)
            return {"argv": [argv[0].rsplit("/", 1)[-1], *argv[1:]], "exit": outcomes[key][0], "said": text,
                    "stdout": out + ("\n]" if out else ""), "stderr": err}
        monkeypatch.setattr(cuda_check, "run_release", fake)
        monkeypatch.setattr(cuda_check, "CACHE", tmp_path)
        (tmp_path / "lib64" / "stubs").mkdir(parents=True, exist_ok=True)
        (tmp_path / "lib64" / "stubs" / "libcuda.so").write_text("")
        return cuda_check.driver_checks("aarch64", tmp_path / "release", tmp_path)[1]

    real = {key: (exits[key], said[key]) for key in RUNS}
    assert run(real) == []
    crashed = dict(real, **{"stub-devices": (-11, said["stub-devices"])})
    assert run(crashed)[0].startswith("llama-bench --list-devices with the stub driver: exit -11")
    loaded = dict(real, none=(0, said["stub-version"]))
    assert run(loaded)[0].startswith("llama-server --version without a driver: exit 0")
    silent = dict(real, **{"stub-devices": (0, "Available devices:\n  (none)\n")})
    assert run(silent)[0].startswith("llama-bench --list-devices with the stub driver: exit 0") and (
        "expected the CUDA runtime's \"driver version is insufficient\"" in run(silent)[0])
    unloaded = dict(real, **{"stub-version": (127, said["none"])})
    assert run(unloaded)[0].startswith("llama-server --version with the stub driver: exit 127")
    # the model on the CPU: its two rows read from the real JSON before the runtime's line; none is a failure
    out, _, _ = said["stub-bench"].rpartition("\n]")
    figures = cuda_check.parse_bench(out + "\n]")
    assert [(kind, f["tokens"], f["backends"], f["n_gpu_layers"]) for kind, f in sorted(figures.items())] == [
        ("pp", 16, "CUDA", 0), ("tg", 4, "CUDA", 0)]
    stopped = dict(real, **{"stub-bench": (0, said["stub-devices"])})
    assert run(stopped)[0].startswith("llama-bench on the CPU with the stub driver: exit 0")


def test_the_compile_time_is_read_from_ninjas_log_of_a_real_build(tmp_path):
    """The dgx-spark build's .ninja_log: each output's last build, summed,
    is the job-seconds of the build that made them (two jobs over its
    4948.6 s of wall time), whatever no-op rebuild came after."""
    (tmp_path / ".ninja_log").write_text((CUDA / "ninja_log_dgx-spark_aarch64.txt").read_text())
    seconds = cuda_check.compile_seconds(tmp_path)
    assert seconds == pytest.approx(2 * 4948.6, rel=0.01)
    assert cuda_check.compile_seconds(tmp_path / "nowhere") == 0.0
