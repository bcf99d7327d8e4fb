"""The group's collectives (module_utils/rails/collective.py): the figures
held to nccl-tests' own on its real tables, the bus bandwidth judged on
them, NCCL's transport read from real NCCL_DEBUG=INFO logs
(tests/fixtures/nccl), and the sweep's own outputs as torch's gloo printed
them here (tests/fixtures/collective/SOURCES.md); the decision to measure
(module_utils/stages/measure_due.py)."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from ansible.module_utils.rails import collective
from ansible.module_utils.rails.nccl_log import parse_tests
from ansible.module_utils.stages.measure_due import collective_due

NCCL = FIXTURES / "nccl"
OWN = FIXTURES / "collective"
HEALTHY_SPARK = "nccl_2.28.9_nccl_tests_2.18.3_all_gather_perf_dgx_spark_pair_healthy_21gbps_via_qsfp_switch_idx61925772940.txt"
DEGRADED_SPARK = ("nccl_2.28.9_nccl_tests_2.18.3_all_gather_perf_dgx_spark_pair_degraded_2.8gbps_after_qsfp_recable_"
                  "idx61925772940.txt")
ONE_VF_ALL_REDUCE = ("nccl_2.21.5_debug_info_net_ib_one_hca_mlx5_2_roce_sriov_vf_ibext_v8_2pod_all_reduce_perf_p40_"
                     "koordinator_report_idx7606244888.txt")
WRONG_VALUES = ("nccl_unknown_nccl_tests_all_reduce_perf_wrong_values_oob_108_failed_inc_rdma_mtu256_2node_rtx3090_"
                "idx20801464614.txt")
SPARK_LOG = ("nccl_2.28.9_debug_info_net_ib_two_hcas_rocep1s0f1_roceP2p1s0f1_dgx_spark_pair_all_gather_healthy_"
             "idx61925772940.txt")
SPARK_RAILS = [{"name": "rail0", "rdma_device": "rocep1s0f1"}, {"name": "rail1", "rdma_device": "roceP2p1s0f1"}]


def nccl_tests_rows(name: str, op: str) -> list[dict]:
    """nccl-tests' rows as the sweep gives them: op, size, time_us (out of place)."""
    return [{"op": op, "size": r["size"], "time_us": r["time_us"], "correct": True}
            for r in parse_tests((NCCL / name).read_text())["rows"]]


@pytest.mark.parametrize("name,op", [(HEALTHY_SPARK, "all_gather"), (DEGRADED_SPARK, "all_gather"),
                                     (ONE_VF_ALL_REDUCE, "all_reduce"), (WRONG_VALUES, "all_reduce")])
def test_the_figures_are_nccl_tests_own_from_its_sizes_and_times(name, op):
    table = parse_tests((NCCL / name).read_text())["rows"]
    ours = collective.figures(nccl_tests_rows(name, op), world=2)
    assert len(ours) == len(table) >= 3
    for mine, theirs in zip(ours, table):
        # nccl-tests prints two decimals: ours from the same size and time agree to them
        assert mine["algbw"] == pytest.approx(theirs["algbw"], abs=0.006)
        assert mine["busbw"] == pytest.approx(theirs["busbw"], abs=0.006)


def test_the_bus_factors_are_nccl_tests():
    assert collective.bus_factor("all_reduce", 2) == 1.0
    assert collective.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert collective.bus_factor("all_gather", 4) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="all_reduce, all_gather"):
        collective.bus_factor("broadcast", 2)


def test_a_gb10_pair_over_both_halves_passes_and_the_recabled_pair_fails_with_its_figures():
    need = {"gbytes": 12.5, "basis": "0.5 x (rail0 100.0 + rail1 100.0) Gb/s measured by the bandwidth stage / 8"}
    healthy = collective.figures(nccl_tests_rows(HEALTHY_SPARK, "all_gather"), 2)
    assert collective.bandwidth_problems(healthy, need, host="spark-fb97") == []
    assert collective.peaks(healthy)["all_gather"]["busbw"] > 20
    degraded = collective.figures(nccl_tests_rows(DEGRADED_SPARK, "all_gather"), 2)
    [said] = collective.bandwidth_problems(degraded, need, host="spark-fb97")
    assert said.startswith("collectives: spark-fb97: all_gather reached 2.8")
    assert "required 12.5 GB/s (0.5 x (rail0 100.0 + rail1 100.0)" in said


