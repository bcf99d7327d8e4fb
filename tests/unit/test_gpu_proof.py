"""make gpu-proof's CPU-side parts (tools/gpu_proof.py) and the runtime
build's definitions it shares with the runtime stage
(module_utils/runtime/build.py): what the CUDA build links statically and
what it cannot, the trimmed source and the derived model that fit one
call to the GPU machine, the build script rendered from the stage's own
template, and the dry run that checks them."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile

import pytest
from conftest import REPO

from ansible.module_utils.runtime.build import (CUDA_DRIVER, GLIBC, SHIPPED_RUNPATH, cmake_definitions, fully_static, link_allowlist,
                           runpaths, shipped)

sys.path.insert(0, str(REPO / "tools"))
import gpu_proof  # noqa: E402  pylint: disable=wrong-import-position
import gpu_proof_prepare  # noqa: E402  pylint: disable=wrong-import-position

RDMA_ALLOW = ["libibverbs.so.1", "libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"]


def test_only_the_driver_library_and_glibc_stay_dynamic_in_a_cuda_build():
    cpu = cmake_definitions(["-march=x86-64"], False, "121", False)
    assert fully_static(False, False) and cpu["CMAKE_EXE_LINKER_FLAGS"] == "-static"
    assert "CMAKE_CUDA_ARCHITECTURES" not in cpu and not any(k.startswith("CUDA_") for k in cpu)
    cuda = cmake_definitions(["-march=armv9-a+i8mm+bf16"], True, "121", True, "/usr/local/cuda-13.0/")
    assert cuda["GGML_CUDA"] == "ON" and cuda["CMAKE_CUDA_ARCHITECTURES"] == "121"
    assert cuda["CMAKE_EXE_LINKER_FLAGS"] == "-static-libstdc++ -static-libgcc"
    # the CUDA runtime and cuBLAS from the toolkit's static archives, through FindCUDAToolkit's own variables
    assert {k: v for k, v in cuda.items() if k.startswith("CUDA_")} == {
        "CUDA_cudart_LIBRARY": "/usr/local/cuda-13.0/lib64/libcudart_static.a",
        "CUDA_cublas_LIBRARY": "/usr/local/cuda-13.0/lib64/libcublas_static.a",
        "CUDA_cublasLt_LIBRARY": "/usr/local/cuda-13.0/lib64/libcublasLt_static.a"}
    assert link_allowlist([], RDMA_ALLOW, False, False) == []
    assert link_allowlist([], RDMA_ALLOW, True, False) == list(CUDA_DRIVER + GLIBC)
    both = link_allowlist([], RDMA_ALLOW, True, True)
    assert set(both) == set(RDMA_ALLOW) | {"libcuda.so.1"} and len(both) == len(set(both))
    assert not {"libstdc++.so.6", "libgcc_s.so.1", "libcudart.so.12", "libcublas.so.12"} & set(both)
    assert cmake_definitions([], False, "", False, extra={"LLAMA_BUILD_COMMIT": 7})["LLAMA_BUILD_COMMIT"] == "7"


def test_shared_cublas_ships_beside_the_binaries_found_through_origin():
    """A toolkit with only libcublas.so.N (the pip packages): the CUDA runtime
    still static, cuBLAS left to the linker's search and shipped, the
    binaries' only RUNPATH $ORIGIN/../lib, set at link time (no build-tree
    path), the link gate allowing cuBLAS's libraries of any version."""
    shared = cmake_definitions([], True, "121", False, "/opt/ctk", cublas="shared")
    assert shared["CUDA_cudart_LIBRARY"] == "/opt/ctk/lib64/libcudart_static.a"
    assert "CUDA_cublas_LIBRARY" not in shared and "CUDA_cublasLt_LIBRARY" not in shared
    assert shared["CMAKE_INSTALL_RPATH"] == "$ORIGIN/../lib" and shared["CMAKE_BUILD_WITH_INSTALL_RPATH"] == "ON"
    assert shared["CMAKE_EXE_LINKER_FLAGS"].endswith("-Wl,--enable-new-dtags")
    static = cmake_definitions([], True, "121", False, "/opt/ctk")
    assert static["CUDA_cublas_LIBRARY"] == "/opt/ctk/lib64/libcublas_static.a" and "CMAKE_INSTALL_RPATH" not in static
    assert runpaths(True, "shared") == [SHIPPED_RUNPATH] and runpaths(True, "static") == [] == runpaths(False, "shared")
    allowed = link_allowlist([], RDMA_ALLOW, True, False, "shared")
    assert allowed == list(CUDA_DRIVER + GLIBC) + ["libcublas.so.*", "libcublasLt.so.*"]
    assert link_allowlist([], RDMA_ALLOW, False, False, "shared") == []
    # the measured NEEDED of a server linked against the pip toolkit
    assert shipped(["libcublas.so.13", "libcuda.so.1", "libm.so.6", "libcublasLt.so.13"]) == [
        "libcublas.so.13", "libcublasLt.so.13"]
    with pytest.raises(ValueError, match="runtime_build_cublas: expected one of static, shared, got 'dynamic'"):
        cmake_definitions([], True, "121", False, cublas="dynamic")


