"""The vLLM engine's locks, one per device and architecture
(roles/runtime_build/files/vllm/<name>.lock, made by tools/vllm_lock.py):
each reads back with every wheel named, each profile names a lock its hosts
can install, preflight refuses a node the wheels do not fit, and a lock in
which two distributions install the same file is refused (on real wheel
file lists: tests/fixtures/vllm/wheels/SOURCES.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO

from ansible.module_utils.engines.vllm.env import (LockError, lock_needs, lock_pins, lock_platform, node_problems,
                                                   shared_files, wheel_needs)
from ansible.module_utils.inventory import profiles
from ansible.module_utils.inventory.hardware_profile import glibc_version, host_facts, judge

LOCKS = REPO / "roles" / "runtime_build" / "files" / "vllm"
WHEELS = FIXTURES / "vllm" / "wheels"
sys.path.insert(0, str(REPO / "tools"))
import vllm_lock  # noqa: E402  pylint: disable=wrong-import-position


def needs(name: str) -> dict:
    path = LOCKS / f"{name}.lock"
    return lock_needs(lock_pins(path.read_text(), str(path)), str(path))


def listing(wheel: str) -> list[str]:
    return (WHEELS / f"{wheel}.namelist.txt").read_text().split()


@pytest.mark.parametrize("name", sorted(p.stem for p in LOCKS.glob("*.lock")))
def test_each_committed_lock_names_every_wheel_for_one_python_and_its_architecture(name):
    path = LOCKS / f"{name}.lock"
    pins = lock_pins(path.read_text(), str(path))
    found = needs(name)
    assert found["unnamed"] == []
    device, arch = name.split("-", 1)
    assert lock_platform(pins)["device"] == device
    assert found["arch"] == arch and found["python"] and found["glibc"]
    for pin in pins.values():
        wheel = pin["wheel"].split("-")
        assert wheel[0].lower().replace("_", "-") == pin["requirement"].split("==")[0].replace("_", "-")
        assert wheel[1] == pin["version"], pin


def test_the_cuda_locks_pin_vllm_with_a_cuda_torch_and_its_nccl_and_the_cpu_lock_stays_the_labs():
    for arch in ("x86_64", "aarch64"):
        pins = lock_pins((LOCKS / f"cuda-{arch}.lock").read_text())
        assert pins["vllm"]["version"] == "0.33.0" and pins["torch"]["version"] == "2.14.0"
        assert pins["nvidia-nccl-cu13"]["version"] == "2.30.7"
        # held at 13: the 12.x wheel carries cuda-bindings' own files
        assert pins["cuda-python"]["version"].startswith("13.")
        assert pins["cuda-bindings"]["version"].split(".")[:2] == pins["cuda-python"]["version"].split(".")[:2]
    assert needs("cuda-x86_64")["glibc"] == "2.31" and needs("cuda-aarch64")["glibc"] == "2.34"
    assert needs("cuda-aarch64")["python"] == "3.12" and needs("cpu-x86_64")["python"] == "3.11"


@pytest.mark.parametrize("profile", profiles.names())
def test_each_profile_names_a_lock_of_its_architecture_and_device(profile):
    expect = profiles.setting(profile, "expect")
    name = profiles.setting(profile, "runtime_build_vllm_lock_name")
    assert (LOCKS / f"{name}.lock").is_file(), name
    assert needs(name)["arch"] == expect["architecture"]
    assert name.startswith("cuda-" if expect["gpu"] else "cpu-")


# the nodes as their own python3 and glibc are: DGX OS 7 (Ubuntu 24.04),
# Debian 12 (the lab's image), Ubuntu 20.04
DGX_OS = {"architecture": "aarch64", "python": "3.12.3", "glibc": "2.39"}
DEBIAN_12 = {"architecture": "x86_64", "python": "3.11.2", "glibc": "2.36"}
UBUNTU_20 = {"architecture": "x86_64", "python": "3.8.10", "glibc": "2.31"}


def test_a_node_the_wheels_do_not_fit_is_refused_naming_what_differs():
    assert node_problems("spark-a", needs("cuda-aarch64"), DGX_OS) == []
    assert node_problems("gpu-a", needs("cuda-x86_64"), DEBIAN_12) == []
    assert node_problems("lab-a", needs("cpu-x86_64"), DEBIAN_12) == []
    wrong_arch = node_problems("gpu-a", needs("cuda-aarch64"), DEBIAN_12, "the vLLM lock cuda-aarch64.lock")
    assert wrong_arch[0] == "gpu-a: the vLLM lock cuda-aarch64.lock's wheels are for aarch64, this node is x86_64"
    assert "gpu-a: the vLLM lock cuda-aarch64.lock's wheels are for CPython 3.12, this node's python3 is 3.11.2; " \
           "make a lock for it (tools/vllm_lock.py --python 3.11)" in wrong_arch
    old = node_problems("old", needs("cpu-x86_64"), UBUNTU_20, "the vLLM lock cpu-x86_64.lock")
    assert old[-1] == ("old: the vLLM lock cpu-x86_64.lock needs glibc 2.34 or newer "
                       "(cryptography-51.0.1-cp311-abi3-manylinux_2_34_x86_64.whl), this node has 2.31")


def test_preflight_s_profile_judge_refuses_a_spark_whose_python_the_lock_does_not_fit():
    facts = {"rdma_devices": ["rocep1s0f1", "roceP2p1s0f1"], "connectx_functions": [], "cpu_flags": [],
             "nccl_settings": {}, **{k: v for k, v in DGX_OS.items() if k != "architecture"}}
    hosts = host_facts({"spark-a": "aarch64", "spark-b": "aarch64"},
                       {"spark-a": facts, "spark-b": dict(facts, python="3.13.1")},
                       {"spark-a": {"gpus": [{}]}, "spark-b": {"gpus": [{}]}})
    lock = {"needs": needs("cuda-aarch64"), "name": "the vLLM lock cuda-aarch64.lock"}
    failures = judge("dgx-spark", profiles.setting("dgx-spark", "expect"), hosts, True, True, "cuda", lock)
    assert failures == ["spark-b: the vLLM lock cuda-aarch64.lock's wheels are for CPython 3.12, this node's python3 "
                        "is 3.13.1; make a lock for it (tools/vllm_lock.py --python 3.13)"]


def test_a_lock_whose_wheels_disagree_is_refused():
    text = (LOCKS / "cuda-aarch64.lock").read_text() + (
        "# wheel: pyyaml-6.0.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl\n"
        "pyyaml-extra==6.0.4 \\\n    --hash=sha256:" + "0" * 64 + "\n")
    with pytest.raises(LockError, match="several Pythons"):
        lock_needs(lock_pins(text), "mixed.lock")


def test_two_distributions_installing_the_same_file_are_refused_on_real_wheels():
    old = "cuda_python-12.6.2.post1-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl"
    bindings = "cuda_bindings-13.5.0-cp312-cp312-manylinux_2_24_aarch64.manylinux_2_28_aarch64.whl"
    found = shared_files({"cuda-python": listing(old), "cuda-bindings": listing(bindings)})
    assert found == ["cuda-bindings and cuda-python both install 28 file(s), e.g. cuda/bindings/__init__.pxd, "
                     "cuda/bindings/__init__.py, cuda/bindings/_internal/__init__.py"]
    # what the committed locks pin instead: the metapackage and its own bindings
    assert shared_files({"cuda-python": listing("cuda_python-13.4.4-py3-none-any.whl"),
                         "cuda-bindings": listing(bindings.replace("13.5.0", "13.4.4"))}) == []
    # the one shared file the CUDA locks let pass, and only with its reason
    pair = {"flashinfer-python": listing("flashinfer_python-0.7.2.post1-py3-none-any.whl"),
            "torch-c-dlpack-ext": listing(
                "torch_c_dlpack_ext-0.1.5-cp312-cp312-manylinux_2_24_aarch64.manylinux_2_28_aarch64.whl")}
    assert shared_files(pair) == ["flashinfer-python and torch-c-dlpack-ext both install 1 file(s), "
                                  "e.g. build_backend.py"]
    assert shared_files(pair, vllm_lock.SHARED) == []
    assert set(vllm_lock.SHARED) == {"build_backend.py"}


@pytest.mark.parametrize("wheel, expected", [
    ("torch-2.14.0-cp312-cp312-manylinux_2_28_aarch64.whl", ("3.12", (2, 28), "aarch64")),
    ("numpy-2.3.5-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl", ("3.11", (2, 27), "x86_64")),
    ("pydantic_core-2.50.5-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", ("3.11", (2, 17), "x86_64")),
    ("llguidance-1.7.6-cp39-abi3-manylinux_2_31_x86_64.whl", (None, (2, 31), "x86_64")),
    ("agent_detector-2.0.0-py3-none-any.whl", (None, None, None)),
])
def test_a_wheel_s_tags_say_what_it_needs(wheel, expected):
    found = wheel_needs(wheel)
    assert (found["python"], found["glibc"], found["arch"]) == expected


def test_a_non_linux_or_malformed_wheel_name_is_refused():
    with pytest.raises(LockError, match="not a Linux one"):
        wheel_needs("torch-2.14.0-cp312-none-macosx_11_0_arm64.whl")
    with pytest.raises(LockError, match="not a wheel's file name"):
        wheel_needs("torch-2.14.0.tar.gz")


def test_the_c_library_version_is_read_as_confstr_says_it():
    assert glibc_version(lambda _: "glibc 2.36") == "2.36"

    def musl(_):
        raise ValueError("unrecognized configuration name")
    assert glibc_version(musl) is None
    if sys.platform == "linux":
        assert glibc_version() == os.confstr("CS_GNU_LIBC_VERSION").split()[1]


def test_the_lock_tool_picks_the_wheel_a_node_installs_asking_least_of_its_glibc():
    tags = vllm_lock.target_tags("3.11", "x86_64", (2, 35))
    files = [{"filename": f, "hashes": {"sha256": "a" * 64}, "url": ""} for f in (
        "cryptography-51.0.1-cp311-abi3-manylinux_2_34_x86_64.whl",
        "cryptography-51.0.1-cp311-abi3-manylinux_2_28_x86_64.whl",
        "cryptography-51.0.1-cp311-abi3-manylinux_2_28_aarch64.whl",
        "cryptography-51.0.1-cp311-abi3-musllinux_1_2_x86_64.whl",
        "cryptography-51.0.1-cp311-abi3-manylinux_2_38_x86_64.whl")]
    original = vllm_lock.index_files
    vllm_lock.index_files = lambda name: files
    try:
        assert vllm_lock.choose_wheel("cryptography", "51.0.1", tags)["filename"] == \
            "cryptography-51.0.1-cp311-abi3-manylinux_2_28_x86_64.whl"
        with pytest.raises(vllm_lock.LockToolError, match="no wheel a node"):
            vllm_lock.choose_wheel("cryptography", "50.0", tags)
    finally:
        vllm_lock.index_files = original
    assert Path(vllm_lock.LOCKS_DIR) == LOCKS