def test_nccl_s_transport_is_read_from_its_own_log():
    problems, used = collective.transport_problems((NCCL / SPARK_LOG).read_text(), host="spark-fb97",
                                                   devices=["rocep1s0f1", "roceP2p1s0f1"], interface="enp1s0f1np1")
    assert problems == []
    assert all(u["ib_devices"] == ["rocep1s0f1:1/RoCE", "roceP2p1s0f1:1/RoCE"] for u in used.values())
    one, _ = collective.transport_problems((NCCL / ONE_VF_ALL_REDUCE).read_text(), host="p40-a",
                                           devices=["mlx5_2", "mlx5_3"], interface="eth0")
    assert any("p40-a: " in p and "not mlx5_3: 1 of the 2 rails' devices carry the group" in p for p in one)
    socket = next(NCCL.glob("nccl_2.11.4_*socket*"))
    over, _ = collective.transport_problems(socket.read_text(), host="gpu01", devices=["mlx5_0"],
                                            interface="enp225s0f1")
    assert any("moves the data over sockets" in p for p in over)


def test_the_rails_the_group_crosses():
    assert [r["name"] for r in collective.rails_used("nccl", SPARK_RAILS)] == ["rail0", "rail1"]
    tcp = [{"name": "rail0", "rdma_device": None}, {"name": "rail1", "rdma_device": None}]
    assert [r["name"] for r in collective.rails_used("nccl", tcp)] == ["rail0"]
    assert [r["name"] for r in collective.rails_used("gloo", SPARK_RAILS)] == ["rail0"]


def test_what_is_required_comes_from_the_bandwidth_stage_s_report():
    report = json.loads((FIXTURES / "monitoring" / "bandwidth_lab.json").read_text())
    one = collective.required(report, ["rail0"], 0.5)
    assert one["gbytes"] == pytest.approx(0.5 * 13.64739587809745 / 8, abs=0.001)
    assert "rail0 13.6" in one["basis"] and report["run"] in one["basis"]
    both = collective.required(report, ["rail0", "rail1"], 0.5)
    assert both["gbytes"] == pytest.approx(0.5 * (13.64739587809745 + 18.339408141015745) / 8, abs=0.001)
    assert collective.required(None, ["rail0"], 0.5)["gbytes"] is None
    assert "measured no rail2" in collective.required(report, ["rail0", "rail2"], 0.5)["basis"]
    with pytest.raises(ValueError, match=r"fraction in \(0, 1\]"):
        collective.required(report, ["rail0"], 1.5)


def own(name: str) -> str:
    return (OWN / name).read_text()


def test_the_sweep_s_own_output_passes_and_an_impossible_requirement_names_both_operations():
    out = own("gloo_torch2.13.0_2rank_loopback_rank0.stdout")
    ok = collective.verdict(out, 0, "", host="lab-master", backend="gloo", world=2, devices=[], interface="lo",
                            need={"gbytes": 0.05, "basis": "test"})
    assert ok["ok"], ok["problems"]
    assert [r["op"] for r in ok["rows"]] == ["all_reduce"] * 3 + ["all_gather"] * 3
    assert all(r["correct"] and r["busbw"] > 0 for r in ok["rows"])
    assert collective.summary("lab-master", "gloo", ok, {"gbytes": 0.05}).startswith(
        "collectives: lab-master: gloo: all_reduce ")
    bad = collective.verdict(out, 0, "", host="lab-master", backend="gloo", world=2, devices=[], interface="lo",
                             need={"gbytes": 1000, "basis": "1 x rail0"})
    assert not bad["ok"]
    assert [p.split(" reached")[0] for p in bad["problems"]] == ["collectives: lab-master: all_gather",
                                                                 "collectives: lab-master: all_reduce"]
    assert all("required 1000 GB/s (1 x rail0)" in p for p in bad["problems"])


def test_three_ranks_and_a_wrong_value_is_named():
    out = own("gloo_torch2.13.0_3rank_loopback_rank2.stdout")
    result = collective.verdict(out, 0, "", host="lab-worker2", backend="gloo", world=3, devices=[], interface="lo",
                                need={"gbytes": None})
    assert result["ok"]
    # all_reduce's bus factor for 3 ranks is 4/3
    row = result["rows"][0]
    assert row["busbw"] == pytest.approx(row["algbw"] * 4 / 3, abs=0.002)
    # the same output with one rank's all_gather check failing
    line = json.loads(out)
    line["rows"][-1]["correct"] = False
    wrong = collective.verdict(json.dumps(line), 0, "", host="lab-worker2", backend="gloo", world=3, devices=[],
                               interface="lo", need={"gbytes": None})
    assert wrong["problems"] == ["collectives: lab-worker2: wrong values after all_gather of 33554432 bytes"]


