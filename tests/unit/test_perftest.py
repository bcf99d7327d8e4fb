"""perftest and iperf3 parsers on every real capture in tests/fixtures/perftest/,
asserting the figures its SOURCES.md lists, and the gate logic on real rows."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from ansible.module_utils.rails.perftest import (MIB_TO_GBPS, PerftestError, baseline_drops, counter_deltas, gate, parse,
                      parse_iperf3,
                      parse_perftest, spread_pct, verdict)

P = FIXTURES / "perftest"


def load(name: str, test: str | None = None) -> dict:
    return parse_perftest((P / name).read_text(), test)


def row(result: dict, size: int) -> dict:
    return next(r for r in result["rows"] if r["bytes"] == size)


def r2(value: float) -> float:
    return round(value, 2)


ALL_SIZES = [2 ** i for i in range(1, 24)]


def test_nvidia_doc_all_sizes_indented():
    res = load("ib_write_bw_roce_100g_all_sizes_gbits_nvidia_gpu_operator_doc.txt",
               "ib_write_bw")
    assert [r["bytes"] for r in res["rows"]] == ALL_SIZES
    assert (row(res, 65536)["bw_peak_gbps"], row(res, 65536)["bw_average_gbps"]) == (92.39,
                                                                                      92.38)
    best = max(res["rows"], key=lambda r: r["bw_average_gbps"])
    assert (best["bytes"], best["bw_average_gbps"]) == (16384, 92.46)
    last = row(res, 8388608)
    assert (last["bw_peak_gbps"], last["bw_average_gbps"], last["msg_rate_mpps"]) == \
        (92.39, 92.39, 0.001377)
    assert (row(res, 2)["bw_peak_gbps"], row(res, 2)["bw_average_gbps"]) == (0.11, 0.11)
    assert res["header"]["device"] == "mlx5_0" and res["header"]["gid_index"] == 5
    assert res["header"]["mtu"] == 1024 and res["header"]["qps"] == 1
    assert res["header"]["link_type"] == "Ethernet"
    assert res["bw_average_gbps"] == 92.39 and res["gated_bytes"] == 8388608


def test_six_decimal_first_row_and_shell_lines():
    res = load("ib_write_bw_roce_100g_all_sizes_gbits_93g_cns_v4_0.txt")
    assert res["test"] == "ib_write_bw"
    first = row(res, 2)
    assert (first["iterations"], first["bw_peak_gbps"], first["bw_average_gbps"],
            first["msg_rate_mpps"]) == (5000, 0.101672, 0.083211, 5.200694)
    assert (row(res, 65536)["bw_peak_gbps"], row(res, 65536)["bw_average_gbps"]) == (94.31,
                                                                                      94.29)
    best = max(res["rows"], key=lambda r: r["bw_average_gbps"])
    assert (best["bytes"], best["bw_average_gbps"]) == (131072, 94.44)
    assert (row(res, 8388608)["bw_peak_gbps"], row(res, 8388608)["bw_average_gbps"]) == \
        (93.30, 93.29)
    assert res["header"]["gid_index"] == 10


def test_raw_tabs_and_the_52g_plateau():
    res = load("ib_write_bw_roce_all_sizes_gbits_52g_plateau_client_cns_v17_1.txt")
    assert (row(res, 2)["bw_peak_gbps"], row(res, 2)["bw_average_gbps"]) == (0.080755, 0.073090)
    assert (row(res, 65536)["bw_peak_gbps"], row(res, 65536)["bw_average_gbps"]) == (52.51,
                                                                                      52.50)
    last = row(res, 8388608)
    assert (last["bw_peak_gbps"], last["bw_average_gbps"], last["msg_rate_mpps"]) == \
        (52.52, 52.52, 0.000783)
    assert res["header"]["device"] == "mlx5_0" and res["header"]["gid_index"] == 4
    assert res["header"]["rdma_cm"] is False  # "rdma_cm QPs\t : OFF"
    # well below a 100 Gb/s link's 0.9 line
    assert gate(res, min_bw_gbps=90.0, where="rail0 node-a -> node-b") == [
        "rail0 node-a -> node-b: ib_write_bw average 52.52 Gb/s, required 90.00 Gb/s"]


def test_server_side_prints_one_row():
    res = load("ib_write_bw_roce_all_sizes_gbits_52g_plateau_server_cns_v17_1.txt")
    assert len(res["rows"]) == 1
    assert res["rows"][0] == {"bytes": 8388608, "iterations": 5000, "bw_peak_gbps": 52.52,
                              "bw_average_gbps": 52.52, "msg_rate_mpps": 0.000783,
                              "bw_peak_raw": 52.52, "bw_average_raw": 52.52}
    assert "tx_depth" not in res["header"]["raw"]


def test_partial_captures_without_header():
    write = load("ib_write_bw_ib_hdr200_all_sizes_gbits_azure_ndv4_aks_partial.txt",
                 "ib_write_bw")
    assert [r["bytes"] for r in write["rows"]] == ALL_SIZES
    assert (row(write, 65536)["bw_peak_gbps"], row(write, 65536)["bw_average_gbps"]) == \
        (195.89, 190.24)
    best = max(write["rows"], key=lambda r: r["bw_average_gbps"])
    assert (best["bytes"], best["bw_average_gbps"]) == (4194304, 196.64)
    assert (row(write, 8388608)["bw_peak_gbps"], row(write, 8388608)["bw_average_gbps"]) == \
        (196.56, 196.55)
    assert write["header"]["device"] is None  # elided
    read = load("ib_read_bw_ib_hdr200_all_sizes_gbits_azure_ndv4_aks_partial.txt", "ib_read_bw")
    assert (row(read, 65536)["bw_peak_gbps"], row(read, 65536)["bw_average_gbps"]) == \
        (189.63, 185.13)
    assert (row(read, 8388608)["bw_peak_gbps"], row(read, 8388608)["bw_average_gbps"]) == \
        (197.48, 197.48)
    assert (row(read, 8192)["bw_peak_gbps"], row(read, 8192)["bw_average_gbps"]) == \
        (125.80, 116.65)
    # the doc's own threshold: average above 190 Gb/s
    assert gate(write, min_bw_gbps=190) == []


def test_bidirectional_four_qps_vendor_build():
    client = load("ib_write_bw_roce_400g_pollara_bidir_q4_all_gbits_client_amd_alibaba.txt")
    assert client["header"]["bidirectional"] and client["header"]["qps"] == 4
    assert client["header"]["device"] == "ionic_1" and client["header"]["mtu"] == 4096
    assert client["header"]["gid_index"] == 1
    assert row(client, 65536)["iterations"] == 20000  # 5000 x 4 QPs
    assert client["iterations_per_qp"] == 5000
    assert (row(client, 65536)["bw_peak_gbps"], row(client, 65536)["bw_average_gbps"]) == \
        (775.85, 775.03)
    assert (row(client, 8388608)["bw_peak_gbps"], row(client, 8388608)["bw_average_gbps"]) \
        == (779.21, 779.21)
    assert len(client["rows"]) == 23


def test_bidirectional_server_with_noise_lines():
    server = load("ib_write_bw_roce_400g_pollara_bidir_q4_all_gbits_server_amd_alibaba.txt")
    assert len(server["rows"]) == 23
    assert (row(server, 8388608)["bw_peak_gbps"], row(server, 8388608)["bw_average_gbps"]) \
        == (779.21, 779.21)
    assert server["header"]["device"] == "ionic_7"
    assert server["header"]["raw"]["cpu_freq"] == "3295[MHz]"


def test_gpu_memory_run_fails_a_ninety_percent_gate():
    res = load("ib_write_bw_roce_400g_pollara_bidir_q4_gdr_rocm_client_amd_alibaba.txt")
    assert (row(res, 8388608)["bw_peak_gbps"], row(res, 8388608)["bw_average_gbps"]) == \
        (698.41, 697.97)
    assert (row(res, 65536)["bw_peak_gbps"], row(res, 65536)["bw_average_gbps"]) == \
        (688.00, 687.41)
    # bidirectional: both directions of a 400G port, 0.9 x 800
    assert gate(res, min_bw_gbps=0.9 * 2 * 400) == [
        "ib_write_bw average 697.97 Gb/s, required 720.00 Gb/s"]


def test_mb_per_sec_converts_to_gbps():
    res = load("ib_write_bw_roce_100g_mbs_crossnode_kubeansible.txt")
    only = res["rows"][0]
    assert (only["bytes"], only["iterations"], only["bw_peak_raw"], only["bw_average_raw"],
            only["msg_rate_mpps"]) == (65536, 5000, 11023.87, 11023.48, 0.176376)
    assert r2(res["bw_average_gbps"]) == 92.47
    assert res["bw_average_gbps"] == pytest.approx(11023.48 * MIB_TO_GBPS)
    assert res["header"]["rdma_cm"] is True


def test_duration_mode_zero_peak():
    res = load("ib_write_bw_roce_100g_mbs_D300_duration_kubeansible.txt")
    only = res["rows"][0]
    assert (only["bytes"], only["iterations"], only["bw_peak_raw"], only["bw_average_raw"]) \
        == (65536, 24558600, 0.00, 10231.95)
    assert only["msg_rate_mpps"] == 0.163711
    assert r2(res["bw_average_gbps"]) == 85.83


def test_collapsed_average_behind_a_healthy_peak():
    res = load("ib_read_bw_roce_100g_mbs_crossnode_degraded_avg_kubeansible.txt")
    only = res["rows"][0]
    assert (only["bw_peak_raw"], only["bw_average_raw"], only["msg_rate_mpps"]) == \
        (10182.70, 24.95, 0.000399)
    assert r2(res["bw_average_gbps"]) == 0.21
    assert r2(res["bw_peak_gbps"]) == 85.42  # a peak-reading harness would pass this
    assert gate(res, min_bw_gbps=90) == ["ib_read_bw average 0.21 Gb/s, required 90.00 Gb/s"]


def test_send_bw():
    res = load("ib_send_bw_roce_100g_mbs_crossnode_kubeansible.txt", "ib_send_bw")
    only = res["rows"][0]
    assert (only["bw_peak_raw"], only["bw_average_raw"], only["msg_rate_mpps"]) == \
        (10988.09, 10987.52, 0.175800)
    assert r2(res["bw_average_gbps"]) == 92.17


LAT = {
    "ib_write_lat_roce_100g_crossnode_kubeansible.txt":
        ("ib_write_lat", (1.24, 3.11, 1.26, 1.26, 0.02, 1.29, 3.11)),
    "ib_read_lat_roce_100g_crossnode_cpufreq_warn_kubeansible.txt":
        ("ib_read_lat", (2.36, 5.23, 2.40, 2.41, 0.03, 2.53, 5.23)),
    "ib_send_lat_roce_100g_crossnode_kubeansible.txt":
        ("ib_send_lat", (1.29, 4.08, 1.34, 1.34, 0.02, 1.39, 4.08)),
    "ib_read_lat_ib_cx5_4096mtu_spiderpool.txt":
        ("ib_read_lat", (1.84, 12.20, 1.90, 1.97, 0.47, 2.24, 12.20)),
    "ib_read_lat_ib_hdr200_azure_ndv4_sriov_aks_partial.txt":
        ("ib_read_lat", (5.35, 11.78, 5.49, 5.50, 0.18, 5.74, 11.78)),
}


@pytest.mark.parametrize(("name", "test", "figures"),
                         [(n, t, f) for n, (t, f) in LAT.items()])
def test_latency_rows(name, test, figures):
    res = load(name, test)
    assert res["kind"] == "latency" and len(res["rows"]) == 1
    only = res["rows"][0]
    assert (only["bytes"], only["iterations"]) == (2, 1000)
    keys = ("t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us", "p99_us",
            "p999_us")
    assert tuple(only[k] for k in keys) == figures
    assert res["t_typical_us"] == figures[2] and res["p999_us"] == figures[6]


def test_latency_tail_gate_on_the_ib_capture():
    res = load("ib_read_lat_ib_cx5_4096mtu_spiderpool.txt")
    assert (res["header"]["link_type"], res["header"]["device"], res["header"]["mtu"]) == \
        ("IB", "mlx5_8", 4096)
    assert gate(res, max_typical_us=2.0, max_p999_us=5.0, where="rail0") == [
        "rail0: ib_read_lat p99.9 latency 12.20 us, required at most 5.00 us"]
    azure = load("ib_read_lat_ib_hdr200_azure_ndv4_sriov_aks_partial.txt")
    assert gate(azure, max_typical_us=6.0) == []  # the doc's own bound: t_avg < 6 us


def test_duration_mode_latency():
    res = load("ib_write_lat_roce_100g_D300_duration_format_kubeansible.txt", "ib_write_lat")
    assert res["duration_mode"]
    assert res["rows"] == [{"bytes": 2, "iterations": 45001924, "t_avg_us": 1.67,
                            "tps_average": 300009.90}]
    assert res["t_avg_us"] == 1.67 and res["p999_us"] is None


def test_wrong_test_name_is_refused():
    with pytest.raises(PerftestError, match="the output is from ib_write_lat, expected "
                                            "ib_read_lat"):
        load("ib_write_lat_roce_100g_crossnode_kubeansible.txt", "ib_read_lat")


@pytest.mark.parametrize("line", [
    " Did not detect devices ",
    "IB device mlx5_9 not found",
    " Port number 1 state is Down",
    "Couldn't connect to 10.100.0.2:18515",
    "Unable to connect (retries = 4)",
    " Couldn't create IB resources",
])
def test_perftest_failures_carry_perftest_reason(line):
    with pytest.raises(PerftestError) as err:
        parse_perftest(f"---------------------------------------------\n{line}\n")
    assert str(err.value) == line.strip()


def test_iperf3_json():
    res = parse_iperf3((P / "iperf3_tcp_client_json_1stream_wan_71mbps_cloudpilot.json")
                       .read_text())
    assert res["transport"] == "tcp" and res["test"] == "iperf3"
    assert res["bw_sent_gbps"] * 1e9 == pytest.approx(71306818.909128144)
    assert res["bw_average_gbps"] * 1e9 == pytest.approx(71794674.2406212)
    assert res["retransmits"] == 1971
    assert res["intervals"] == 13 and res["omitted_intervals"] == 3
    assert res["header"]["streams"] == 1 and res["header"]["duration_s"] == 10
    assert gate(res, min_bw_gbps=9.0, where="rail1") == [
        "rail1: iperf3 average 0.07 Gb/s, required 9.00 Gb/s"]


def test_iperf3_bidir_counts_both_directions():
    # a lab veth rail, 2 streams each way: forward 10.50 Gb/s, reverse 2.31
    text = (FIXTURES / "lab" / "iperf3_bidir_json_P2_rail0_master_to_worker1_lab.json").read_text()
    end = json.loads(text)["end"]
    res = parse_iperf3(text)
    assert res["header"]["bidirectional"] is True and res["header"]["streams"] == 2
    assert res["bw_average_gbps"] * 1e9 == pytest.approx(
        end["sum_received"]["bits_per_second"] + end["sum_received_bidir_reverse"]["bits_per_second"])
    assert res["bw_average_gbps"] == pytest.approx(12.81, abs=0.01)
    # a one-way run (the cloudpilot capture) says so
    one_way = parse_iperf3((P / "iperf3_tcp_client_json_1stream_wan_71mbps_cloudpilot.json").read_text())
    assert one_way["header"]["bidirectional"] is False


def test_stability_and_counters():
    averages = [row(load("ib_write_bw_roce_100g_all_sizes_gbits_nvidia_gpu_operator_doc.txt"),
                    s)["bw_average_gbps"] for s in (1048576, 2097152, 4194304, 8388608)]
    assert spread_pct(averages) < 1.0
    assert spread_pct([92.47, 85.83]) == pytest.approx(100 * (92.47 - 85.83) / 89.15)
    assert counter_deltas({"symbol_error": 0, "link_downed": 1},
                          {"symbol_error": 0, "link_downed": 2}) == {"link_downed": 1}


def bw_runs(*names):
    return [load(n) for n in names]


def test_verdict_uses_the_median_average_and_names_rail_and_hosts():
    healthy = "ib_write_bw_roce_100g_mbs_crossnode_kubeansible.txt"      # 92.47
    duration = "ib_write_bw_roce_100g_mbs_D300_duration_kubeansible.txt"  # 85.83
    degraded = "ib_read_bw_roce_100g_mbs_crossnode_degraded_avg_kubeansible.txt"  # 0.21
    rails = [{"rail": "rail0", "client": "a", "server": "b", "transport": "rdma",
              "required_gbps": 90.0, "runs": bw_runs(healthy, healthy, degraded)},
             {"rail": "rail1", "client": "a", "server": "b", "transport": "rdma",
              "required_gbps": 90.0, "runs": bw_runs(healthy, duration, degraded)}]
    result = verdict(rails, [], {}, {}, 1.0)
    assert [r["passed"] for r in result["rails"]] == [True, False]
    assert result["failures"] == [
        "rail1 a -> b: rdma average 85.83 Gb/s (median of 3), required 90.00 Gb/s"]


DEGRADED = "ib_read_bw_roce_100g_mbs_crossnode_degraded_avg_kubeansible.txt"  # 0.21
SPARK_RAIL = {"rail": "rail0", "client": "spark-a", "server": "spark-b", "transport": "rdma", "rate_gbps": 115.2,
              "required_gbps": 92.16, "required_basis": "0.8 x the 115.2 Gb/s PCIe ceiling (the link runs at 200 Gb/s)",
              "client_mtu": 9000, "server_mtu": 9000, "client_pcie_problem": None, "server_pcie_problem": None}


def test_a_rail_far_under_its_ceiling_gets_the_stale_initialization_diagnosis():
    """A Spark's Gen5 x4 rail (115.2 Gb/s ceiling) at the real degraded
    capture's 0.21 Gb/s, same MTU on both ends, PCIe not narrowed: the
    reboot-then-power-cycle fix; the real 85.83 Gb/s duration run (74 % of
    it) fails plainly; a TCP rail never gets it."""
    duration = "ib_write_bw_roce_100g_mbs_D300_duration_kubeansible.txt"  # 85.83
    stale = verdict([{**SPARK_RAIL, "runs": bw_runs(DEGRADED, DEGRADED, duration)}], [], {}, {}, 1.0)["failures"]
    assert stale == ["rail0 spark-a -> spark-b: rdma average 0.21 Gb/s (median of 3), required 92.16 Gb/s (0.8 x the "
                     "115.2 Gb/s PCIe ceiling (the link runs at 200 Gb/s)); 0.21 Gb/s is 0.2 % of the rail's 115.2 Gb/s "
                     "ceiling, the band of a ConnectX-7 left in a stale state at boot (NVIDIA's DGX Spark playbooks: "
                     "8-25 Gb/s on a link that reports full speed and width; here the MTUs match and the PCIe link is "
                     "not narrowed): reboot both nodes, and if it stays, power both off and on again"]
    plain = verdict([{**SPARK_RAIL, "runs": bw_runs(duration)}], [], {}, {}, 1.0)["failures"]
    assert len(plain) == 1 and "stale" not in plain[0]
    tcp = verdict([{**SPARK_RAIL, "transport": "tcp", "runs": bw_runs(DEGRADED)}], [], {}, {}, 1.0)["failures"]
    assert len(tcp) == 1 and "stale" not in tcp[0]


def test_a_slow_rail_with_its_own_reason_is_not_called_stale():
    """The same 0.21 Gb/s, but the ends differ in MTU, or one end's PCIe
    link is narrowed (the real kvm-list ConnectX-7 PF at Gen4 x8 of Gen5
    x16, as rdma_link reads it): each is named instead of the stale state."""
    from ansible.module_utils.rails.rdma_link import pcie_downgrade  # pylint: disable=import-outside-toplevel

    mtu = verdict([{**SPARK_RAIL, "server_mtu": 1500, "runs": bw_runs(DEGRADED)}], [], {}, {}, 1.0)["failures"]
    assert len(mtu) == 1 and "stale state at boot" not in mtu[0], mtu
    assert mtu[0].endswith("0.21 Gb/s is 0.2 % of the rail's 115.2 Gb/s ceiling, and its ends differ in MTU (spark-a "
                           "9000, spark-b 1500): not a ConnectX-7's stale state; set twinrail_rail_mtu alike on both "
                           "ends (and on a switch between them) and run the rdma stage"), mtu
    lines = [line.strip() for line in (FIXTURES / "hardware" / "lspci-vvv_connectx7_mcx713106ac_pf_16GTs_x8_downgraded_"
                                       "vf_speed_unknown_kvm-list_20250728.txt").read_text().splitlines()]
    cap, sta = (next(line for line in lines if line.startswith(key)) for key in ("LnkCap:", "LnkSta:"))
    narrowed = pcie_downgrade(sta, cap)
    pcie = verdict([{**SPARK_RAIL, "client_pcie_problem": narrowed, "runs": bw_runs(DEGRADED)}], [], {}, {},
                   1.0)["failures"]
    assert len(pcie) == 1 and "stale state at boot" not in pcie[0], pcie
    assert pcie[0].endswith("and a PCIe link under it is narrowed (spark-a: PCIe link trained at Gen4 x8 (16 GT/s), "
                            "below the Gen5 x16 (32 GT/s) it is capable of: reseat the card or check the slot): not a "
                            "ConnectX-7's stale state"), pcie


def test_one_slow_direction_is_told_from_the_stale_state_by_the_both_ways_run():
    """A 400G rail whose one-way run reads the real degraded 0.21 Gb/s while
    the real bidirectional run (perftest sums both ways: 779.21 Gb/s) shows
    the other direction healthy: one direction only. Both ways as slow as
    one way: the stale state still."""
    rail = {**SPARK_RAIL, "rate_gbps": 400.0, "required_gbps": 320.0, "required_basis": "0.8 x the 400 Gb/s link rate",
            "runs": bw_runs(DEGRADED)}
    both = load("ib_write_bw_roce_400g_pollara_bidir_q4_all_gbits_client_amd_alibaba.txt")
    assert both["header"]["bidirectional"] and both["bw_average_gbps"] == 779.21
    aggregate = {"client": "spark-a", "server": "spark-b", "rails": ["rail0"], "bidirectional": True,
                 "required_gbps": 640.0, "runs": [[both]]}
    one_way = verdict([rail], [aggregate], {}, {}, 1.0)["failures"][0]
    assert "stale state at boot" not in one_way
    assert one_way.endswith("0.21 Gb/s is 0.1 % of the rail's 400 Gb/s ceiling from spark-a to spark-b, while both "
                            "ways at once carry 779.21 Gb/s (about 779.00 Gb/s the other way): one direction only, not a "
                            "ConnectX-7's stale state (which slows both); compare spark-a's pause and ring settings "
                            "(ethtool -a, ethtool -g) and error counters with spark-b's, then swap the cable's ends"), one_way
    slow_both = verdict([rail], [{**aggregate, "runs": [bw_runs(DEGRADED)]}], {}, {}, 1.0)["failures"][0]
    assert ("0.1 % of the rail's 400 Gb/s ceiling and no more the other way (0.21 Gb/s both ways at once), the band of a "
            "ConnectX-7 left in a stale state at boot") in slow_both, slow_both


def test_verdict_aggregate_sums_concurrent_rails():
    run = bw_runs("ib_write_bw_roce_100g_mbs_crossnode_kubeansible.txt",
                  "ib_send_bw_roce_100g_mbs_crossnode_kubeansible.txt")
    result = verdict([], [{"client": "a", "server": "b", "rails": ["rail0", "rail1"],
                           "required_gbps": 200.0, "runs": [run, run, run]}], {}, {}, 1.0)
    assert round(result["aggregates"][0]["bw_average_gbps"], 2) == 184.64  # 92.47 + 92.17
    assert result["failures"] == ["all rails (rail0, rail1) a -> b: 184.64 Gb/s together, "
                                  "required 200.00 Gb/s"]


def test_verdict_bidirectional_aggregate_is_gated_on_both_directions_sum():
    # an AMD Pollara 400G port, ib_write_bw -b with 4 QPs: 779.21 Gb/s, the
    # two directions' sum (one direction cannot pass 400)
    run = bw_runs("ib_write_bw_roce_400g_pollara_bidir_q4_all_gbits_client_amd_alibaba.txt")
    agg = {"client": "a", "server": "b", "rails": ["rail0"], "bidirectional": True, "runs": [run]}
    passed = verdict([], [{**agg, "required_gbps": 720.0}], {}, {}, 1.0)
    assert passed["passed"] and passed["aggregates"][0]["bw_average_gbps"] == pytest.approx(779.21)
    assert passed["aggregates"][0]["bidirectional"] is True
    failed = verdict([], [{**agg, "required_gbps": 800.0}], {}, {}, 1.0)
    assert failed["failures"] == ["all rails (rail0) a <-> b, both directions: 779.21 Gb/s together, "
                                  "required 800.00 Gb/s"]


def test_verdict_latency_tail_and_stability():
    lat = [load("ib_write_lat_roce_100g_crossnode_kubeansible.txt"),
           load("ib_send_lat_roce_100g_crossnode_kubeansible.txt")]  # t_avg 1.26, 1.34
    rails = [{"rail": "rail0", "client": "a", "server": "b", "transport": "rdma",
              "required_gbps": 1.0, "runs": bw_runs(
                  "ib_write_bw_roce_100g_mbs_crossnode_kubeansible.txt"),
              "latency": lat, "max_typical_us": 1.5, "max_p999_us": 3.5}]
    result = verdict(rails, [], {}, {}, 1.0)
    assert result["rails"][0]["latency"]["p999_us"] == 4.08
    assert result["failures"] == [
        "rail0 a -> b: p99.9 latency 4.08 us, required at most 3.50 us",
        "rail0 a -> b: average latency varies 6.15 % over 2 runs, required at most 1.00 %"]


def test_verdict_counters_must_not_move():
    before = {"b": {"rail1": {"hw_counters.out_of_sequence": 10, "netdev.rx_errors": 0}}}
    after = {"b": {"rail1": {"hw_counters.out_of_sequence": 14, "netdev.rx_errors": 0}}}
    result = verdict([], [], before, after, 1.0)
    assert result["failures"] == ["rail1 on b: error counters moved during the measurements "
                                  "(hw_counters.out_of_sequence +4), required no change"]
    assert verdict([], [], before, before, 1.0)["passed"]


def test_baseline_drop_is_flagged():
    now = {"rails": [{"rail": "rail0", "client": "a", "server": "b", "bw_average_gbps": 85.83}]}
    kept = {"rails": [{"rail": "rail0", "client": "a", "server": "b", "bw_average_gbps": 92.47}]}
    assert baseline_drops(now, kept, 10) == []
    assert baseline_drops(now, kept, 5) == [
        "rail0 a -> b: 85.83 Gb/s, 7.2 % below the baseline 92.47 Gb/s (allowed 5 %)"]
    assert baseline_drops(now, None, 5) == []


@pytest.mark.parametrize(("name", "said"), [
    ("ib_write_bw_rdma_cm_server_read_keys_failed_perftest_issue132_partial.txt",
     "it said: ethernet_read_keys: Couldn't read remote address / Unable to read to socket/rdma_cm / "
     "Failed to exchange data between server and clients"),
    ("ib_write_bw_rdma_cm_client_qp_rts_failed_perftest_issue132_partial.txt",
     "it said: Failed to modify QP to RTS / Unable to Connect the HCA's through the link"),
])
def test_a_failure_is_quoted_in_the_tools_own_words(name, said):
    text = (FIXTURES / "perftest" / name).read_text()
    with pytest.raises(PerftestError) as caught:
        parse(text, "ib_write_bw")
    assert str(caught.value) == said.removeprefix("it said: ")
