"""filter_plugins/ (a file per group: rails, weights, service, stages): the rails' drift and reachability on real
captures of the lab's iproute2 output (tests/fixtures/lab/), the bandwidth
plan and what a node lacks of a weight set."""

from __future__ import annotations

import copy
import json
import os
import re

from pathlib import Path

import pytest

from conftest import FIXTURES, REPO, filter_plugins

filters = filter_plugins()

LAB = FIXTURES / "lab"
RAILS = [{"name": "rail0", "interface": "ens1f0np0", "rdma_device": "", "address": "198.19.0.1/24"},
         {"name": "rail1", "interface": "ens1f1np1", "rdma_device": "", "address": "198.19.1.1/24"}]
WORKER_RAILS = [dict(r, address=r["address"].replace(".1/24", ".2/24")) for r in RAILS]


def capture(name: str):
    return json.loads((LAB / name).read_text())


def ansible_filters() -> dict:
    """The filters Ansible's own plugin loader finds in filter_plugins/, by name."""
    from ansible.plugins.loader import filter_loader, init_plugin_loader

    init_plugin_loader()
    filter_loader.add_directory(str(REPO / "filter_plugins"))
    found = {}
    for plugin in filter_loader.all():
        if str(getattr(plugin, "_original_path", "")).startswith(str(REPO / "filter_plugins")):
            found[plugin.ansible_name] = plugin
    return found


def test_every_filter_the_stages_use_is_found_by_ansibles_loader_and_documented():
    used = set()
    for path in [*REPO.glob("*.yml"), *REPO.glob("playbooks/*.yml"), *REPO.glob("roles/*/*/*.yml"),
                 *REPO.glob("roles/*/templates/**/*.j2"), *REPO.glob("templates/*.j2")]:
        used |= set(re.findall(r"\|\s*(twinrail_\w+)(?=[\s(}])", path.read_text()))
    found = ansible_filters()
    assert used and used <= set(found), sorted(used - set(found))
    for name, plugin in found.items():
        # each filter: a docstring, and a line of its own in its file's DOCUMENTATION
        assert (plugin.j2_function.__doc__ or "").strip(), name
        source = Path(plugin._original_path).read_text()  # pylint: disable=protected-access
        documentation = source.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0]
        assert f"C({name}):" in documentation, (name, plugin._original_path)  # pylint: disable=protected-access
    # every function a filter file defines is one of its filters (or a helper named _...)
    for path in (REPO / "filter_plugins").glob("*.py"):
        functions = set(re.findall(r"^def ([a-z]\w*)\(", path.read_text(), re.M))
        served = {p.j2_function.__name__ for p in found.values() if p._original_path == str(path)}  # pylint: disable=protected-access
        assert functions == served, (path.name, functions ^ served)


def test_the_settings_filters_name_only_the_broken_rules():
    names = filters.setting_names("kernel")
    assert names == ["kernel_tuning_nr_hugepages", "kernel_tuning_reboot_timeout", "kernel_tuning_memlock_users",
                     "kernel_tuning_cmdline"]
    good = {"kernel_tuning_nr_hugepages": 0, "kernel_tuning_reboot_timeout": 900,
            "kernel_tuning_memlock_users": ["twinrail-llm"], "kernel_tuning_cmdline": ["iommu=pt", "pcie_aspm=off"]}
    assert filters.setting_problems("kernel", good) == []
    assert filters.setting_problems("kernel", dict(good, kernel_tuning_reboot_timeout="30")) == [
        "kernel_tuning_reboot_timeout: expected at least 60 s, got '30'"]
    with pytest.raises(ValueError, match="no settings rules for stage 'kernal'; the stages: acceptance, backup"):
        filters.setting_names("kernal")


# ------------------------------------------------------------ drift

def test_converged_rails_have_not_drifted():
    for node, rails in (("master", RAILS), ("worker1", WORKER_RAILS)):
        addresses = capture(f"ip_j_address_show_converged_lab_{node}.json")
        routes = capture(f"ip_j_route_show_table_all_converged_lab_{node}.json")
        assert filters.rails_drifted(rails, addresses, routes, 9000, 100) == []


