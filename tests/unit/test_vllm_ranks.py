"""The vLLM group read from its units' journals (module_utils/engines/vllm/ranks.py)
on real journals of the lab's two nodes serving with pipeline parallel 2
(tests/fixtures/vllm/journal/SOURCE.md): the group planned passes; a rank
missing, twice, met elsewhere or without its weights fails naming it."""

from __future__ import annotations

import pytest

from conftest import FIXTURES

from ansible.module_utils.engines.vllm.ranks import group_problems, read_ranks, summary

JOURNAL = FIXTURES / "vllm" / "journal"
MASTER = read_ranks((JOURNAL / "pp2-master-serving.txt").read_text())
WORKER = read_ranks((JOURNAL / "pp2-worker1-serving.txt").read_text())
PLAN = {"master": "lab-master", "rendezvous": "198.19.0.1:29500", "tensor": 1, "pipeline": 2}


def test_each_node_shows_its_rank():
    assert [(r["rank"], r["pp_rank"], r["tp_rank"], r["world_size"]) for r in MASTER] == [(0, 0, 0, 2)]
    assert [(r["rank"], r["pp_rank"], r["tp_rank"], r["world_size"]) for r in WORKER] == [(1, 1, 0, 2)]
    assert WORKER[0]["init"] == "tcp://198.19.0.1:29500" and WORKER[0]["backend"] == "gloo"
    assert WORKER[0]["loaded_s"] == 0.17


def test_the_group_planned_passes():
    by_host = {"lab-master": MASTER, "lab-worker1": WORKER}
    assert group_problems(by_host, **PLAN) == []
    assert summary(by_host).startswith("lab-master: rank 0 (pipeline 0, tensor 0, weights in 0.17 s); lab-worker1: rank 1")


def test_a_node_without_its_rank():
    got = group_problems({"lab-master": MASTER, "lab-worker1": []}, **PLAN)
    assert got == ["lab-worker1: its vLLM shows no rank since it started", "ranks 1 of 2 run on no node"]


def test_ranks_on_the_wrong_node_or_twice():
    got = group_problems({"lab-master": WORKER, "lab-worker1": MASTER + WORKER}, **PLAN)
    assert "lab-worker1: rank 1: also on lab-master" in got
    assert "rank 0 runs on lab-worker1, expected the master lab-master" in got


def test_another_rendezvous_world_or_no_weights():
    moved = [dict(WORKER[0], init="tcp://198.18.0.10:29500")]
    assert group_problems({"lab-master": MASTER, "lab-worker1": moved}, **PLAN) == [
        "lab-worker1: rank 1: met at tcp://198.18.0.10:29500, expected tcp://198.19.0.1:29500 (the master's rail0)"]
    unloaded = [{k: v for k, v in WORKER[0].items() if k != "loaded_s"}]
    assert group_problems({"lab-master": MASTER, "lab-worker1": unloaded}, **PLAN) == [
        "lab-worker1: rank 1: loaded no weights"]
    got = group_problems({"lab-master": MASTER, "lab-worker1": WORKER}, **dict(PLAN, tensor=2))
    assert "lab-master: rank 0: world size 2, expected 4 (tensor 2 x pipeline 2)" in got
    assert "ranks 2, 3 of 4 run on no node" in got


VERSIONS = FIXTURES / "vllm" / "journal-versions"
# capture -> (rank, world size, tensor rank where printed) of each rank it shows; every rank loaded
READ = {
    # Ray folds repeated lines ("[repeated 12x across cluster]"): one rank of sixteen shows
    "vllm_0.8.3_ray_multinode_pp2_tp8_rank_assign_and_weight_loading_dedup_segment_b_llm_k8s.txt": [(13, 16, 5)],
    # ranks printed bare (no process prefix), every rank's weights line
    "vllm_0.11.0_serve_tp4_single_node_startup_every_rank_prints_loading_rtx3090_sipeed_nanokvm.txt":
        [(0, 4, 0), (1, 4, 1), (2, 4, 2), (3, 4, 3)],
    # nested prefixes "(Worker pid=312) (Worker_TP0 pid=312)"; the weights line once a node
    "vllm_0.16.1rc1_serve_tp2_single_node_docker_compose_startup_qwen35_122b.txt": [(0, 2, 0), (1, 2, 1)],
    # only rank 0 prints its assignment; the weights line once a node
    "vllm_0.19.0_serve_tp4_single_node_k8s_startup_qwen25_72b_l40s.txt": [(0, 4, 0), (1, 4, None), (2, 4, None),
                                                                          (3, 4, None)],
    # the head node of --nnodes 2 (two DGX Sparks): rank 0 alone
    "vllm_0.21.1rc1_serve_mp_multinode_nnodes2_tp2_head_node_rank0_startup_dgx_spark.txt": [(0, 2, 0)],
    "vllm_0.22.1rc1_serve_tp2_single_node_v2_model_runner_startup_sm86.txt": [(0, 2, 0), (1, 2, None)],
    "vllm_0.25.0_serve_tp2_single_node_startup_dsv4_flash_sm120.txt": [(0, 2, 0), (1, 2, None)],
}


def test_every_version_capture_is_read():
    assert {p.name for p in VERSIONS.glob("*.txt")} == set(READ)


@pytest.mark.parametrize("name", sorted(READ))
def test_the_ranks_of_each_vllm_version_and_their_weights(name):
    ranks = read_ranks((VERSIONS / name).read_text())
    assert [(r["rank"], r["world_size"], r.get("tp_rank")) for r in ranks] == READ[name]
    assert all(r["loaded_s"] > 0 for r in ranks)  # a rank of a node that loaded is never "loaded no weights"


def test_a_single_node_group_of_a_newer_vllm_passes_and_one_of_its_ranks_missing_fails():
    ranks = read_ranks((VERSIONS / "vllm_0.19.0_serve_tp4_single_node_k8s_startup_qwen25_72b_l40s.txt").read_text())
    plan = {"master": "gpu1", "rendezvous": ranks[0]["init"].removeprefix("tcp://"), "tensor": 4, "pipeline": 1}
    assert group_problems({"gpu1": ranks}, **plan) == []
    assert group_problems({"gpu1": ranks[:3]}, **plan) == ["ranks 3 of 4 run on no node"]
    # the weights line names a process: without it (a node that never loaded), every rank says so
    unloaded = [{k: v for k, v in r.items() if k not in ("loaded_s", "loaded_by")} for r in ranks]
    assert group_problems({"gpu1": unloaded}, **plan) == [f"gpu1: rank {n}: loaded no weights" for n in range(4)]
