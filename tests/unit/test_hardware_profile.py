"""Hardware profiles (profiles/*.yml through lookup_plugins/twinrail_profile.py)
and preflight's profile gate (module_utils/inventory/hardware_profile.py), judged on
real captures from DGX Spark boxes (uname -a, ibdev2netdev, nvidia-smi) and
a Tesla T4 host (tests/fixtures/hardware/)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES

from ansible.module_utils.gpu.facts import parse_table
from ansible.module_utils.inventory.hardware_profile import host_facts, judge, parse_ibdev2netdev, parse_uname_machine, read_host

REPO = Path(__file__).resolve().parents[2]
HW = FIXTURES / "hardware"
_spec = importlib.util.spec_from_file_location("twinrail_profile_lookup", REPO / "lookup_plugins" / "twinrail_profile.py")
lookup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lookup)


def read(name: str) -> str:
    return (HW / name).read_text()


def spark(name: str = "spark-a") -> dict:
    """A DGX Spark as preflight sees it, from the real captures."""
    arch = parse_uname_machine(read("uname_a_lsb_release_dgx_spark_6.17.0-1021_dgxspark03_unresolved_repo.txt"))
    rows = parse_ibdev2netdev(read("ibdev2netdev_dgx_spark_f1_twins_up_roceP2_first_dxg-spark-1_connect_two_sparks.txt"))
    gpu = parse_table(read("nvidia-smi_gb10_table_prompt_firefox_procs_obrienlabs_blog.txt"))
    return host_facts({name: arch}, {name: {"rdma_devices": sorted({r["device"] for r in rows}),
                                            "connectx_functions": []}}, {name: gpu})


def test_the_spark_captures_read_as_an_aarch64_gb10_with_four_rdma_devices():
    facts = spark()["spark-a"]
    assert facts["architecture"] == "aarch64" and facts["gpus"] == 1
    assert facts["rdma_devices"] == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"]
    # the tool lists the twins in either order; the parse does not depend on it
    other = parse_ibdev2netdev(read("ibdev2netdev_dgx_spark_f1_twins_up_eugr_networking_doc.txt"))
    assert [(r["device"], r["netdev"], r["state"]) for r in other if r["state"] == "Up"] == [
        ("roceP2p1s0f1", "enP2p1s0f1np1", "Up"), ("rocep1s0f1", "enp1s0f1np1", "Up")]


def test_the_example_inventory_names_the_rails_as_a_spark_shows_them():
    rows = parse_ibdev2netdev(read("ibdev2netdev_dgx_spark_f1_twins_up_roceP2_first_dxg-spark-1_connect_two_sparks.txt"))
    up = {r["device"]: r["netdev"] for r in rows if r["state"] == "Up"}
    for host in ("spark-a", "spark-b"):
        rails = yaml.safe_load((REPO / "inventory" / "example" / "host_vars" / f"{host}.yml").read_text())["twinrail_rails"]
        assert {r["rdma_device"]: r["interface"] for r in rails} == up, host


def test_a_spark_matches_the_dgx_spark_profile():
    expect = lookup.setting("dgx-spark", "expect")
    cuda, rdma = lookup.setting("dgx-spark", "runtime_build_cuda"), lookup.setting("dgx-spark", "runtime_build_rdma")
    assert (cuda, rdma) == (True, True)
    assert judge("dgx-spark", expect, spark(), cuda, rdma) == []


def test_a_spark_is_refused_under_the_x86_profile_naming_host_and_architectures():
    failures = judge("x86-connectx", lookup.setting("x86-connectx", "expect"), spark(), False, True)
    assert failures == ["spark-a: twinrail_profile x86-connectx is for x86_64 hosts, this one is aarch64; name the "
                        "profile of this hardware (profiles/<name>.yml)"]


def test_a_t4_host_without_rdma_is_refused_under_the_dgx_spark_profile():
    gpu = parse_table(read("nvidia-smi_tesla_t4_table_535_old_layout_cloud_native_docs.txt"))
    hosts = host_facts({"gpu-x86": "x86_64", "bare": "x86_64"},
                       {"gpu-x86": {"rdma_devices": [], "connectx_functions": []}}, {"gpu-x86": gpu, "bare": None})
    failures = judge("dgx-spark", lookup.setting("dgx-spark", "expect"), hosts, True, True)
    assert failures == [
        "bare: twinrail_profile dgx-spark is for aarch64 hosts, this one is x86_64; name the profile of this hardware "
        "(profiles/<name>.yml)",
        "bare: no NVIDIA GPU (no nvidia-smi) while runtime_build_cuda is true",
        "bare: no RDMA device (/sys/class/infiniband is empty) and no ConnectX PCI function (vendor 0x15b3) while "
        "runtime_build_rdma is true",
        "gpu-x86: twinrail_profile dgx-spark is for aarch64 hosts, this one is x86_64; name the profile of this "
        "hardware (profiles/<name>.yml)",
        "gpu-x86: no RDMA device (/sys/class/infiniband is empty) and no ConnectX PCI function (vendor 0x15b3) while "
        "runtime_build_rdma is true"]


def test_a_connectx_function_without_its_driver_counts_as_rdma_hardware(tmp_path):
    # sysfs as a host shows it before mlx5_ib is loaded: the PCI function only
    for address, vendor in (("0000:01:00.0", "0x15b3\n"), ("0000:00:02.0", "0x8086\n")):
        (tmp_path / "bus" / "pci" / "devices" / address).mkdir(parents=True)
        (tmp_path / "bus" / "pci" / "devices" / address / "vendor").write_text(vendor)
    seen = read_host(str(tmp_path), str(tmp_path / "no-cpuinfo"), ())
    assert {k: v for k, v in seen.items() if k not in ("python", "glibc")} == {
        "rdma_devices": [], "connectx_functions": ["0000:01:00.0"], "cpu_flags": [], "nccl_settings": {}}
    hosts = host_facts({"n1": "x86_64"}, {"n1": seen}, {"n1": None})
    assert judge("x86-connectx", lookup.setting("x86-connectx", "expect"), hosts, False, True) == []
    hosts["n1"]["connectx_functions"] = []
    assert judge("x86-connectx", lookup.setting("x86-connectx", "expect"), hosts, False, True) != []


def test_every_profile_is_complete_and_the_lab_needs_no_gpu_nor_rdma():
    names = lookup.names()
    assert names == ["consumer-gpu", "dgx-spark", "gpu-server", "lab", "x86-connectx"]
    keys = {name: set(lookup.load(name)["settings"]) for name in names}
    assert len({frozenset(k) for k in keys.values()}) == 1, keys
    assert lookup.setting("lab", "expect") == {"architecture": "x86_64", "gpu": False, "rdma": False}
    assert lookup.setting("dgx-spark", "runtime_build_cuda_archs") == "121"
    # iommu=pt is an x86 parameter: never on the aarch64 profile's command line
    assert lookup.setting("dgx-spark", "kernel_tuning_cmdline") == ["pcie_aspm=off"]
    assert "iommu=pt" in lookup.setting("x86-connectx", "kernel_tuning_cmdline")


def test_an_unknown_profile_or_setting_is_named():
    with pytest.raises(ValueError, match=r"unknown profile 'dgx_spark'; expected one of consumer-gpu, dgx-spark, gpu-server, lab, x86-connectx"):
        lookup.setting("dgx_spark", "runtime_build_cuda")
    with pytest.raises(ValueError, match=r"profile 'lab' has no setting 'runtime_build_cudaa'"):
        lookup.setting("lab", "runtime_build_cudaa")


def run_play(tmp_path: Path, play: list, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml"), *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False)


def test_the_profile_gives_the_roles_defaults_and_the_inventory_still_wins(tmp_path):
    """The runtime stage's own defaults under each profile, then one of them
    set by the inventory (extra vars here): the setting wins over the profile."""
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "runtime_build", "tasks_from": "settings", "public": True}},
        {"ansible.builtin.debug": {"msg": "FLAGS={{ runtime_build_isa_flags | join(' ') }} CUDA={{ runtime_build_cuda }}"
                                          " CMAKE={{ __runtime_build_cmake.CMAKE_C_FLAGS }}"}}]}]
    out = run_play(tmp_path, play, "-e", '{"twinrail_profile": "dgx-spark", "runtime_build_cuda": false, '
                   '"runtime_build_rdma": false, "twinrail_runtime_root": "/opt/twinrail"}')
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "FLAGS=-march=armv9-a+i8mm+bf16 -mtune=neoverse-n2 CUDA=False CMAKE=-march=armv9-a+i8mm+bf16 -mtune=neoverse-n2" \
        in out.stdout
    out = run_play(tmp_path, play, "-e", '{"twinrail_profile": "lab", "twinrail_runtime_root": "/opt/twinrail"}')
    assert "FLAGS=-march=x86-64 -mtune=generic CUDA=False" in out.stdout, out.stdout[-2000:]
    out = run_play(tmp_path, play, "-e", "twinrail_profile=dgx_spark", "-e", "twinrail_runtime_root=/opt/twinrail")
    assert out.returncode != 0
    assert "twinrail_profile: localhost: unknown profile 'dgx_spark'; expected one of consumer-gpu, dgx-spark, gpu-server, lab, x86-connectx" \
        in out.stdout + out.stderr


def test_the_example_inventory_on_the_dgx_spark_profile_passes_the_controller_side_checks():
    """inventory/example (two Sparks, the dgx-spark profile: CUDA, RDMA,
    aarch64 flags) through preflight with its hosts pointed at a closed
    loopback port: every controller-side play passes (inventory, every
    stage's settings), and the run stops at the first contact with a host."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", str(REPO / "inventory" / "example"), str(REPO / "site.yml"),
                           "--tags", "preflight", "-e", "ansible_host=127.0.0.1", "-e", "ansible_port=1",
                           "-e", "vault_inference_service_operator_password=not-a-real-password",
                           "-e", "vault_inference_service_api_key=not-a-real-key-of-32-characters"],
                          cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=300)
    out = proc.stdout
    assert proc.returncode != 0
    recap = {m[0]: (int(m[1]), int(m[2])) for m in
             re.findall(r"^(\S+)\s+: ok=\d+\s+changed=\d+\s+unreachable=(\d+)\s+failed=(\d+)", out, re.M)}
    assert recap == {"localhost": (0, 0), "spark-a": (1, 0), "spark-b": (1, 0)}, out[-3000:]
    # the runtime stage's settings were judged with the profile's CUDA and RDMA build
    assert "TASK [runtime_build : Check the source, the ISA flags and the mode on the controller]" in out
    first_contact = out.index("PLAY [Preflight | check the hosts and the memory plan]")
    assert "fatal:" not in out[:first_contact] and "port 1: Connection refused" in out[first_contact:]