@pytest.mark.parametrize("change, drifted", [
    ({"mtu": 4200}, ["ens1f0np0"]),                       # the file asks for another MTU
    ({"address": "198.19.0.7/24"}, ["ens1f0np0"]),        # another address
])
def test_a_rail_unlike_its_file_has_drifted(change, drifted):
    rails = [dict(RAILS[0], **change), RAILS[1]]
    addresses = capture("ip_j_address_show_converged_lab_master.json")
    routes = capture("ip_j_route_show_table_all_converged_lab_master.json")
    assert filters.rails_drifted(rails, addresses, routes, 9000, 100) == drifted


def test_a_rail_whose_table_lost_its_route_has_drifted_and_a_rail_set_down_has_not():
    addresses = capture("ip_j_address_show_converged_lab_master.json")
    routes = [r for r in capture("ip_j_route_show_table_all_converged_lab_master.json") if r.get("table") != "102"]
    assert filters.rails_drifted(RAILS, addresses, routes, 9000, 100) == ["ens1f1np1"]
    down = copy.deepcopy(addresses)
    for link in down:
        if link["ifname"] == "ens1f1np1":
            link["flags"] = [f for f in link["flags"] if f not in ("UP", "LOWER_UP")]
    assert filters.rails_drifted(RAILS, down, routes, 9000, 100) == []
    # the default MTU applies to a rail that names none
    assert filters.rails_drifted(RAILS, addresses, capture("ip_j_route_show_table_all_converged_lab_master.json"),
                                 1500, 100) == ["ens1f0np0", "ens1f1np1"]


# ------------------------------------------------------------ reachability

def test_the_rail_gate_probes_every_peer_on_every_rail_in_name_order():
    third = [dict(r, address=r["address"].replace(".1/24", ".3/24")) for r in RAILS]
    probes = filters.rail_probes([dict(RAILS[0], mtu=4000), RAILS[1]],
                                 {"lab-worker2": third, "lab-worker1": WORKER_RAILS}, 9000)
    assert [(p["rail"], p["peer"], p["own"], p["address"], p["mtu"]) for p in probes] == [
        ("rail0", "lab-worker1", "198.19.0.1", "198.19.0.2", 4000),
        ("rail0", "lab-worker2", "198.19.0.1", "198.19.0.3", 4000),
        ("rail1", "lab-worker1", "198.19.1.1", "198.19.1.2", 9000),
        ("rail1", "lab-worker2", "198.19.1.1", "198.19.1.3", 9000)]
    assert {p["interface"] for p in probes if p["rail"] == "rail1"} == {"ens1f1np1"}
    assert filters.rail_probes(RAILS, {}, 9000) == []


def test_only_the_rails_whose_route_leaves_by_their_own_interface_carry_weights():
    routes = [{"rc": 0, "stdout": (LAB / "ip_j_route_get_rail0_peer_lab_master.json").read_text(), "__r": RAILS[0]},
              {"rc": 0, "stdout": (LAB / "ip_j_route_get_rail1_peer_lab_master.json").read_text(), "__r": RAILS[1]}]
    assert filters.rails_routed_directly(routes, RAILS, "__r") == RAILS
    # rail1's peer reached through rail0's interface, or no route at all
    crossed = [routes[0], dict(routes[0], __r=RAILS[1])]
    assert filters.rails_routed_directly(crossed, RAILS, "__r") == [RAILS[0]]
    assert filters.rails_routed_directly([dict(routes[0], rc=2, stdout="")], RAILS, "__r") == []


# ------------------------------------------------------------ bandwidth plan

def links(rate=None, gid=None):
    return {r["name"]: {"up": True, "rate_gbps": rate, "gid_index": gid, "problem": ""} for r in RAILS}


def plan(**kw):
    args = dict(master="lab-master", workers=["lab-worker1"],
                rails={"lab-master": RAILS, "lab-worker1": WORKER_RAILS},
                links={"lab-master": links(10.0), "lab-worker1": links(10.0)}, active=None,
                default_rate_gbps=200, min_ratio=0.9, perftest_port_base=18515, iperf3_port_base=5201)
    args.update(kw)
    return filters.bandwidth_plan(args.pop("master"), args.pop("workers"), args.pop("rails"), args.pop("links"),
                                  args.pop("active"), **args)


