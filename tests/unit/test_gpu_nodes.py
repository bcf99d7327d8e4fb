"""Nodes with several GPUs (the 8-GPU servers' field report) and consumer
cards: nvidia-smi -q read per GPU (MIG, memory, PCIe link), the per-GPU
gates, the memory plan divided over a node's GPUs, and the split that
makes every GPU a device of llama.cpp, read back from real logs of
machines with two and four GPUs (tests/fixtures/gpu/SOURCES.md)."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

import gpu_gate
import twinrail_memory_plan
from ansible.module_utils.gpu.facts import ParseError, gpu_node_problems, gpu_settings_problems, parse_detail, parse_table
from ansible.module_utils.inventory.memory_plan import GIB, plan
from ansible.module_utils.engines.llamacpp.tensor_split import gpu_split_problems, measured_shares, parse_buffers, plan_split
from twinrail.guard import rails

GPU = FIXTURES / "gpu"
H100_Q = "nvidia_smi_q_8x_h100_sxm_565.txt"
RTX4060TI_Q = "nvidia_smi_q_2x_rtx4060ti_550_link_x4_of_x8.txt"
L4_Q = "nvidia_smi_q_1x_l4_550_link_gen1_x8.txt"


def read(name: str) -> str:
    return (GPU / name).read_text()


def node(table: str, detail: str | None = None) -> dict:
    """gpu_facts' reading of a node: the table, with -q's as detail."""
    facts = parse_table(read(table))
    if detail:
        facts["detail"] = parse_detail(read(detail))
    return facts


def test_nvidia_smi_q_of_eight_h100_reads_every_gpu_with_its_link():
    detail = parse_detail(read(H100_Q))
    assert (detail["driver_version"], detail["cuda_version"], detail["attached"]) == ("565.57.01", "12.7", 8)
    assert detail["problems"] == []
    gpus = detail["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert gpus[0]["bus_id"] == "00000000:18:00.0" and len({g["bus_id"] for g in gpus}) == 8
    assert {(g["name"], g["memory"], g["memory_total_mib"], g["mig"]) for g in gpus} == {
        ("NVIDIA H100 80GB HBM3", "discrete", 81559, False)}
    assert {tuple(sorted(g["pcie"].items())) for g in gpus} == {tuple(sorted(
        {"gen_max": 5, "gen_current": 5, "gen_device_max": 5, "gen_host_max": 5,
         "width_max": 16, "width_current": 16}.items()))}
    # the same node through the table and -q, as gpu_facts returns it: nothing to name
    assert gpu_node_problems("gpu-a", node("nvidia_smi_8x_h100_sxm_565_new_layout.txt", H100_Q), 8) == []


def test_a_gpu_in_a_slot_narrower_than_the_card_is_named():
    """Two RTX 4060 Ti (x8 cards): GPU 0 trained at x4. A board wired x4
    on purpose accepts it with twinrail_gpu_pcie_min_width: 4."""
    facts = node("nvidia_smi_2x_rtx4060ti_550_new_layout.txt", RTX4060TI_Q)
    assert gpu_node_problems("box-a", facts, 2) == [
        "box-a: GPU 0 (NVIDIA GeForce RTX 4060 Ti, 00000000:03:00.0): PCIe link x4, required x8 (the card is x8): "
        "a slot wired or trained narrower, a riser, or a card not seated"]
    assert gpu_node_problems("box-a", facts, 2, min_width=4) == []
    assert gpu_node_problems("box-a", facts, 2, min_width="8")[0].startswith(
        "box-a: GPU 0 (NVIDIA GeForce RTX 4060 Ti, 00000000:03:00.0): PCIe link x4, required x8 (the card is x8; "
        "twinrail_gpu_pcie_min_width)")


def test_an_idle_gpu_at_gen1_is_not_a_fault_but_its_width_is():
    """An L4 at idle: Gen1 of its Gen4 (power saving, not judged), x8 of its x16."""
    detail = parse_detail(read(L4_Q))
    (l4,) = detail["gpus"]
    assert l4["pcie"] == {"gen_max": 4, "gen_current": 1, "gen_device_max": 4, "gen_host_max": 4,
                          "width_max": 16, "width_current": 8}
    assert gpu_node_problems("l4", {"detail": detail}) == [
        "l4: GPU 0 (NVIDIA L4, 00000000:01:00.0): PCIe link x8, required x16 (the card is x16): a slot wired or "
        "trained narrower, a riser, or a card not seated"]
    # an older slot: the link's reach below the card's own generation (the capture's figures, one changed)
    detail["gpus"][0]["pcie"].update(gen_max=3, gen_host_max=3)
    assert gpu_node_problems("l4", {"detail": detail}, min_width=8) == [
        "l4: GPU 0 (NVIDIA L4, 00000000:01:00.0): PCIe link reaches Gen3 at most, the card is Gen4 (host side "
        "Gen3): a slot, riser or BIOS setting of an older generation"]
    # the same figures on a GPU whose memory is the CPU's (GB10 sits on the CPU's die, in no slot): not judged
    detail["gpus"][0].update(name="NVIDIA GB10", memory="unified", memory_total_mib=None)
    assert gpu_node_problems("spark", {"detail": detail}) == []


def test_a_lost_gpu_mig_and_an_unset_count_are_named():
    """Seven of eight A100s in MIG mode (the table's reading, no -q
    capture of MIG exists here); a server with eight GPUs and no
    twinrail_gpu_count; a count that is not what nvidia-smi lists."""
    a100 = node("nvidia_smi_8x_a100_sxm4_40gb_mig_mixed_450_old_layout.txt")
    problems = gpu_node_problems("a100", a100, 8)
    assert len(problems) == 7 and all("MIG mode is enabled" in p for p in problems)
    assert problems[0].startswith("a100: GPU 1 (A100-SXM4-40GB, 00000000:15:00.0): MIG mode is enabled")
    assert gpu_node_problems("a100", a100, 8, mig_allowed=True) == []
    assert gpu_node_problems("a100", a100, mig_allowed=True) == [
        "a100: 8 GPUs with memory of their own and twinrail_gpu_count unset: set twinrail_gpu_count: 8 (each GPU "
        "one device of the split; unset, every RPC server would expose them all under one proportion)"]
    h100 = node("nvidia_smi_8x_h100_sxm_565_new_layout.txt", H100_Q)
    (lost,) = gpu_node_problems("h100", h100, 9)
    assert lost.startswith("h100: 8 GPU(s) visible (00000000:18:00.0, 00000000:2A:00.0,") and "expected 9" in lost


def test_bad_gpu_settings_name_the_variable_the_host_and_the_form():
    assert gpu_settings_problems("gpu-a", {"count": 8, "mig": False, "min_width": 16}) == []
    assert gpu_settings_problems("gpu-a", {"count": None, "mig": "false", "min_width": ""}) == []
    assert gpu_settings_problems("gpu-a", {"count": "eight", "mig": "maybe", "min_width": 12}) == [
        "gpu-a: twinrail_gpu_count: expected a whole number of GPUs, 1 or more (or unset), got 'eight'",
        "gpu-a: twinrail_gpu_pcie_min_width: expected a PCIe width, one of 1, 2, 4, 8, 16, 32 (or unset), got 12",
        "gpu-a: twinrail_gpu_mig: expected true or false, got 'maybe'"]


def test_the_gate_module_names_node_and_gpu_and_refuses_bad_settings():
    facts = {"gpu-a": node("nvidia_smi_8x_h100_sxm_565_new_layout.txt", H100_Q),
             "gpu-b": node("nvidia_smi_2x_rtx4060ti_550_new_layout.txt", RTX4060TI_Q)}
    expected = {"gpu-a": {"count": 8, "mig": False, "min_width": None},
                "gpu-b": {"count": "2", "mig": "false", "min_width": None}}
    verdict = gpu_gate.judge({"facts": facts, "cuda_required": True, "expected": expected}, print)
    assert verdict["failed"]
    assert verdict["failures"] == [
        "gpu-b: NVIDIA driver version 550.54.14, expected 565.57.01 as on gpu-a (every node runs the same)",
        "gpu-b: NVIDIA cuda version 12.4, expected 12.7 as on gpu-a (every node runs the same)",
        "gpu-b: GPU 0 (NVIDIA GeForce RTX 4060 Ti, 00000000:03:00.0): PCIe link x4, required x8 (the card is x8): "
        "a slot wired or trained narrower, a riser, or a card not seated"]
    # a CPU build does not judge the GPUs one by one
    assert gpu_gate.judge({"facts": {"gpu-b": facts["gpu-b"]}, "cuda_required": False, "expected": expected},
                          print) == {"changed": False, "failures": []}
    # MIG read from the table where there is no -q (eight A100s, seven in MIG mode): named through the gate
    a100 = {"a100": node("nvidia_smi_8x_a100_sxm4_40gb_mig_mixed_450_old_layout.txt")}
    mig = gpu_gate.judge({"facts": a100, "cuda_required": True, "expected": {"a100": {"count": 8}}}, print)
    assert len(mig["failures"]) == 7 and all("MIG mode is enabled" in f for f in mig["failures"])
    assert gpu_gate.judge({"facts": a100, "cuda_required": True,
                           "expected": {"a100": {"count": 8, "mig": "true"}}}, print)["failures"] == []
    refused = gpu_gate.judge({"facts": facts, "cuda_required": True,
                              "expected": {"gpu-a": {"count": "8x"}}}, print)
    assert refused["msg"] == ("preflight: gpu-a: twinrail_gpu_count: expected a whole number of GPUs, 1 or more "
                              "(or unset), got '8x'; nothing was changed")


def test_nvidia_smi_q_that_is_no_log_is_refused():
    with pytest.raises(ParseError, match="no log"):
        parse_detail(read("nvidia_smi_8x_h100_sxm_565_new_layout.txt"))
    with pytest.raises(ParseError, match="it failed"):
        parse_detail(read("nvidia_smi_fail_no_devices_were_found.txt"))


# --- the memory plan over a node's GPUs (the field report's 671B model) -----

MODEL_671B = {"name": "r1", "layers": 61, "kv_heads": 1, "head_dim": 576, "context": 8192, "kv_type": "f16",
              "parallel": 1}


def discrete(table: str) -> list[dict]:
    return twinrail_memory_plan.discrete_gpus(parse_table(read(table)))


def test_671b_at_8_bits_needs_two_8x_h100_servers_and_4_bits_fits_one():
    h100 = discrete("nvidia_smi_8x_h100_sxm_565_new_layout.txt")
    eight = dict(MODEL_671B, params_b=671, bits_per_param=8)
    two = plan(eight, {"a": 2 << 40, "b": 2 << 40}, 85, 92, 1.2, gpus={"a": h100, "b": h100})
    assert two["failures"] == []
    part = two["nodes"]["a"]["gpus"][0]
    assert part["share_bytes"] == two["share_bytes"] // 8 and part["memory_bytes"] == 81559 << 20
    assert 46 < part["share_bytes"] / GIB < 48 and part["usable_bytes"] == int((81559 << 20) * 0.9)
    one = plan(eight, {"a": 2 << 40}, 85, 92, 1.2, gpus={"a": h100})
    assert len(one["failures"]) == 8
    assert one["failures"][0].startswith("a: GPU 0 (NVIDIA H100 80GB HBM3): memory plan: its part of the model is 93.87 GiB")
    assert "required at most 90% of its 79.65 GiB = 71.68 GiB (twinrail_gpu_memory_utilization)" in one["failures"][0]
    four = plan(dict(MODEL_671B, params_b=671, bits_per_param=4), {"a": 2 << 40}, 85, 92, 1.2, gpus={"a": h100})
    assert four["failures"] == [] and four["nodes"]["a"]["fits"]


def test_eight_48gb_gpus_hold_the_4_bit_model_only_with_room_to_spare_named():
    """8 x A40 (46068 MiB, a real table): 671B at 4 bits with the 1.2
    factor is 402.6 GB (375 GiB), about 47 GiB a GPU on one server, past
    90 % of 45 GiB (the field report's "can cover" leaves nothing for the
    CUDA context and buffers); two servers fit."""
    a40 = discrete("nvidia_smi_8x_a40_gpu4_err_xid119_525.txt")
    assert [g["memory_bytes"] for g in a40] == [46068 << 20] * 8
    four = dict(MODEL_671B, params_b=671, bits_per_param=4)
    one = plan(four, {"a": 1 << 40}, 85, 92, 1.2, gpus={"a": a40})
    assert len(one["failures"]) == 8 and "DOES NOT FIT" in "\n".join(one["lines"])
    assert plan(four, {"a": 1 << 40, "b": 1 << 40}, 85, 92, 1.2, gpus={"a": a40, "b": a40})["failures"] == []
    # a node without discrete GPUs (GB10, unified) stays on its system memory and watermark
    mixed = plan(four, {"a": 1 << 40, "spark": 128 << 30}, 85, 92, 1.2, gpus={"a": a40})
    assert [f.split(":")[0] for f in mixed["failures"]] == ["spark"]


def test_the_module_plans_on_the_gpus_only_with_cuda_and_checks_the_utilization():
    h100 = parse_table(read("nvidia_smi_8x_h100_sxm_565_new_layout.txt"))
    params = {"model": dict(MODEL_671B, params_b=671, bits_per_param=8), "memory_mb": {"a": 2 << 20, "b": 2 << 20},
              "soft_watermark_pct": 85, "hard_watermark_pct": 92, "overhead": 1.2, "os_used_mb": {},
              "margin_pct": 5, "gpus": {"a": h100, "b": h100}, "cuda": True, "gpu_utilization": 0.9}
    on_gpus = twinrail_memory_plan.judge(dict(params), print)
    assert not on_gpus.get("failed") and len(on_gpus["plan"]["nodes"]["a"]["gpus"]) == 8
    on_cpus = twinrail_memory_plan.judge(dict(params, cuda=False), print)
    assert "gpus" not in on_cpus["plan"]["nodes"]["a"]
    bad = twinrail_memory_plan.judge(dict(params, gpu_utilization=90.0), print)
    assert bad["msg"] == ("preflight: twinrail_gpu_memory_utilization: expected a fraction above 0 and at most 1, "
                          "got 90.0")


# --- the split: every GPU a device ------------------------------------------

RAILS = {"gpu-b": [{"name": "rail0", "address": "198.19.0.2/24"}, {"name": "rail1", "address": "198.19.1.2/24"}]}


def test_two_8_gpu_servers_every_gpu_a_device_each_on_one_rail():
    split = plan_split("gpu-a", ["gpu-b"], RAILS, 50052, 61, True, {"gpu-a": 8, "gpu-b": "8"})
    assert split["endpoints"] == ["198.19.0.2:50052", "198.19.1.2:50052"]
    assert split["server_devices"] == [8, 8] and split["master_devices"] == 8
    assert split["rpc_device_args"] == {"gpu-a": "", "gpu-b": "--device CUDA0,CUDA1,CUDA2,CUDA3,CUDA4,CUDA5,CUDA6,CUDA7"}
    # rail0's server carries GPUs 0-3, rail1's 4-7; then the master's eight
    assert split["tensor_split"] == [0.0625] * 4 + [0.0] * 4 + [0.0] * 4 + [0.0625] * 4 + [0.0625] * 8
    assert split["gpu_devices"]["RPC5[198.19.1.2:50052]"] == ["gpu-b", 5]
    assert split["gpu_devices"]["CUDA7"] == ["gpu-a", 7] and split["gpu_layers"] == 62
    assert "gpu-b: 50.0% over its 8 GPUs, 6.2% each; every rail's RPC server exposes all of them" in split["lines"][-2]
    assert "rail0 for GPU 0-3, rail1 for GPU 4-7" in split["lines"][-2]
    # one GPU a node, or none given: one device as before
    plain = plan_split("gpu-a", ["gpu-b"], RAILS, 50052, 61, True, {"gpu-a": 1})
    assert plain["tensor_split"] == [0.25, 0.25, 0.5] and plain["gpu_devices"] == {}
    with pytest.raises(ValueError, match="gpu-b: twinrail_gpu_count: expected a whole number"):
        plan_split("gpu-a", ["gpu-b"], RAILS, 50052, 61, True, {"gpu-b": "all"})


def test_the_guard_moves_a_cut_rails_gpus_to_the_same_gpus_through_the_other_rail():
    split = plan_split("gpu-a", ["gpu-b"], RAILS, 50052, 61, True, {"gpu-a": 8, "gpu-b": 8})
    workers = [("gpu-b", "198.19.0.2", "rail0"), ("gpu-b", "198.19.1.2", "rail1")]
    built, master = rails.build_rails(workers, split["endpoints"], split["tensor_split"],
                                      split["server_devices"], split["master_devices"])
    assert master == tuple([0.0625] * 8)
    endpoints, proportions = rails.plan(built, {"198.19.0.2"}, master)
    assert endpoints == ["198.19.0.2:50052"]
    assert proportions == [0.0625] * 8 + [0.0625] * 8  # every GPU of gpu-b through rail0, the master's unchanged
    with pytest.raises(ValueError, match="expected one per device, then one per GPU of the master's, 8"):
        rails.build_rails(workers, split["endpoints"], split["tensor_split"][:-1], split["server_devices"], 8)


def test_each_gpus_measured_share_is_named_from_a_real_four_gpu_log():
    """A real llama-server load on 4 GPUs (RTX 5090, 2 x 4090, A6000) with
    its own -ts and part of the model on the CPU: read per CUDA device and
    held against a plan giving each GPU an even share of the master's."""
    text = read(next(p.name for p in GPU.glob("llama-server_4x_rtx5090_rtx4090_a6000_*.txt")))
    log = parse_buffers(text)
    cuda = [(b["device"], b["kind"], round(b["bytes"] / (1 << 20), 2)) for b in log["buffers"] if "CUDA" in b["device"]]
    assert cuda == [("CUDA0", "model", 22412.07), ("CUDA1", "model", 17714.47), ("CUDA2", "model", 21610.08),
                    ("CUDA3", "model", 42786.36), ("CUDA0", "KV", 510.0), ("CUDA1", "KV", 408.0),
                    ("CUDA2", "KV", 408.0), ("CUDA3", "KV", 748.0)]
    split = plan_split("box", ["w"], {"w": [{"name": "rail0", "address": "10.0.0.2/24"}]}, 50052, 61, True, {"box": 4})
    measured = measured_shares(log["buffers"], split["devices"], "box")
    assert measured["nodes"]["box"]["share"] == 1.0  # no worker in that log: every buffer is the master's
    problems = gpu_split_problems(split, log["buffers"], 0.1)
    assert [p.split(":")[0] for p in problems] == ["box GPU 0", "box GPU 1", "box GPU 2", "box GPU 3"]
    assert problems[3].startswith("box GPU 3: planned 12.5% of the model and KV cache, measured 18.1% (43534.4 of 240850.1 MiB")


