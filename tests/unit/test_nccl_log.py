"""NCCL's own words read (module_utils/rails/nccl_log.py) on real NCCL_DEBUG=INFO
logs and nccl-tests outputs (tests/fixtures/nccl/SOURCES.md): each capture
judged against the rails its own site meant NCCL to use. The directory is
enumerated: a capture added without a verdict fails, and no failure
capture reads as healthy."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ansible.module_utils.rails.nccl_log import parse_debug, parse_tests, problems

NCCL = FIXTURES / "nccl"
SPARK = (["rocep1s0f1", "roceP2p1s0f1"], "enp1s0f1np1")
SPARK_F0 = (["rocep1s0f0", "roceP2p1s0f0"], "enp1s0f0np0")
# capture -> (its site's rail devices, rail0 interface, bus bandwidth required GB/s or None,
#             what the verdict must say: [] for healthy, else a fragment per expected problem)
VERDICTS = {
    # two DGX Sparks, both halves of the ConnectX-7 port, 21.96 GB/s all_gather: what a GB10 pair should show
    "nccl_2.28.9_debug_info_net_ib_two_hcas_rocep1s0f1_roceP2p1s0f1_dgx_spark_pair_all_gather_healthy_"
    "idx61925772940.txt": (*SPARK, 15.0, []),
    "nccl_2.28.9_nccl_tests_2.18.3_all_gather_perf_dgx_spark_pair_healthy_21gbps_via_qsfp_switch_idx61925772940.txt":
        (*SPARK_F0, 15.0, ["NCCL printed no INFO line"]),
    # the same pair on a re-cabled QSFP: both devices, 2.8 GB/s
    "nccl_2.28.9_nccl_tests_2.18.3_all_gather_perf_dgx_spark_pair_degraded_2.8gbps_after_qsfp_recable_"
    "idx61925772940.txt": (*SPARK_F0, 15.0, ["NCCL printed no INFO line",
                                             "average bus bandwidth 2.82151 GB/s, required 15 GB/s"]),
    "nccl_2.28.9_debug_info_net_ib_two_hcas_rocep1s0f0_roceP2p1s0f0_dgx_spark_direct_qsfp_degraded_2.8gbps_head_"
    "idx61925772940.txt": (*SPARK_F0, 15.0, []),
    "nccl_2.28.9_debug_info_net_ib_two_hcas_dgx_spark_direct_qsfp_degraded_2.8gbps_tail_results_idx61925772940.txt":
        (*SPARK_F0, 15.0, ["its log does not say which network", "average bus bandwidth 2.83174 GB/s"]),
    # two HCAs of H100 and L40 nodes, on the site's own OOB interface
    "nccl_2.19.3_debug_info_net_ib_two_hcas_mlx5_10_mlx5_11_roce_2node_dgx_h100_nccl_tests_issue185_excerpt.txt":
        (["mlx5_10", "mlx5_11"], "enp220s0np0", None, []),
    "nccl_2.26.5_debug_info_net_ib_two_hcas_mlx5_bond_6_7_roce_rdma_plugin_v6_gid_index_env_2node_h20_alltoall_perf_"
    "nccl_tests_issue321.txt": (["mlx5_bond_6", "mlx5_bond_7"], "bond0", None, []),
    # one VF where two rails are meant; 2.6 GB/s
    "nccl_2.21.5_debug_info_net_ib_one_hca_mlx5_2_roce_sriov_vf_ibext_v8_2pod_all_reduce_perf_p40_koordinator_"
    "report_idx7606244888.txt": (["mlx5_2", "mlx5_3"], "eth0", 10.0,
                                 ["NCCL uses mlx5_2, not mlx5_3: 1 of the 2 rails' devices carry the group",
                                  "average bus bandwidth 2.61937 GB/s"]),
    # NCCL_IB_HCA of 8 devices prefix-matched a ninth (mlx5_1 -> mlx5_10)
    "nccl_2.29.3_debug_info_net_ib_hca_set_8_devices_prefix_match_uses_9_incl_mlx5_10_roce_2node_8gpu_sglang_"
    "idx33302101750.txt": ([f"mlx5_{i}" for i in range(8)], "ens3np0", None,
                           ["NCCL uses mlx5_10, which is no rail's device"]),
    # sockets
    "nccl_2.11.4_debug_info_socket_net_socket_ifname_set_by_environment_en_2node_dgx_a100_issue676_excerpt.txt":
        (["mlx5_0"], "enp225s0f1", None, ["NCCL moves the data over sockets (enp225s0f1)"]),
    "nccl_2.14.3_socket_fallback_net_ib_no_device_found_socket_ifname_set_by_environment_2node_torchrun_"
    "issue810_excerpt.txt": (["mlx5_0"], "enp129s0f0", None, ["NCCL found no RDMA device"]),
    "nccl_2.22.3_debug_info_socket_fallback_net_ib_no_device_found_eth0_3node_24rank_gke_a3_hypercomputer_lab15_"
    "grep_extract.txt": (["mlx5_0"], "eth0", None, ["NCCL found no RDMA device"]),
    # failures: the bootstrap's interface missing, a CUDA failure, a peer gone, a hang at a collective
    "nccl_2.22.3_socket_ifname_nonexistent_bootstrap_no_socket_interface_ncclInternalError_gke_a3_hypercomputer_"
    "lab15.txt": (["mlx5_0"], "eth0", None, ["NCCL warned: Bootstrap : no socket interface found",
                                             "NCCL failed: ncclInternalError"]),
    "nccl_2.18.3_warn_cuda_failure_invalid_argument_proxy_service_connect_failed_2node_mpirun_issue957_excerpt.txt":
        (["mlx5_0"], "eth0", None, ["NCCL warned: Cuda failure 'invalid argument'"]),
    "nccl_2.20.5_torch_distbackenderror_unhandled_cuda_error_ncclUnhandledCudaError_issue1410.txt":
        (["mlx5_0"], "eth0", None, ["NCCL failed: ncclUnhandledCudaError"]),
    "nccl_2.21.5_torch_distbackenderror_remote_process_exited_ncclRemoteError_socketProgressOpt_connection_reset_v100_"
    "issue2076.txt": (["mlx5_0"], "eth0", None, ["NCCL failed: remote process exited or there was a network error"]),
    "nccl_2.22.3_torch_ncclRemoteError_remote_process_exited_peer_pod_deleted_4rank_gke_hypercomputer_lab10_"
    "annotated.txt": (["mlx5_0"], "eth0", None, ["NCCL failed: ncclRemoteError"]),
    "nccl_2.22.3_torch_watchdog_timeout_allreduce_seqnum3_straggler_3node_24rank_socket_gke_a3_hypercomputer_"
    "lab15.txt": (["mlx5_0"], "eth0", None, ["NCCL failed: Watchdog caught collective operation timeout: "
                                             "WorkNCCL(SeqNum=3, OpType=ALLREDUCE"]),
    # every row's #wrong non-zero (an in-network reduction at RDMA MTU 256), 108 out of bounds
    "nccl_unknown_nccl_tests_all_reduce_perf_wrong_values_oob_108_failed_inc_rdma_mtu256_2node_rtx3090_"
    "idx20801464614.txt": (["mlx5_0"], "eth0", None, ["NCCL printed no INFO line",
                                                       "nccl-tests: wrong values (out of bounds: 108)"]),
    "nccl_unknown_torch_watchdog_timeout_seqnum1_first_allreduce_multinode_polaris_aws_ofi_libfabric_alcf_nccl_tests_"
    "readme.txt": (["mlx5_0"], "hsn0", None, ["NCCL failed: Watchdog caught collective operation timeout: "
                                              "WorkNCCL(SeqNum=1"]),
}


def test_every_capture_has_a_verdict_and_a_source():
    found = {p.name for p in NCCL.glob("*.txt")}
    assert found == set(VERDICTS), (sorted(found - set(VERDICTS)), sorted(set(VERDICTS) - found))
    listed = (NCCL / "SOURCES.md").read_text()
    assert [n for n in found if n not in listed] == []


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_each_capture_reads_as_its_verdict(name):
    devices, interface, min_busbw, expected = VERDICTS[name]
    text = (NCCL / name).read_text()
    tests = parse_tests(text)
    got = problems(parse_debug(text), tests if tests["rows"] else None, devices=devices, interface=interface,
                   min_busbw=min_busbw)
    if not expected:
        assert got == [], got
    for fragment in expected:
        assert any(fragment in said for said in got), (fragment, got)


def test_the_healthy_spark_pair_uses_both_halves_and_its_figures_are_read():
    text = (NCCL / "nccl_2.28.9_debug_info_net_ib_two_hcas_rocep1s0f1_roceP2p1s0f1_dgx_spark_pair_all_gather_"
                   "healthy_idx61925772940.txt").read_text()
    debug = parse_debug(text)
    assert sorted(debug["hosts"]) == ["spark-4440", "spark-fb97"]
    for host in debug["hosts"].values():
        assert host["version"] == "2.28.9+cuda13.0" and host["network"] == "IB" and host["init_complete"]
        assert host["ib_devices"] == ["rocep1s0f1:1/RoCE", "roceP2p1s0f1:1/RoCE"] and host["oob"] == "enp1s0f1np1"
        assert host["env"]["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1"
    tests = parse_tests(text)
    assert tests["test"] == "all_gather_perf" and tests["avg_busbw"] == 21.9636
    assert tests["out_of_bounds"] == {"count": 0, "verdict": "OK"}
    # the same log judged against the other cage's devices: both named
    assert problems(debug, tests, devices=SPARK_F0[0], interface=SPARK_F0[1])[0].endswith(
        "not rocep1s0f0, roceP2p1s0f0: 0 of the 2 rails' devices carry the group")