def test_one_measurement_per_worker_and_rail_over_tcp_without_rdma_devices():
    assert plan() == [
        {"rail": "rail0", "client": "lab-master", "server": "lab-worker1", "transport": "tcp",
         "client_address": "198.19.0.1", "server_address": "198.19.0.2", "client_device": "", "server_device": "",
         "client_gid": None, "server_gid": None, "port": 5201, "rate_gbps": 10.0, "link_gbps": 10.0,
         "pcie_gbps": None, "required_gbps": 9.0, "required_basis": "0.9 x the 10 Gb/s link rate",
         "client_mtu": None, "server_mtu": None, "client_pcie_problem": None, "server_pcie_problem": None},
        {"rail": "rail1", "client": "lab-master", "server": "lab-worker1", "transport": "tcp",
         "client_address": "198.19.1.1", "server_address": "198.19.1.2", "client_device": "", "server_device": "",
         "client_gid": None, "server_gid": None, "port": 5202, "rate_gbps": 10.0, "link_gbps": 10.0,
         "pcie_gbps": None, "required_gbps": 9.0, "required_basis": "0.9 x the 10 Gb/s link rate",
         "client_mtu": None, "server_mtu": None, "client_pcie_problem": None, "server_pcie_problem": None}]


def test_rdma_on_both_ends_the_lower_negotiated_rate_and_ports_per_worker():
    rdma = [dict(r, rdma_device=f"rocep1s0f{i}") for i, r in enumerate(RAILS)]
    worker2 = [dict(r, address=r["address"].replace(".1/24", ".3/24")) for r in rdma]
    p = plan(workers=["lab-worker1", "lab-worker2"],
             rails={"lab-master": rdma, "lab-worker1": [dict(r, rdma_device="mlx5_0") for r in WORKER_RAILS],
                    "lab-worker2": worker2},
             links={"lab-master": links(200.0, 3), "lab-worker1": links(100.0, 1), "lab-worker2": links(None, 3)})
    assert [(x["server"], x["rail"], x["transport"], x["port"], x["rate_gbps"], x["required_gbps"]) for x in p] == [
        ("lab-worker1", "rail0", "rdma", 18515, 100.0, 90.0), ("lab-worker1", "rail1", "rdma", 18516, 100.0, 90.0),
        ("lab-worker2", "rail0", "rdma", 18525, 200.0, 180.0), ("lab-worker2", "rail1", "rdma", 18526, 200.0, 180.0)]
    assert p[0]["client_gid"] == 3 and p[0]["server_gid"] == 1 and p[0]["server_device"] == "mlx5_0"
    # the workers as a set hands them (intersect): the same plan, the same ports
    assert plan(workers=["lab-worker2", "lab-worker1"], rails={
        "lab-master": rdma, "lab-worker1": [dict(r, rdma_device="mlx5_0") for r in WORKER_RAILS],
        "lab-worker2": worker2}, links={"lab-master": links(200.0, 3), "lab-worker1": links(100.0, 1),
                                         "lab-worker2": links(None, 3)}) == p
    # one end without a device: TCP
    half = plan(rails={"lab-master": rdma, "lab-worker1": WORKER_RAILS})
    assert {x["transport"] for x in half} == {"tcp"}


def test_each_ends_mtu_and_pcie_state_go_with_the_measurement():
    """What the verdict tells a rail slow for its own reasons from a
    ConnectX-7's stale state by: each end's MTU and PCIe problem, as the
    rdma stage's facts give them."""
    master = {name: dict(state, netdev={"mtu": 9000}, pcie_problem=None) for name, state in links(10.0).items()}
    worker = {name: dict(state, netdev={"mtu": 1500}, pcie_problem="PCIe link trained at Gen5 x2 (32 GT/s), below the "
                                                                     "Gen5 x4 (32 GT/s) it is capable of")
              for name, state in links(10.0).items()}
    p = plan(links={"lab-master": master, "lab-worker1": worker})
    assert [(x["client_mtu"], x["server_mtu"], x["client_pcie_problem"]) for x in p] == [(9000, 1500, None)] * 2
    assert p[0]["server_pcie_problem"].startswith("PCIe link trained at Gen5 x2")


def test_only_the_active_rails_and_the_default_rate_when_no_end_knows_it():
    p = plan(active=["rail1"], links={"lab-master": links(), "lab-worker1": links()})
    assert [(x["rail"], x["port"], x["rate_gbps"], x["required_gbps"]) for x in p] == [("rail1", 5202, 200, 180.0)]