KERNELS = FIXTURES / "vllm" / "kernels"


@pytest.mark.parametrize("capture", [
    "cpuinfo_first_processor_dev_machine_amd_epyc_avx512_bf16.txt",
    "lscpu_amd_epyc_7763_avx2_no_avx512_rust_serialization_benchmark_readme.txt",
])
def test_a_vllm_cpu_lock_refuses_an_x86_cpu_without_avx2(tmp_path, capture):
    text = (KERNELS / capture).read_text()
    (tmp_path / "cpuinfo").write_text(text)
    seen = read_host(str(tmp_path), str(tmp_path / "cpuinfo"), ())
    assert "avx2" in seen["cpu_flags"]
    hosts = host_facts({"n1": "x86_64"}, {"n1": seen}, {"n1": None})
    lab = lookup.setting("lab", "expect")
    assert judge("lab", lab, hosts, False, False, "cpu") == []
    # the same CPU without AVX2 (an older Atom or a VM that hides it)
    hosts["n1"]["cpu_flags"] = [f for f in seen["cpu_flags"] if f != "avx2"]
    assert judge("lab", lab, hosts, False, False, "cpu") == [
        "n1: the vLLM engine's lock is a CPU build whose x86-64 kernels need avx2 and f16c; this CPU lacks avx2 "
        "(/proc/cpuinfo flags) and would die of SIGILL; run llama.cpp on this node (inference_service_engine: "
        "llamacpp)"]
    # no lock, no such check
    assert judge("lab", lab, hosts, False, False) == []



