"""The split of the layers the memory plan assumes (module_utils/
engines/llamacpp/tensor_split.py, the twinrail_tensor_split filter, tensor_split_gate): the
--rpc list, -ngl and --tensor-split given to llama-server, and the gate
over the loader's buffers, read from real llama.cpp logs (a 4-node Strix
Halo cluster left to split by free memory, a failed RPC allocation, and
the lab's llama-server with the plan's split)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import FIXTURES, REPO, filter_plugins

import tensor_split_gate
from ansible.module_utils.engines.llamacpp.tensor_split import MIB, measured_shares, parse_buffers, plan_split, split_problems

filters = filter_plugins()

HW = FIXTURES / "hardware"
BEOWULF = (HW / "llama-cli_rpc_model_buffers_3_rpc_vulkan_geerlingguy_beowulf_issue2_partial.txt").read_text()
ALLOC_FAIL = (HW / "llama-server_rpc0_alloc_buffer_fail_strix_halo_llama_cpp_issue23858_partial.txt").read_text()
LAB = (FIXTURES / "lab" / "llama-server_lv4_journal_split_cpu_master_2_rpc_lab.txt").read_text()
LAB_RAILS = {"lab-worker1": [{"name": "rail0", "address": "198.19.0.2/24"}, {"name": "rail1", "address": "198.19.1.2/24"}]}

SPARK_RAILS = {"spark-b": [{"name": "rail0", "address": "192.168.100.11/24"},
                           {"name": "rail1", "address": "192.168.200.11/24"}]}


def test_a_gpu_master_holds_its_share_on_its_gpu_the_last_device():
    # the seed's two GB10 boxes: the worker's two rail servers, then the
    # master's GPU (llama.cpp lists RPC servers first, in --rpc order)
    plan = plan_split("spark-a", ["spark-b"], SPARK_RAILS, 50052, 94, True)
    assert plan["endpoints"] == ["192.168.100.11:50052", "192.168.200.11:50052"]
    assert plan["tensor_split"] == [0.25, 0.25, 0.5]
    assert plan["gpu_layers"] == 95
    assert plan["nodes"] == {"spark-a": 0.5, "spark-b": 0.5}
    assert plan["devices"] == {"192.168.100.11:50052": "spark-b", "192.168.200.11:50052": "spark-b", "GPU": "spark-a"}
    assert plan["lines"][-1] == "--tensor-split 0.25,0.25,0.5"


def test_a_cpu_master_keeps_its_first_layers_and_the_workers_split_the_rest():
    rails = {"w1": [{"name": "rail0", "address": "198.19.0.2/24"}, {"name": "rail1", "address": "198.19.1.2/24"}],
             "w2": [{"name": "rail0", "address": "198.19.0.3/24"}, {"name": "rail1", "address": "198.19.1.3/24"}]}
    plan = plan_split("m", ["w1", "w2"], rails, 50052, 30, False)
    # a third of 30 layers on the master's CPU: -ngl the other 20 and the output layer
    assert plan["gpu_layers"] == 21
    assert plan["tensor_split"] == [0.25, 0.25, 0.25, 0.25]
    assert plan["endpoints"] == ["198.19.0.2:50052", "198.19.1.2:50052", "198.19.0.3:50052", "198.19.1.3:50052"]
    # the guard's --workers, in the same order, each rail named (serving on fewer rails names them)
    assert plan["guard_workers"] == ["w1@198.19.0.2=rail0", "w1@198.19.1.2=rail1", "w2@198.19.0.3=rail0",
                                     "w2@198.19.1.3=rail1"]
    assert "GPU" not in plan["devices"]
    assert plan["nodes"] == {"m": pytest.approx(1 / 3), "w1": pytest.approx(1 / 3), "w2": pytest.approx(1 / 3)}


def test_the_filter_follows_the_workers_order_and_reads_the_profile_setting_as_a_bool():
    rails = {"b": [{"name": "rail0", "address": "10.0.0.2/24"}], "a": [{"name": "rail0", "address": "10.0.0.3/24"}]}
    plan = filters.tensor_split("m", ["b", "a"], rails, "50052", "8", "False")
    assert plan["endpoints"] == ["10.0.0.2:50052", "10.0.0.3:50052"]
    assert plan["gpu_layers"] == 9 - 3 and plan["master_gpu"] is False
    assert filters.tensor_split("m", ["b", "a"], rails, 50052, 8, True)["gpu_layers"] == 9


@pytest.mark.parametrize("args, expected", [
    (("m", ["w"], {"w": [{"address": "10.0.0.2/24"}]}, 50052, 0, False), "twinrail_model.layers: expected a positive"),
    (("m", [], {}, 50052, 30, False), "at least one worker"),
    (("m", ["w"], {"w": []}, 50052, 30, False), "w: twinrail_rails: expected at least one rail"),
])
def test_a_split_that_cannot_be_made_says_why(args, expected):
    with pytest.raises(ValueError, match=expected):
        plan_split(*args)


def test_the_loaders_buffers_are_read_from_a_real_log_with_the_older_rpc_naming():
    log = parse_buffers(BEOWULF)
    assert log["error"] is None
    assert [(b["device"], b["kind"], round(b["bytes"] / MIB, 2)) for b in log["buffers"]] == [
        ("Vulkan0", "model", 36258.32), ("RPC[10.0.2.242:50052]", "model", 116788.73),
        ("RPC[10.0.2.223:50052]", "model", 124823.01), ("RPC[10.0.2.209:50052]", "model", 107322.46),
        ("CPU", "model", 497.11)]


def test_llamas_split_by_free_memory_on_a_real_cluster_is_not_the_plans():
    # four equal nodes left to llama.cpp: the master (Vulkan0 and CPU) got
    # 9.5 %, the RPC hosts 27.8 to 32.4 %: the gate names the master
    devices = {"10.0.2.242:50052": "n2", "10.0.2.223:50052": "n3", "10.0.2.209:50052": "n4"}
    plan = {"master": "n1", "nodes": {"n1": 0.25, "n2": 0.25, "n3": 0.25, "n4": 0.25}, "devices": devices,
            "layers": 61}
    measured = measured_shares(parse_buffers(BEOWULF)["buffers"], devices, "n1")
    assert round(measured["nodes"]["n1"]["share"], 3) == 0.095
    assert round(measured["nodes"]["n3"]["share"], 3) == 0.324
    problems = split_problems(plan, measured, 0.1)
    assert len(problems) == 3 and problems[0].startswith("n1: planned 25.0% of the model and KV cache, measured 9.5%")
    assert "allowed 25.0% +/- 4.1%" in problems[0]
    # n4 at 27.8 % is within 2.5 + 1.6 points of its 25 %
    assert not any(p.startswith("n4:") for p in problems)
    # with a wide tolerance the same figures pass: the bound is what fails them
    assert split_problems(plan, measured, 0.7) == []


def test_the_labs_split_from_the_plan_is_measured_in_its_own_log():
    # the lab's llama-server started with the plan's -ngl 16 --tensor-split
    # 0.5,0.5 (a CPU master, 30 layers) and -lv 4: the newer log format
    plan = plan_split("lab-master", ["lab-worker1"], LAB_RAILS, 50052, 30, False)
    assert (plan["gpu_layers"], plan["tensor_split"]) == (16, [0.5, 0.5])
    assert "load_tensors: offloaded 16/31 layers to GPU" in LAB  # -ngl 16: 15 layers on the CPU
    log = parse_buffers(LAB)
    assert log["error"] is None
    assert [(b["device"], b["kind"], round(b["bytes"] / MIB, 2)) for b in log["buffers"]] == [
        ("CPU_Mapped", "model", 92.1), ("RPC0[198.19.0.2:50052]", "model", 16.91),
        ("RPC0[198.19.1.2:50052]", "model", 43.49), ("CPU", "KV", 360.0),
        ("RPC0[198.19.0.2:50052]", "KV", 192.0), ("RPC0[198.19.1.2:50052]", "KV", 168.0)]
    measured = measured_shares(log["buffers"], plan["devices"], "lab-master")
    assert measured["unknown"] == []
    assert round(measured["nodes"]["lab-master"]["share"], 3) == 0.518
    assert round(measured["nodes"]["lab-worker1"]["share"], 3) == 0.482
    assert split_problems(plan, measured, 0.1) == []
    # the same buffers against a plan that gave the worker two thirds fail,
    # naming both nodes
    skewed = dict(plan, nodes={"lab-master": 1 / 3, "lab-worker1": 2 / 3})
    problems = split_problems(skewed, measured, 0.1)
    assert [p.split(":")[0] for p in problems] == ["lab-master", "lab-worker1"]
    assert problems[1].startswith("lab-worker1: planned 66.7% of the model and KV cache, measured 48.2%")


def test_an_rpc_device_the_plan_does_not_name_is_a_problem():
    plan = {"master": "n1", "nodes": {"n1": 0.5, "n2": 0.5}, "devices": {"10.0.2.242:50052": "n2"}, "layers": 61}
    measured = measured_shares(parse_buffers(BEOWULF)["buffers"], plan["devices"], "n1")
    assert measured["unknown"] == ["RPC[10.0.2.209:50052]", "RPC[10.0.2.223:50052]"]
    assert split_problems(plan, measured, 1.0)[0].startswith("RPC[10.0.2.209:50052]: a device the plan does not name")


def _gate(text: str, plan: dict, capsys, monkeypatch, started=True, invocation="inv-1"):
    calls = []

    def run_command(self, argv, **_kw):
        calls.append(argv)
        if argv[1] == "show":
            return 0, f"InvocationID={invocation}\nInactiveExitTimestamp=Sat 2026-12-05 10:00:00 UTC\n", ""
        return 0, text, ""

    monkeypatch.setattr(tensor_split_gate.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(tensor_split_gate.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: name)
    with patch_module_args({"plan": plan, "tolerance": 0.1, "started": started}), pytest.raises(SystemExit):
        tensor_split_gate.main()
    return json.loads(capsys.readouterr().out), calls


BEOWULF_PLAN = {"master": "n1", "nodes": {"n1": 0.25, "n2": 0.25, "n3": 0.25, "n4": 0.25}, "layers": 61,
                "devices": {"10.0.2.242:50052": "n2", "10.0.2.223:50052": "n3", "10.0.2.209:50052": "n4"}}


def test_the_gate_reads_only_this_start_of_the_unit_and_names_node_planned_and_measured(capsys, monkeypatch):
    result, calls = _gate(BEOWULF, BEOWULF_PLAN, capsys, monkeypatch)
    # the unit's own lines and systemd's about this invocation
    assert calls[1][-7:] == ["_SYSTEMD_INVOCATION_ID=inv-1", "+", "INVOCATION_ID=inv-1", "+", "_TRANSPORT=kernel",
                             "--since", "Sat 2026-12-05 10:00:00 UTC"]
    assert result["failed"] is True
    assert result["msg"].startswith("service: n1: step 3 (master, cluster mode): the split of the layers is not "
                                    "the memory plan's: n1: planned 25.0% of the model and KV cache, measured 9.5%")
    assert result["nodes"]["n3"] == {"planned": 0.25, "measured": 0.3236, "bytes": int(124823.01 * MIB)}


def test_a_failed_load_is_reported_with_the_loaders_error(capsys, monkeypatch):
    result, _ = _gate(ALLOC_FAIL, BEOWULF_PLAN, capsys, monkeypatch)
    assert result["failed"] is True
    assert result["msg"].endswith("llama-server failed to load the model: failed to allocate "
                                  "RPC0[10.0.69.2:50052] buffer of size 193608946688")


def test_no_buffer_lines_fail_a_fresh_start_and_warn_on_a_rotated_journal(capsys, monkeypatch):
    result, _ = _gate("Started twinrail-llama.service\n", BEOWULF_PLAN, capsys, monkeypatch)
    assert result["failed"] is True and "has no buffer lines" in result["msg"]
    result, _ = _gate("", BEOWULF_PLAN, capsys, monkeypatch, started=False)
    assert not result.get("failed") and "rotated" in result["lines"][0] and result["nodes"] == {}
    result, _ = _gate("", BEOWULF_PLAN, capsys, monkeypatch, invocation="")
    assert result["failed"] is True and "is not running" in result["msg"]


def test_a_server_that_runs_on_is_judged_from_what_its_start_said_not_its_grown_journal(tmp_path, capsys,
                                                                                        monkeypatch):
    """The lab's own journal: the run that reads it keeps what the loader
    said for that invocation; a later run of the same invocation (the
    server answered requests since: its journal grew) judges the same
    without asking journalctl; a new invocation, a stopped unit or a run
    that started the unit reads the journal again."""
    plan = plan_split("lab-master", ["lab-worker1"], LAB_RAILS, 50052, 30, False)
    plan = dict(plan, devices=dict(plan["devices"]))
    state = {"invocation": "inv-1", "active": "active"}
    calls = []

    def run_command(self, argv, **_kw):
        calls.append(argv[0])
        if argv[1] == "show":
            return 0, (f"InvocationID={state['invocation']}\nActiveState={state['active']}\n"
                       "InactiveExitTimestamp=Sat 2026-12-05 10:00:00 UTC\n"), ""
        return 0, LAB, ""

    def gate(started=False):
        calls.clear()
        with patch_module_args({"plan": plan, "tolerance": 0.1, "started": started, "cache_dir": str(tmp_path)}), \
                pytest.raises(SystemExit):
            tensor_split_gate.main()
        return json.loads(capsys.readouterr().out)

    monkeypatch.setattr(tensor_split_gate.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(tensor_split_gate.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: name)
    first = gate()
    assert "failed" not in first and calls == ["systemctl", "journalctl"]
    assert json.loads((tmp_path / "twinrail-llama.service.load.json").read_text())["invocation"] == "inv-1"
    again = gate()
    assert calls == ["systemctl"] and again["nodes"] == first["nodes"] and again["lines"] == first["lines"]
    assert gate(started=True)["nodes"] == first["nodes"] and calls == ["systemctl", "journalctl"]
    state["invocation"] = "inv-2"  # restarted since: its own start is read
    gate()
    assert calls == ["systemctl", "journalctl"]
    state["active"] = "failed"  # not running: nothing kept is trusted
    gate()
    assert calls == ["systemctl", "journalctl"]
