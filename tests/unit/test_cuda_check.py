"""make cuda-check's own logic (tools/cuda_check.py) that runs without the
toolkit: the profiles it builds and what it refuses."""

from __future__ import annotations

import pytest

import cuda_check


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