def test_two_local_gpus_and_an_rpc_servers_kv_are_read():
    two = parse_buffers(read(next(p.name for p in GPU.glob("llama-cli_2x_rtx4090_rtx5090_*.txt"))))
    assert [(b["device"], b["kind"]) for b in two["buffers"]] == [
        ("CPU_Mapped", "model"), ("CUDA0", "model"), ("CUDA1", "model"), ("CUDA0", "KV"), ("CUDA1", "KV")]
    mixed = parse_buffers(read("llama-server_rpc_plus_local_cuda0_kv_buffers_rpc_bracket_issue11614.txt"))
    assert [(b["device"], b["bytes"] >> 20) for b in mixed["buffers"]] == [("RPC[10.2.0.3:9999]", 128), ("CUDA0", 128)]


def test_gb10s_framebuffer_in_nvidia_smi_q_reads_as_unified_and_a_discrete_gpus_as_unread():
    """The FB Memory Usage block of a GB10's nvidia-smi -q (a partial real
    capture): "N/A" is its unified memory; the same reading on an H100 is
    memory nvidia-smi could not read."""
    from ansible.module_utils.gpu.facts import _tree, unified_memory

    block = (FIXTURES / "hardware" / "nvidia-smi_gb10_q_fb_memory_na_nvtop_pr466_partial.txt").read_text()
    reading = _tree(["    " + line for line in block.splitlines()])["FB Memory Usage/Total"]
    assert reading == "N/A"
    assert unified_memory("NVIDIA GB10", reading, "detail")
    assert not unified_memory("NVIDIA H100 80GB HBM3", reading, "detail")
