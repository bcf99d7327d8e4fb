"""The vLLM engine's handshake read on real runs of its script
(tests/fixtures/vllm/handshake/SOURCE.md): two ranks that meet pass; a
rank on another environment, a rank alone (no rendezvous, or nobody
joining it) each fail naming host, rank, rail and rendezvous
(module_utils/engines/vllm/handshake.py)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ansible.module_utils.engines.vllm.handshake import cause, verdict

HS = FIXTURES / "vllm" / "handshake"
WHERE = {"world": 2, "rail": "rail0 (ens1f0np0)", "rendezvous": "198.19.0.1:29499", "timeout": 60}


def read(name: str) -> tuple[str, int, str]:
    rc_file = HS / f"{name}.rc"
    rc = int(rc_file.read_text().strip().partition("=")[2]) if rc_file.exists() else 0
    return (HS / f"{name}.out").read_text(), rc, (HS / f"{name}.err").read_text()


@pytest.mark.parametrize("rank,host", [(0, "lab-master"), (1, "lab-worker1")])
def test_both_ranks_meet(rank, host):
    got = verdict(*read(f"ok-rank{rank}"), host=host, rank=rank, **WHERE)
    assert got["ok"], got["msg"]
    assert "2 ranks joined" in got["msg"] and "environment 4f1c2a9b7d3e" in got["msg"]
    assert "vllm 0.32.0, torch 2.13.0+cpu" in got["msg"]
    assert [r["host"] for r in got["result"]["ranks"]] == ["lab-master", "lab-worker1"]


@pytest.mark.parametrize("rank,host", [(0, "lab-master"), (1, "lab-worker1")])
def test_a_rank_on_another_environment_fails_on_both(rank, host):
    got = verdict(*read(f"differ-rank{rank}"), host=host, rank=rank, **WHERE)
    assert not got["ok"]
    assert "versions must be strictly equal" in got["msg"]
    other = "lab-worker1 (rank 1)" if rank == 0 else "lab-master (rank 0)"
    assert other in got["msg"] and "env_id" in got["msg"]
    assert "9a0b8c7d6e5f" in got["msg"] and "4f1c2a9b7d3e" in got["msg"]


def test_a_rank_with_nobody_at_the_rendezvous():
    out, rc, err = read("alone-rank1")
    assert rc == 1 and out == ""
    got = verdict(out, rc, err, host="lab-worker1", rank=1, **WHERE)
    assert not got["ok"]
    assert got["msg"].startswith("service: handshake: lab-worker1 (rank 1 of 2) over rail0 (ens1f0np0) to "
                                 "198.19.0.1:29499: failed")
    assert "the group did not form in time" in got["msg"]
    assert "trying to connect to (10.250.0.1, 29499)" in got["msg"] and "(exit 1)" in got["msg"]


def test_a_master_nobody_joins():
    got = verdict(*read("alone-rank0"), host="lab-master", rank=0, **WHERE)
    assert not got["ok"]
    assert "1/2 clients joined" in got["msg"]


def test_cause_of_other_failures():
    assert cause("") == "no output"
    assert cause("x\nRuntimeError: Connection refused\n").startswith("connection refused")
    assert cause("boom\nsomething else").startswith("something else")


def test_wrong_sums_fail():
    out, rc, err = read("ok-rank0")
    bad = out.replace('"sum": 3.0', '"sum": 2.0')
    got = verdict(bad, rc, err, host="lab-master", rank=0, **WHERE)
    assert not got["ok"] and "expected 3 and 2" in got["msg"]


FAILURES = FIXTURES / "vllm" / "handshake-failures"
# capture -> the cause read: the error line's, never a traceback's echoed source ("timeout=timeout")
CAUSES = {
    "torch_gloo_new_group_connection_refused_echo_timeout_eq_timeout_pytorch108732.txt": "connection refused",
    "torch_gloo_init_process_group_connectfullmesh_connect_timeout_dmlcloud47.txt":
        "gloo's full mesh between the ranks did not connect in time",
    "vllm_0.5.3_ray_multinode_gloo_connectfullmesh_echo_timeout_eq_timeout_issue6775.txt":
        "gloo's full mesh between the ranks did not connect",
    "vllm_0.8.x_serve_multinode_gloo_connectfullmesh_runtimeerror_issue15537.txt":
        "gloo's full mesh between the ranks did not connect",
    "vllm_0.8.x_dp_embed_diststoreerror_timed_out_waiting_for_clients_issue16334.txt": "the group did not form in time",
    "vllm_ascend_0.11.2_ray_multinode_enginecore_failed_echo_timeout_eq_timeout_assertionerror_issue_ascend4456.txt":
        "AssertionError: local_world_size (32) must be less than or equal to the number of visible devices (16).",
}


def test_every_failure_capture_has_its_cause():
    assert {p.name for p in FAILURES.glob("*.txt")} == set(CAUSES)


@pytest.mark.parametrize("name", sorted(CAUSES))
def test_the_cause_is_read_from_the_error_line_not_the_echoed_source(name):
    said = cause((FAILURES / name).read_text())
    assert said.startswith(CAUSES[name]), said
    assert "timeout=timeout" not in said