def test_each_measurement_gets_its_own_runs_and_the_latency_bounds():
    p = plan()
    results = [{"rail": "rail0", "server": "lab-worker1", "kind": "bw", "result": {"avg_gbps": 9.7}},
               {"rail": "rail1", "server": "lab-worker1", "kind": "bw", "result": {"avg_gbps": 9.1}},
               {"rail": "rail0", "server": "lab-worker1", "kind": "bw", "result": {"avg_gbps": 9.5}},
               {"rail": "rail0", "server": "lab-worker1", "kind": "lat", "result": {"typical_us": 3.1}},
               {"rail": "rail0", "server": "lab-worker2", "kind": "bw", "result": {"avg_gbps": 1.0}}]
    rails = filters.bandwidth_rails(p, results, "5", 50)
    assert [r["runs"] for r in rails] == [[{"avg_gbps": 9.7}, {"avg_gbps": 9.5}], [{"avg_gbps": 9.1}]]
    assert rails[0]["latency"] == [{"typical_us": 3.1}] and rails[1]["latency"] == []
    assert rails[0]["max_typical_us"] == 5.0 and rails[0]["max_p999_us"] == 50.0
    assert {k: v for k, v in rails[0].items() if k in p[0]} == p[0]


def test_the_aggregate_per_worker_names_its_rails_and_every_run():
    p = plan(workers=["lab-worker1", "lab-worker2"],
             rails={"lab-master": RAILS, "lab-worker1": WORKER_RAILS, "lab-worker2": WORKER_RAILS},
             links={"lab-master": links(10.0), "lab-worker1": links(10.0), "lab-worker2": links(10.0)})
    runs = [{"server": "lab-worker2", "results": [1], "bidirectional": False},
            {"server": "lab-worker2", "results": [4], "bidirectional": True},
            {"server": "lab-worker1", "results": [2], "bidirectional": False},
            {"server": "lab-worker2", "results": [3], "bidirectional": False}]
    assert filters.bandwidth_aggregates(runs, p, "lab-master", "18", "30") == [
        {"client": "lab-master", "server": "lab-worker2", "rails": ["rail0", "rail1"], "bidirectional": False,
         "required_gbps": 18.0, "runs": [[1], [3]]},
        {"client": "lab-master", "server": "lab-worker2", "rails": ["rail0", "rail1"], "bidirectional": True,
         "required_gbps": 30.0, "runs": [[4]]},
        {"client": "lab-master", "server": "lab-worker1", "rails": ["rail0", "rail1"], "bidirectional": False,
         "required_gbps": 18.0, "runs": [[2]]}]
    assert filters.bandwidth_aggregates([], p, "lab-master", 18, 30) == []


def test_the_clients_of_one_worker_s_aggregate_run_each_rail_s_own_tool():
    rdma = [dict(r, rdma_device=f"rocep1s0f{i}") for i, r in enumerate(RAILS)]
    p = plan(workers=["lab-worker1", "lab-worker2"],
             rails={"lab-master": rdma, "lab-worker1": [dict(r, rdma_device="mlx5_0") for r in WORKER_RAILS],
                    "lab-worker2": WORKER_RAILS},
             links={"lab-master": links(200.0, 3), "lab-worker1": links(100.0, 1), "lab-worker2": links(10.0)})
    assert filters.bandwidth_clients(p, "lab-worker1", False, 4, 1048576) == [
        {"test": "ib_write_bw", "server": "198.19.0.2", "device": "rocep1s0f0", "gid_index": 3, "port": 18515,
         "bind_address": "198.19.0.1", "qps": 1, "size": 1048576,
         "label": "rail0 lab-master -> lab-worker1 (all rails)"},
        {"test": "ib_write_bw", "server": "198.19.1.2", "device": "rocep1s0f1", "gid_index": 3, "port": 18516,
         "bind_address": "198.19.1.1", "qps": 1, "size": 1048576,
         "label": "rail1 lab-master -> lab-worker1 (all rails)"}]
    # a worker without RDMA devices: iperf3 with the TCP streams, no device, GID or message size
    tcp = filters.bandwidth_clients(p, "lab-worker2", True, 4, 1048576)
    assert [(c["test"], c["port"], c["qps"], c["device"], c["gid_index"], c["size"]) for c in tcp] == [
        ("iperf3", 5211, 4, None, None, None), ("iperf3", 5212, 4, None, None, None)]
    assert tcp[1]["label"] == "rail1 lab-master <-> lab-worker2 (all rails, both ways)"
    assert filters.bandwidth_clients(p, "lab-worker3", False, 4, 1048576) == []


# ------------------------------------------------------------ weights