def test_a_group_that_does_not_form_names_the_node_and_torch_s_words():
    err = own("gloo_torch2.13.0_rank1_alone_rendezvous_timeout.stderr")
    result = collective.verdict("", 1, err, host="lab-worker1", backend="gloo", world=2, devices=[],
                                interface="eth1", need={"gbytes": None})
    [said] = result["problems"]
    assert said.startswith("collectives: lab-worker1: the gloo group failed (exit 1): the group did not form in time")
    assert "DistNetworkError: The client socket has timed out" in said


# --------------------------------------------------------------------------
# when it measures

FP = {"hosts": {"a": {"NCCL_IB_HCA": "=m0,m1"}, "b": {"NCCL_IB_HCA": "=m0,m1"}}, "runtime": "r1",
      "backend": "nccl", "rails": ["rail0", "rail1"], "bandwidth_run": "20261201T155608Z",
      "settings": {"sizes_mib": [1, 32, 512], "iterations": 5, "min_share": 0.5}}


def kept(**over):
    return dict({"run": "20261201T160000Z", "passed": True, "fingerprint": json.loads(json.dumps(FP))}, **over)


def test_a_serving_group_as_measured_is_not_measured_again():
    due = collective_due(kept(), FP, [], "auto", False)
    assert not due["measure"] and due["reasons"] == []
    assert "still holds" in due["msg"] and "on a, b" in due["msg"]


def test_what_makes_it_measure_is_said():
    assert collective_due(None, FP, [], "auto", False)["reasons"] == ["no collectives report kept on the controller"]
    assert collective_due(kept(), FP, ["b"], "auto", False)["reasons"] == [
        "the group starts on b (its engine is not running or its configuration changed)"]
    assert "failed its gate" in collective_due(kept(passed=False), FP, [], "auto", False)["reasons"][0]
    changed = json.loads(json.dumps(FP))
    changed["hosts"]["b"]["NCCL_IB_HCA"] = "=m0"
    changed["settings"]["min_share"] = 0.6
    changed["bandwidth_run"] = "20261202T000000Z"
    assert collective_due(kept(), changed, [], "auto", False)["reasons"] == [
        "bandwidth_run '20261201T155608Z' -> '20261202T000000Z'",
        "b: NCCL_IB_HCA '=m0,m1' -> '=m0'",
        "setting min_share 0.5 -> 0.6"]
    assert collective_due(kept(), FP, [], "always", False)["measure"]
    assert collective_due(kept(), FP, [], "always", False)["reasons"] == [
        "asked for (inference_service_measure=always)"]


def test_the_group_s_problems_and_nccl_versions_that_differ():
    out = own("gloo_torch2.13.0_2rank_loopback_rank0.stdout")
    ok = collective.verdict(out, 0, "", host="a", backend="gloo", world=2, devices=[], interface="lo",
                            need={"gbytes": None})
    assert collective.group_problems({"a": ok, "b": ok}) == []
    # what NCCL's own banner said on each node (its INFO lines), two versions
    _, used_new = collective.transport_problems((NCCL / SPARK_LOG).read_text(), host="a",
                                                devices=["rocep1s0f1", "roceP2p1s0f1"], interface="enp1s0f1np1")
    _, used_old = collective.transport_problems(next(NCCL.glob("nccl_2.11.4_*")).read_text(), host="b",
                                                devices=["mlx5_0"], interface="enp225s0f1")
    said = collective.group_problems({"a": dict(ok, used=used_new), "b": dict(ok, used=used_old, problems=["x"])})
    assert said == ["x", "collectives: NCCL versions differ across the group: a 2.28.9+cuda13.0; b 2.11.4+cuda11.4 "
                         "(every node must load the lock's NCCL)"]


def test_the_nodes_that_start_are_every_node_on_a_restart_else_those_not_running():
    from ansible.module_utils.stages.measure_due import starting_nodes  # pylint: disable=import-outside-toplevel

    running = {"lab-worker1": "active", "lab-master": "inactive"}
    assert starting_nodes(running, False) == ["lab-master"]
    assert starting_nodes(running, True) == ["lab-master", "lab-worker1"]
    assert starting_nodes({"a": "active", "b": "active"}, False) == []
    assert starting_nodes({"a": "failed", "b": "activating"}, False) == ["a", "b"]