def test_the_helpers_load_on_a_machine_without_ansible():
    """The GPU machine has Python, not Ansible: the loader makes the
    package bare over module_utils/ and the pure helpers import as on a node."""
    code = ("import sys; sys.modules['ansible'] = None; sys.path.insert(0, 'src');"
            "import twinrail.loader;"
            "from ansible.module_utils.gpu import facts; from ansible.module_utils.runtime import build;"
            "print(facts.bus_key('00000000:18:00.0'), build.CUDA_DRIVER)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0000:18:00.0 ('libcuda.so.1',)"


def test_the_trim_keeps_what_the_build_needs_and_drops_the_rest():
    keep = ["CMakeLists.txt", "ggml/src/ggml-cuda/fattn.cu", "ggml/src/ggml-rpc/ggml-rpc.cpp",
            "tools/rpc/rpc-server.cpp", "tools/server/server.cpp", "tools/ui/CMakeLists.txt", "vendor/cpp-httplib/httplib.h"]
    drop = ["models/ggml-vocab-llama-bpe.gguf", "docs/build.md", "ggml/src/ggml-vulkan/ggml-vulkan.cpp",
            "tools/ui/src/app.html", "media/llama0-logo.png"]
    def member(rel):
        info = tarfile.TarInfo(f"{gpu_proof_prepare.SUBDIR}/{rel}")
        info.size = 1
        return info
    assert [rel for rel in keep if gpu_proof_prepare.trimmed(member(rel))] == []
    assert [rel for rel in drop if not gpu_proof_prepare.trimmed(member(rel))] == []
    assert gpu_proof_prepare.trimmed(tarfile.TarInfo("llama_cpp_python-0.3.36/llama_cpp/llama.py"))


@pytest.fixture(name="prepared")
def fixture_prepared(gpu_proof_prepared):
    return gpu_proof_prepared


def test_prepare_fits_one_call_and_the_dry_run_checks_it(prepared, capsys):
    out, manifest = prepared
    assert manifest["total_bytes"] <= 64 << 20 and manifest["limit_bytes"] == 64 << 20
    assert set(manifest["files"]) == {"llama.cpp.tar.xz", "model.gguf", "build-cpu.sh", "build-cuda.sh"}
    with tarfile.open(out / "llama.cpp.tar.xz") as archive:
        names = set(archive.getnames())
    assert f"{gpu_proof_prepare.SUBDIR}/ggml/src/ggml-cuda/CMakeLists.txt" in names
    assert not any(n.startswith(f"{gpu_proof_prepare.SUBDIR}/models/") or n.endswith(".gguf") for n in names)
    assert f"{gpu_proof_prepare.SUBDIR}/src/models/llama.cpp" in names  # the architectures' code is the build's
    # the model: the lab's SmolLM2 cut to its first four layers, read back by the plan's own GGUF reader
    assert manifest["model"]["figures"]["layers"] == 4 and manifest["model"]["architecture"] == "llama"
    # the stage's template, rendered by Ansible with the stage's definitions
    cuda = (out / "build-cuda.sh").read_text()
    assert "-DGGML_CUDA=ON" in cuda and "-DCUDA_cudart_LIBRARY=@CUDA_ROOT@/lib64/libcudart_static.a" in cuda
    assert "--target llama-server ggml-rpc-server llama-bench" in cuda and "Ansible managed" in cuda
    assert "-DCMAKE_EXE_LINKER_FLAGS=-static " in (out / "build-cpu.sh").read_text()
    assert gpu_proof.main(["run", "--dir", str(out), "--dry-run", "--cpu"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["variant"] == "cpu" and report["would_run"][1] == "llama-bench -ngl 0"


def test_a_damaged_prepared_file_stops_the_run(prepared, tmp_path, capsys):
    out, _ = prepared
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in out.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    with (copy / "model.gguf").open("r+b") as handle:
        handle.seek(1 << 20)
        handle.write(b"\0\1\2\3")
    assert gpu_proof.main(["run", "--dir", str(copy), "--dry-run", "--cpu"]) == 1
    assert "model.gguf: missing or not the prepared file" in capsys.readouterr().err


PROOF = REPO / "tests" / "fixtures" / "gpu-proof"


def test_llama_bench_json_is_read_and_its_failure_quoted():
    """llama-bench's own JSON from the CPU path's run; a run whose model
    failed to load prints '[' alone and says why on stderr."""
    figures = gpu_proof.parse_bench((PROOF / "llama-bench_cpu_ngl0_smollm2_4layers_2cpu.json").read_text())
    assert figures == {"pp": {"tokens_per_s": 3264.19, "stddev": 15.66, "tokens": 128, "backends": "CPU",
                              "n_gpu_layers": 0},
                       "tg": {"tokens_per_s": 478.51, "stddev": figures["tg"]["stddev"], "tokens": 64,
                              "backends": "CPU", "n_gpu_layers": 0}}
    with pytest.raises(gpu_proof.ProofError, match="llama-bench printed no complete JSON: llama_bench: error: "
                                                   "failed to load model '/nonexistent.gguf'"):
        gpu_proof.parse_bench((PROOF / "llama-bench_fail_missing_model.stdout").read_text(),
                              (PROOF / "llama-bench_fail_missing_model.stderr").read_text())


def test_the_proofs_rpc_logs_pass_the_projects_gates():
    """What the CPU path's loopback pair printed, through the gates the
    proof runs: the split the plan gave (-ngl 3 of 4 layers on the RPC
    server, the first on the master's CPU) and a healthy, connected RPC
    server on TCP."""
    from ansible.module_utils.engines.llamacpp.tensor_split import measured_shares, parse_buffers, plan_split, split_problems
    from ansible.module_utils.engines.llamacpp.rpc_transport import parse_log, server_problem

    plan = plan_split("master", ["worker"], {"worker": [{"name": "loopback", "address": "127.0.0.1/8"}]},
                      33725, 4, False)
    assert plan["gpu_layers"] == 3 and plan["endpoints"] == ["127.0.0.1:33725"]
    log = parse_buffers((PROOF / "llama-server_cpu_master_rpc_loopback_lv4.log").read_text())
    assert [(b["device"], b["kind"]) for b in log["buffers"]] == [
        ("CPU_Mapped", "model"), ("RPC0[127.0.0.1:33725]", "model"), ("CPU", "KV"), ("RPC0[127.0.0.1:33725]", "KV")]
    measured = measured_shares(log["buffers"], plan["devices"], "master")
    assert split_problems(plan, measured, 0.1) == [] and round(measured["nodes"]["worker"]["share"], 2) == 0.5
    rpc = parse_log((PROOF / "rpc-server_cpu_loopback_tcp_v7.log").read_text())
    assert server_problem(rpc) is None and rpc["endpoint"] == "127.0.0.1:33725" and len(rpc["connections"]) == 13