def test_what_a_node_lacks_is_every_bad_file_with_its_source_size():
    bad = [{"file": "a/1.safetensors", "reason": "missing"}, {"file": "b.gguf", "reason": "sha256"}]
    assert filters.weights_needed(bad, {"a/1.safetensors": 10, "b.gguf": 20, "c": 5}) == \
        {"a/1.safetensors": 10, "b.gguf": 20}
    assert filters.weights_needed(bad, {}) == {"a/1.safetensors": 0, "b.gguf": 0}
    assert filters.weights_needed([], {"c": 5}) == {} == filters.weights_needed(None, {"c": 5})


def test_rail_problems_on_the_lab_masters_links():
    links = capture("ip_j_d_link_show_converged_lab_master.json")
    assert filters.rail_problems(RAILS, links, [], 9000) == []
    veth = next(link for link in links if link["ifname"] == "ens1f0np0")
    missing = dict(RAILS[1], interface="ens9f9")
    out = filters.rail_problems([RAILS[0], missing, dict(RAILS[0], rdma_device="mlx5_0")], links, [], 9000)
    assert out[0].startswith("rail1: interface ens9f9 does not exist (has: ")
    assert "lo," not in out[0] and "ens1f0np0" in out[0]
    assert out[1] == "rail0: RDMA device mlx5_0 does not exist (has: none)"
    # more than the NIC can carry (a veth: its max_mtu as ip reports it)
    over = veth["max_mtu"] + 1
    assert filters.rail_problems([dict(RAILS[0], mtu=over)], links, [], 9000) == [
        f"rail0: ens1f0np0 carries at most MTU {veth['max_mtu']}, twinrail_rail_mtu asks for {over}"]


def test_checksum_mismatches_name_missing_and_wrong_binaries():
    want = {"llama-server": "aa", "ggml-rpc-server": "bb", "llama-cli": "cc"}
    results = [{"__t": "llama-server", "stat": {"exists": True, "checksum": "aa"}},
               {"__t": "ggml-rpc-server", "stat": {"exists": True, "checksum": "ff"}},
               {"__t": "llama-cli", "stat": {"exists": False}}]
    assert filters.checksum_mismatches(results, want, "__t") == ["ggml-rpc-server", "llama-cli"]


def test_idle_workers_hold_less_than_their_share():
    results = [{"__w": "w1", "stdout": "400000000 RDMA"}, {"__w": "w2", "stdout": "10 RDMA"},
               {"__w": "w3", "skipped": True}]
    assert [r["__w"] for r in filters.idle_workers(results, 1_000_000_000, 0.25)] == ["w2"]


def test_rails_not_answering():
    rails = WORKER_RAILS
    ok = {"status": 200, "json": {"rpc": [{"address": "198.19.0.2", "ok": True}, {"address": "198.19.1.2", "ok": False}]}}
    results = [dict(ok, __r=rails[0]), dict(ok, __r=rails[1]), {"status": -1, "__r": rails[0]},
               {"skipped": True, "__r": rails[1]}]
    assert filters.rails_not_answering(results, "__r") == [rails[1], rails[0]]


GOOD_KEY = "0123456789abcdef0123456789abcdef"


def test_api_keys_become_sorted_digests_the_guard_can_match():
    from twinrail.guard import access  # the guard's side of the same digest

    digests = filters.api_key_digests([{"name": "team-b", "key": GOOD_KEY + "b"}, {"name": "team-a", "key": GOOD_KEY}])
    assert [k["name"] for k in digests["keys"]] == ["team-a", "team-b"]
    assert GOOD_KEY not in json.dumps(digests)
    assert digests["keys"][0]["sha256"] == access.digest(GOOD_KEY)


@pytest.mark.parametrize(("keys", "problem"), [
    ({"name": "a", "key": GOOD_KEY}, "expected a list"),
    ([{"name": "a"}], "expected {name, key}, got ['name']"),
    ([{"name": "Team A", "key": GOOD_KEY}], "is not lower-case letters"),
    ([{"name": "a", "key": GOOD_KEY}, {"name": "a", "key": GOOD_KEY + "x"}], "name 'a' given twice"),
    ([{"name": "a", "key": "short"}], "at least 24 characters"),
    ([{"name": "a", "key": GOOD_KEY + " x"}], "without spaces"),
    ([{"name": "a", "key": GOOD_KEY}, {"name": "b", "key": GOOD_KEY}], "the same key as an earlier entry"),
])
def test_api_key_problems_name_the_entry_and_never_the_key(keys, problem):
    problems = filters.api_key_problems(keys)
    assert any(problem in p for p in problems), problems
    assert not any(GOOD_KEY in p for p in problems)