def test_a_stale_nccl_conf_on_a_gpu_node_of_the_vllm_engine_is_named(tmp_path):
    """A field report's engine image (tests/fixtures/nccl/SOURCES.md's
    neighbours: sglang on GB10s, its 4-byte warmup all_reduce frozen at 96 %
    GPU and 16 W) carried /etc/nccl.conf with NCCL_IB_USE_INLINE=1 and
    NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS=1: named before anything moves;
    comments and other keys are not NCCL's settings."""
    conf = tmp_path / "nccl.conf"
    conf.write_text("# written by an image build\nNCCL_IB_USE_INLINE=1\nNCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS=1\n"
                    "# NCCL_DEBUG=INFO\n")
    environment = tmp_path / "environment"
    environment.write_text('PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"\n')
    seen = read_host(str(tmp_path), str(tmp_path / "no-cpuinfo"), (str(conf), str(environment)))
    assert seen["nccl_settings"] == {str(conf): ["NCCL_IB_USE_INLINE=1", "NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS=1"]}
    hosts = host_facts({"spark-a": "aarch64"}, {"spark-a": seen}, {"spark-a": {"gpus": [{"index": 0}]}})
    spark = lookup.setting("dgx-spark", "expect")
    got = [f for f in judge("dgx-spark", spark, hosts, False, False, "cuda") if "nccl.conf" in f]
    assert got == [f"spark-a: {conf} sets NCCL_IB_USE_INLINE=1, NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS=1: NCCL takes "
                   "these under the vLLM group's own settings (a stale NCCL_IB_DISABLE, NCCL_P2P_DISABLE or "
                   "NCCL_IB_USE_INLINE breaks or hangs the group's first collective); remove them, twinrail sets what "
                   "NCCL needs in the engine's unit"]
    # llama.cpp (no NCCL), or a node without GPUs: not asked
    assert not [f for f in judge("dgx-spark", spark, hosts, False, False) if "nccl.conf" in f]
    hosts["spark-a"]["gpus"] = 0
    assert not [f for f in judge("dgx-spark", spark, hosts, False, False, "cuda") if "nccl.conf" in f]
