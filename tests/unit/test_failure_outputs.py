"""The tools twinrail reads, failing: perftest, iperf3, ibdev2netdev,
ibstat, ibv_devinfo and journalctl outputs captured from public threads
(tests/fixtures/net/SOURCES.md), each read as a failure quoting the tool,
never as a default value, an empty list or health; and the multi-device
outputs of the same tools read whole."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from ansible.module_utils.inventory.hardware_profile import ParseError as IbdevError
from ansible.module_utils.inventory.hardware_profile import parse_ibdev2netdev
from ansible.module_utils.rails.perftest import PerftestError, parse_iperf3, parse_perftest
from ansible.module_utils.rails.rdma_link import ParseError, parse_ibstat, parse_ibv_devinfo, rail_gate
from ansible.module_utils.node.unit_journal import journal_problem, unit_failures

NET = FIXTURES / "net"


def read(name: str) -> str:
    text = (NET / name).read_text()
    # one poster quoted the output as Markdown ("  > " before each line)
    return "\n".join(line.split("> ", 1)[1] if line.lstrip().startswith(">") else line
                     for line in text.splitlines()) if "blockquoted" in name else text


@pytest.mark.parametrize("name, words", [
    ("perftest_connect_fail_init_socket.txt", "Couldn't connect to 192.168.125.211:18515"),
    ("perftest_no_rdma_device_found.txt", "Did not detect devices"),
    ("perftest_completion_error_status4_syndrom0x51.txt", "Failed status 4: wr_id 0 syndrom 0x51"),
    ("perftest_completion_error_status12_syndrom0x81_oneline.txt", "Completion with error at client"),
    ("perftest_rdmacm_server_ethernet_read_keys.txt", "ethernet_read_keys: Couldn't read remote address"),
    ("perftest_rdmacm_client_modify_qp_rts.txt", "Failed to modify QP to RTS"),
    ("perftest_modify_qp_rtr_two_qps.txt", "Failed to modify QP 122272 to RTR"),
    ("perftest_create_qp_fail_client.txt", "Failed to create QP."),
    ("perftest_create_qp_fail_server.txt", "Failed to create QP."),
    ("perftest_ud_create_qp_fail_server.txt", "Failed to create QP."),
    ("perftest_ud_create_qp_fail_client.txt", "Couldn't create IB resources."),
    ("perftest_rdmacm_alloc_mr_init_socket_fail.txt", "Couldn't allocate MR"),
    ("perftest_port_down_no_context_blockquoted.txt", "Port number 1 state is Down"),
])
def test_perftest_failing_is_a_failure_in_its_own_words(name, words):
    with pytest.raises(PerftestError) as raised:
        parse_perftest(read(name), "ib_write_bw")
    assert words in str(raised.value)


def test_a_whole_header_then_a_failed_key_exchange_is_the_failure_not_a_missing_row():
    with pytest.raises(PerftestError) as raised:
        parse_perftest(read("perftest_ib_read_bw_server_ethernet_read_keys_full.txt"), "ib_read_bw")
    assert str(raised.value).startswith("ethernet_read_keys: Couldn't read remote address / Unable to read to "
                                        "socket/rdam_cm / Failed to exchange data between server and clients")


@pytest.mark.parametrize("name", [
    "perftest_ib_send_bw_server_2qps_partial.txt",  # two QPs' header, no result row
    "perftest_ngc_ib_write_bw_bidir_2qps_header_partial.txt",  # bidirectional, two QPs, cut in its header
])
def test_a_run_with_a_header_and_no_result_is_never_a_figure(name):
    with pytest.raises(PerftestError, match="no rows|no '#bytes' column header"):
        parse_perftest(read(name), "ib_write_bw")


@pytest.mark.parametrize("name, words", [
    ("iperf3_conn_refused_client.txt", "iperf3: error - unable to connect to server: Connection refused"),
    ("iperf3_conn_refused_new_wording_3.17.txt", "server may have stopped running or use a different port"),
    ("iperf3_server_busy.txt", "iperf3: error - the server is busy running a test. try again later"),
    ("iperf3_json_error_no_route.json", "error - unable to connect to server: No route to host"),
    ("iperf3_json_stream_server_busy.txt", "the server is busy running a test. try again later"),
])
def test_iperf3_failing_is_a_failure_in_its_own_words(name, words):
    with pytest.raises(PerftestError, match="iperf3 failed: ") as raised:
        parse_iperf3(read(name))
    assert words in str(raised.value)


@pytest.mark.parametrize("name", ["iperf3_json_P3_interval_streams_partial.txt",
                                  "iperf3_json_P4_reverse_start_partial.txt"])
def test_iperf3_json_cut_short_is_not_a_figure(name):
    with pytest.raises(PerftestError, match="iperf3 output is not JSON") as raised:
        parse_iperf3(read(name))
    assert "{" in str(raised.value)  # what it printed is quoted


def test_ibdev2netdev_with_twelve_devices_and_its_virtual_functions():
    rows = parse_ibdev2netdev(read("ibdev2netdev_12dev_column_annotated.txt"))
    assert len(rows) == 12 and [r["device"] for r in rows][:3] == ["mlx5_0", "mlx5_1", "mlx5_10"]
    assert [r["netdev"] for r in rows if r["state"] == "Up"] == ["enp27s0f0np0", "enp157s0f0np0"]
    vfs = parse_ibdev2netdev(read("ibdev2netdev_sriov_vfs_partial.txt"))
    assert len(vfs) == 16 and all(r["port"] == 1 for r in vfs)
    (pod,) = parse_ibdev2netdev(read("ibdev2netdev_single_vf_down_in_pod.txt"))
    assert (pod["device"], pod["netdev"], pod["state"]) == ("mlx5_3", "net1", "Down")


@pytest.mark.parametrize("name, words", [
    ("ibv_devinfo_no_ib_devices_found.txt", "No IB devices found"),
    ("ibv_devinfo_no_ib_devices_no_config_dir.txt", "couldn't open config directory '/etc/libibverbs.d'"),
])
def test_no_rdma_device_is_an_error_quoting_the_tools(name, words):
    with pytest.raises(ParseError, match="ibv_devinfo listed no device") as raised:
        parse_ibv_devinfo(read(name))
    assert words in str(raised.value)
    with pytest.raises(IbdevError, match="ibdev2netdev lists no") as raised:
        parse_ibdev2netdev(read(name))
    assert words in str(raised.value)
    with pytest.raises(ParseError, match="ibstat listed no device") as raised:
        parse_ibstat(read("ibstat_ibpanic_an_interface.txt"))
    assert "stat of IB device 'mlx5_an0' failed: No such file or directory" in str(raised.value)


def test_ports_down_and_a_two_port_card_are_read_as_they_are():
    port = parse_ibv_devinfo(read("ibv_devinfo_port_down_h100_partial.txt"))["mlx5_0"]["ports"][1]
    assert (port["state"], port["state_code"], port["link_layer"]) == ("PORT_DOWN", 1, "InfiniBand")
    mlx4 = parse_ibstat(read("ibstat_mlx4_dual_port_one_down_debug_partial.txt"))["mlx4_0"]
    assert {n: (p["state"], p["physical_state"]) for n, p in mlx4["ports"].items()} == {
        1: ("Down", "Disabled"), 2: ("Active", "LinkUp")}
    many = parse_ibstat(read("ibstat_multi_ca_roce_with_disabled_partial.txt"))
    assert {ca: c["ports"][1]["state"] for ca, c in many.items()} == {
        "mlx5_0": "Active", "mlx5_1": "Active", "mlx5_10": "Down"}
    for name in ("ibstat_state_down_physical_linkup_pod.txt", "ibstat_down_polling_guids_redacted.txt",
                 "ibstat_down_disabled_tabs_partial.txt"):
        (ca,) = parse_ibstat(read(name)).values()
        assert ca["ports"][1]["state"] == "Down", name


def test_a_failed_ibv_devinfo_fails_the_rail_naming_it():
    """rdma_link_facts keeps the tool's words on the port; the gate names
    the rail, the host and the device with them."""
    state = {"interface": "enp1s0f0np0", "rdma_device": "rocep1s0f0", "up": True, "rate_gbps": 200,
             "problem": None, "port": {"port": 1, "devinfo_problem": "ibv_devinfo listed no device: No IB devices found"}}
    verdict = rail_gate({"spark-a": {"rail0": state}}, 200, allow_single_rail=False)
    assert verdict["failures"] == ["rail0: spark-a rocep1s0f0: ibv_devinfo listed no device: No IB devices found"]
    assert not verdict["passed"]


@pytest.mark.parametrize("name, words", [
    ("journalctl_u_k3s_no_entries_logs_begin.txt", "journalctl: -- No entries --"),
    ("journalctl_u_kubelet_no_entries_with_hint.txt",
     "journalctl: Hint: You are currently not seeing messages from other users and the system."),
])
def test_a_journal_that_shows_nothing_says_so(name, words):
    assert journal_problem(read(name)) == words


@pytest.mark.parametrize("name, last", [
    ("journalctl_u_segv_restart.txt", "Unit iot.service entered failed state."),
    ("journal_abrt_core_dump_partial.txt", "Failed with result 'core-dump'."),
    ("systemctl_status_exit_code_failure.txt", "Failed with result 'exit-code'."),
])
def test_systemd_saying_a_process_crashed_is_read(name, last):
    failures = unit_failures(read(name))
    assert failures and failures[-1].endswith(last)
    assert any("status=" in line and "/" in line for line in failures)
    assert journal_problem(read(name)) is None  # the journal was read: the unit failed, not the reading


def _links(text: str) -> list[tuple[str, str, str]]:
    """(device line, LnkCap, LnkSta) per device block of an lspci -vv capture."""
    out, device, cap = [], None, None
    for line in text.splitlines():
        stripped = line.strip()
        if line[:1].isalnum() and ":" in line[:8]:
            device = line
        elif line.startswith("Card: "):
            device = line.split(" ", 2)[2]
        elif stripped.startswith("LnkCap:"):
            cap = stripped
        elif stripped.startswith("LnkSta:") and device:
            out.append((device, cap, stripped))
    return out


def test_lspci_downgraded_links_are_named_and_full_ones_pass():
    """Real lspci -vv: two RTX 2060 cards trained at x8 of x16, and an H100
    node's blocks: a Gen5 switch port at 16 of 32 GT/s, the BMC's NIC at x1
    of x2, the H100 and its ConnectX-7 at Gen5 x16."""
    from ansible.module_utils.rails.rdma_link import pcie_downgrade  # pylint: disable=import-outside-toplevel

    gpus = _links((FIXTURES / "gpu" / "lspci_vv_grep_gt_2x_rtx2060_width_x8_downgraded.txt").read_text())
    assert len(gpus) == 2
    assert {pcie_downgrade(sta, cap) for _, cap, sta in gpus} == {
        "PCIe link trained at Gen3 x8 (8 GT/s), below the Gen3 x16 (8 GT/s) it is capable of: reseat the card or "
        "check the slot"}
    node = {device.split(" ")[0]: pcie_downgrade(sta, cap) for device, cap, sta in
            _links((FIXTURES / "gpu" / "lspci_vvv_h100_node_excerpt_nic_bridge_downgraded.txt").read_text())}
    assert "x1 (5 GT/s), below the Gen2 x2" in node["01:00.0"]  # the BMC's NIC
    assert "Gen4 x16 (16 GT/s), below the Gen5 x16 (32 GT/s)" in node["17:03.0"]  # a Gen5 switch port
    assert node["19:00.0"] is None and node["1a:00.0"] is None  # the H100, the ConnectX-7


def test_an_lspci_that_cannot_name_the_speed_still_compares_the_lanes():
    """lspci older than Gen5 prints a ConnectX-7's LnkCap as "Speed unknown,
    Width x16" (lshca issue 51); a ConnectX-7 PF trained at 16GT/s x8 of
    32GT/s x16 and its VF with no link (kvm list). The width of an unknown
    speed is kept: the lshca card's LnkCap with the kvm PF's narrowed LnkSta
    (two real lines of two ConnectX-7 PFs) is a narrowed link."""
    from ansible.module_utils.rails.rdma_link import parse_pcie_link, pcie_ceiling_gbps, pcie_downgrade  # pylint: disable=import-outside-toplevel

    old_cap, full_sta = (FIXTURES / "hardware" / "lspci_connectx7_lnkcap_speed_unknown_old_pciutils_lshca_issue51.txt"
                         ).read_text().splitlines()[:2]
    assert parse_pcie_link(old_cap) == {"gts": None, "width": 16, "generation": None}
    assert pcie_downgrade(full_sta, old_cap) is None and pcie_ceiling_gbps(old_cap) is None
    kvm = _links((FIXTURES / "hardware" / "lspci-vvv_connectx7_mcx713106ac_pf_16GTs_x8_downgraded_vf_speed_unknown_"
                  "kvm-list_20250728.txt").read_text())
    (_, pf_cap, pf_sta), (_, vf_cap, vf_sta) = kvm
    assert pcie_downgrade(pf_sta, pf_cap) == ("PCIe link trained at Gen4 x8 (16 GT/s), below the Gen5 x16 (32 GT/s) "
                                              "it is capable of: reseat the card or check the slot")
    assert parse_pcie_link(vf_sta) is None and pcie_downgrade(vf_sta, vf_cap) is None  # x0: no link of its own
    assert pcie_downgrade(pf_sta, old_cap) == ("PCIe link trained at Gen4 x8 (16 GT/s), below the x16 (speed "
                                               "unknown) it is capable of: reseat the card or check the slot")


def test_rdma_link_facts_reads_ibv_devinfo_or_names_its_failure():
    """The module's reading of `ibv_devinfo -v -d DEV` on real outputs: a
    CX5 port's MTUs filled in; no device, or the tool failing, a problem
    quoting it."""
    import rdma_link_facts  # pylint: disable=import-outside-toplevel

    def state(device):
        return {"rdma_device": device, "port": {"port": 1}}

    cx5 = (FIXTURES / "perftest" / "ibv_devinfo_ibstat_roce_cx5_100g_kubeansible.txt").read_text()
    device = next(iter(parse_ibv_devinfo(cx5)))
    good = state(device)
    assert rdma_link_facts.devinfo_problem(0, cx5, "", good) is None
    assert good["port"]["active_mtu"] and good["port"]["max_mtu"]
    assert rdma_link_facts.devinfo_problem(0, cx5, "", state(device + "x")) == \
        f"ibv_devinfo does not list {device}x port 1"
    none = read("ibv_devinfo_no_ib_devices_found.txt")
    assert rdma_link_facts.devinfo_problem(0, none, "", state("mlx5_0")).startswith(
        "no 'hca_id:' line: ibv_devinfo listed no device: ")
    assert rdma_link_facts.devinfo_problem(255, "", none, state("mlx5_0")).startswith(
        "ibv_devinfo -d mlx5_0 exited 255: ") and "No IB devices found" in \
        rdma_link_facts.devinfo_problem(255, "", none, state("mlx5_0"))