def test_good_api_keys_have_no_problems():
    assert filters.api_key_problems([]) == []
    assert filters.api_key_problems([{"name": "lab-client", "key": GOOD_KEY}, {"name": "b.2", "key": GOOD_KEY + "2"}]) == []


def test_a_rail_behind_a_narrower_pcie_link_is_held_to_the_pcie_ceiling():
    """A DGX Spark: the port negotiates 200 Gb/s, the function sits on PCIe
    Gen5 x4 (the lspci capture): the pass line is the ratio of the PCIe
    ceiling, and says so."""
    from ansible.module_utils.rails import rdma_link  # module_utils, on the unit tests' path

    lnksta = (FIXTURES / "hardware" / "lspci_cx7_lnkcap_lnksta_grep_gen5_x4_hp_zgx_stondo_blog_partial.txt"
              ).read_text().splitlines()[-1]
    ceiling = rdma_link.pcie_ceiling_gbps(lnksta)
    rdma = [dict(r, rdma_device=f"rocep1s0f{i}") for i, r in enumerate(RAILS)]
    spark = {r["name"]: {"up": True, "rate_gbps": 200.0, "gid_index": 3, "problem": "", "pcie_gbps": ceiling}
             for r in RAILS}
    p = plan(rails={"lab-master": rdma, "lab-worker1": [dict(r, rdma_device="mlx5_0") for r in WORKER_RAILS]},
             links={"lab-master": spark, "lab-worker1": spark}, min_ratio=0.8)
    assert [(x["link_gbps"], x["pcie_gbps"], x["rate_gbps"]) for x in p] == [(200.0, ceiling, ceiling)] * 2
    assert p[0]["required_gbps"] == round(0.8 * ceiling, 3)
    assert p[0]["required_basis"] == f"0.8 x the {ceiling:g} Gb/s PCIe ceiling (the link runs at 200 Gb/s)"


# ------------------------------------------------------------ restarts on a new configuration

def test_a_worker_restarts_on_its_settings_but_not_on_the_clusters_members():
    """The lab's service.env as the service stage wrote it (2 nodes), then
    as it reads with a second worker (the membership keys changed): the
    master restarts, a worker does not; a changed RPC port restarts both."""
    before = (LAB / "service_env_lab.txt").read_text()
    grown = before
    for key, value in {"TWINRAIL_RPC_SERVERS": "198.19.0.2:50052,198.19.1.2:50052,198.19.0.3:50052,198.19.1.3:50052",
                       "TWINRAIL_GUARD_WORKERS": "lab-worker1@198.19.0.2=rail0,lab-worker1@198.19.1.2=rail1,"
                                                 "lab-worker2@198.19.0.3=rail0,lab-worker2@198.19.1.3=rail1",
                       "TWINRAIL_GPU_LAYERS": "21"}.items():
        line = next(x for x in before.splitlines() if x.startswith(key + "="))
        grown = grown.replace(line, f"{key}={value}")
    assert grown != before
    assert filters.service_restarts(before, grown, False) is True  # the master: its --rpc list
    assert filters.service_restarts(before, grown, True) is False  # a worker: nothing it reads
    port = next(x for x in before.splitlines() if x.startswith("TWINRAIL_RPC_PORT="))
    moved = grown.replace(port, "TWINRAIL_RPC_PORT=6000")
    assert filters.service_restarts(before, moved, True) is True
    assert filters.service_restarts(None, before, True) is False  # a new node: started, not restarted
    assert filters.service_restarts(before, before, False) is False


def test_no_worker_unit_reads_the_clusters_members():
    """What makes the restart rule above true: the worker's units and the
    scripts they run name none of MEMBERSHIP_KEYS."""
    templates = REPO / "roles" / "inference_service" / "templates"
    for name in ("twinrail-rpc@.service.j2", "twinrail-agent.service.j2", "wait-address.sh.j2"):
        text = (templates / name).read_text()
        assert not [k for k in filters.MEMBERSHIP_KEYS if k in text], name
    # and the master's do (the test would pass for a key nobody reads)
    master = (templates / "twinrail-llama.service.j2").read_text() + (templates / "twinrail-guard.service.j2").read_text()
    assert all(k in master for k in filters.MEMBERSHIP_KEYS), [k for k in filters.MEMBERSHIP_KEYS if k not in master]


