"""The vLLM group read from its units' journals (module_utils/vllm_ranks.py)
on real journals of the lab's two nodes serving with pipeline parallel 2
(tests/fixtures/vllm/journal/SOURCE.md): the group planned passes; a rank
missing, twice, met elsewhere or without its weights fails naming it."""

from __future__ import annotations

from conftest import FIXTURES

from vllm_ranks import group_problems, read_ranks, summary

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