# ------------------------------------------------------------ scale.yml

def test_the_units_pids_come_from_systemctl_show_in_systemds_order():
    show = (LAB / "systemctl_show_id_mainpid_lab_worker1.txt").read_text()
    assert show.startswith("MainPID=")  # systemd prints MainPID first, whatever the order asked
    assert filters.unit_pids(show) == {"twinrail-agent.service": 3390, "twinrail-rpc@198.19.1.2.service": 3351,
                                       "twinrail-rpc@198.19.0.2.service": 3306}
    assert filters.units_restarted(show, show) == []
    restarted = show.replace("MainPID=3351", "MainPID=4000")
    assert filters.units_restarted(show, restarted) == ["twinrail-rpc@198.19.1.2.service: pid 3351 -> 4000"]
    stopped = show.replace("MainPID=3390", "MainPID=0")
    assert filters.units_restarted(show, stopped) == ["twinrail-agent.service: pid 3390 -> 0"]


def test_the_scale_change_reads_the_workers_serving_from_the_masters_configuration():
    env = (LAB / "service_env_lab.txt").read_text()
    grown = filters.scale_change(env, ["lab-worker1", "lab-worker2"])
    assert (grown["serving"], grown["kept"], grown["added"], grown["removed"]) == (
        ["lab-worker1"], ["lab-worker1"], ["lab-worker2"], [])
    assert grown["summary"] == ("adding lab-worker2; lab-worker1 keep serving, their units left running; the master "
                                "restarts once with the new --rpc list")
    same = filters.scale_change(env, ["lab-worker1"])
    assert same["added"] == same["removed"] == [] and "nothing to add or take out" in same["summary"]
    # lab-worker1 out of the inventory: taken out, and refused until the run knows how to reach it
    out = filters.scale_change(env, ["lab-worker2"])
    assert out["removed"] == out["unreachable"] == ["lab-worker1"]
    assert filters.scale_change(env, ["lab-worker2"], {"lab-worker1": "198.18.0.11"})["unreachable"] == []
    fresh = filters.scale_change(None, ["lab-worker1"])
    assert fresh["serving"] == [] and fresh["added"] == ["lab-worker1"]


def test_the_weights_stamp_sees_a_controller_source_change_without_reading_it(tmp_path):
    source = tmp_path / "model"
    (source / "layers").mkdir(parents=True)
    shard = source / "layers" / "shard-1.bin"
    shard.write_bytes(b"\0" * 4096)
    (source / "SHA256SUMS").write_text("x  layers/shard-1.bin\n")
    sets = [{"model": "m", "revision": "r1", "source": "controller", "path": str(source)},
            {"model": "m2", "revision": "r2", "source": "master", "path": "/srv/elsewhere"},
            {"model": "m3", "revision": "r3", "source": "controller", "path": str(tmp_path / "absent")}]
    before = filters.weights_controller_sources(sets)
    # only the controller's sources; a missing one lists as None
    assert list(before) == ["m/r1: its controller source", "m3/r3: its controller source"]
    assert before["m3/r3: its controller source"] is None
    assert [row[:2] for row in before["m/r1: its controller source"]] == [
        ["SHA256SUMS", 22], [os.path.join("layers", "shard-1.bin"), 4096]]
    assert filters.weights_controller_sources(sets) == before
    # one byte written in place, the old times put back: the ctime moves
    info = shard.stat()
    with shard.open("r+b") as handle:
        handle.seek(100)
        handle.write(b"\1")
    os.utime(shard, ns=(info.st_atime_ns, info.st_mtime_ns))
    after = filters.weights_controller_sources(sets)
    assert after != before and shard.stat().st_mtime_ns == info.st_mtime_ns


def test_the_disk_gate_counts_the_controller_sources_files_only(tmp_path):
    source = tmp_path / "model"
    (source / "layers").mkdir(parents=True)
    (source / "layers" / "shard-1.bin").write_bytes(b"\0" * 4096)
    (source / "SHA256SUMS").write_text("x  layers/shard-1.bin\n")
    elsewhere = tmp_path / "on-the-master"
    elsewhere.mkdir()
    (elsewhere / "big.bin").write_bytes(b"\0" * 100000)
    sets = [{"model": "m", "revision": "r1", "source": "controller", "path": str(source)},
            {"model": "m2", "revision": "r2", "source": "master", "path": str(elsewhere)},
            {"model": "m3", "revision": "r3", "source": "controller", "path": str(tmp_path / "absent")}]
    assert filters.weights_controller_bytes(sets) == 4096 + 22
    assert filters.weights_controller_bytes([]) == 0


@pytest.mark.parametrize("value, stage, mode", [
    (None, "bandwidth", "auto"), ("auto", "weights", "auto"), ("always", "backup", "always"),
    ("bandwidth,weights", "weights", "always"), ("bandwidth,weights", "acceptance", "auto"),
    (["acceptance"], "acceptance", "always"), ([], "bandwidth", "auto")])
def test_twinrail_measure_forces_the_stages_it_names(value, stage, mode):
    assert filters.measure_mode(value, stage) == mode


@pytest.mark.parametrize("value", ["yes", "bandwidth,kernel", ["weights", 3], True])
def test_twinrail_measure_of_the_wrong_form_is_refused_with_the_expected_form(value):
    with pytest.raises(filters.AnsibleFilterError) as err:
        filters.measure_mode(value, "weights")
    assert str(err.value).startswith("twinrail_measure: expected auto, always, or a list of the stages") \
        and repr(value) in str(err.value)


@pytest.mark.parametrize("wanted, installed, missing", [
    (["perftest", "rdma-core"], ["rdma-core", "perftest", "tar"], False),
    (["perftest", "rdma-core"], ["rdma-core", "tar"], True),  # removed by hand: apt puts it back
    (["perftest"], None, True),  # no list read this run (--tags): apt decides
    ([], None, False), ([], ["tar"], False)])  # nothing this node needs
def test_apt_runs_only_where_a_package_is_missing(wanted, installed, missing):
    assert filters.packages_missing(wanted, installed) is missing


def test_without_keys_removes_what_ansible_utils_remove_keys_removes():
    """The bandwidth stage's report as the lab wrote it, with the RDMA rails'
    perftest results read from real captures (their headers' `raw` at depth
    three): twinrail_without_keys gives what the collection's remove_keys
    gives, and leaves its input as it was."""
    from ansible_collections.ansible.utils.plugins.plugin_utils.remove_keys import remove_keys
    from ansible.module_utils.rails.perftest import parse_perftest
    report = json.loads((FIXTURES / "monitoring" / "bandwidth_lab.json").read_text())
    report["rdma"] = [{"rail": path.stem, "result": parse_perftest(path.read_text())}
                      for path in sorted((FIXTURES / "perftest").glob("ib_*_bw_*.txt"))[:3]]
    assert json.dumps(report).count('"raw"') == 3
    before = copy.deepcopy(report)
    ours = filters.without_keys(report, ["samples", "raw"])
    assert ours == remove_keys(copy.deepcopy(report), ["samples", "raw"])
    assert '"raw"' not in json.dumps(ours) and ours["rails"] == report["rails"]
    assert report == before


@pytest.mark.parametrize("capture, count, has", [
    ("dpkg_query_status_package_debian12_dev_machine.txt", 751, "adduser"),
    ("dpkg_query_status_package_lab_master_bookworm.txt", 218, "openssh-server"),
])
def test_the_installed_packages_are_read_from_dpkg_query(capture, count, has):
    lines = (FIXTURES / "dpkg" / capture).read_text().splitlines()[1:]  # the first line names the command
    names = filters.dpkg_installed("\n".join(lines))
    assert len(names) == count and has in names and all(" " not in n and n for n in names)
    # a line of another state is no installed package
    assert filters.dpkg_installed("\n".join(line.replace("installed ", "config-files ", 1) for line in lines)) == []


def test_file_entries_pair_each_name_with_its_rendered_content():
    entries = filters.file_entries(["twinrail-rpc@.service", "twinrail-agent.service"], "/etc/systemd/system",
                                   ["[Unit]\nA\n", "[Unit]\nB\n"])
    assert entries == [{"dest": "/etc/systemd/system/twinrail-rpc@.service", "content": "[Unit]\nA\n", "mode": "0644"},
                       {"dest": "/etc/systemd/system/twinrail-agent.service", "content": "[Unit]\nB\n", "mode": "0644"}]
    assert filters.file_entries([], "/usr/local/lib/twinrail", [], "0755") == []
    with pytest.raises(filters.AnsibleFilterError, match="2 names and 1 contents"):
        filters.file_entries(["a", "b"], "/x", ["only one"])
