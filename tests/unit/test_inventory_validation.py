"""The preflight inventory validation, against a good inventory and bad ones.

The good inventory is inventory/example (the documented template), read with
Ansible's InventoryManager. Each bad case changes one thing in it and must
be refused with the expected sentence, and with nothing else: a case whose
defect also trips an unrelated check would hide which check caught it.
"""

from __future__ import annotations

import copy
import json

import pytest
from conftest import REPO, load_inventory

from ansible.module_utils.inventory.names import check_names
from ansible.module_utils.inventory.rules import validate
from ansible.module_utils.stages.catalogue import prefixes, registry

EXAMPLE = REPO / "inventory" / "example"
LAB = REPO / "inventory" / "lab"


def example() -> tuple[dict, dict]:
    groups, nodes = load_inventory(EXAMPLE)
    # what the module receives has been through JSON
    return json.loads(json.dumps(groups)), json.loads(json.dumps(nodes))


def grow(groups: dict, nodes: dict, count: int, masters: int = 1) -> None:
    """Make a cluster of `count` nodes on /24 rails, `masters` of them in master."""
    template = nodes["spark-b"]
    for name in list(nodes):
        del nodes[name]
    names = [f"node{i}" for i in range(count)]
    for i, name in enumerate(names):
        hv = copy.deepcopy(template)
        hv["twinrail_mgmt_address"] = f"10.20.0.{10 + i}/24"
        for r, rail in enumerate(hv["twinrail_rails"]):
            rail["address"] = f"10.100.{r}.{1 + i}/24"
        hv["twinrail_rail_fabric"] = "switch"  # more than two nodes: a switch on each rail
        nodes[name] = hv
    groups["master"] = names[:masters]
    groups["workers"] = names[masters:]
    groups["cluster"] = names


def rail(nodes: dict, host: str, index: int) -> dict:
    return nodes[host]["twinrail_rails"][index]


def setvar(key, value, hosts=("spark-a", "spark-b")):
    def patch(groups, nodes):
        for host in hosts:
            nodes[host][key] = value
    return patch


def setmodel(key, value):
    def patch(groups, nodes):
        for host in nodes:
            nodes[host]["twinrail_model"][key] = value
    return patch


def setweights(index, key, value):
    """Change (value not None) or remove (None) a key of one weight set, on every host."""
    def patch(groups, nodes):
        for host in ("spark-a", "spark-b"):
            item = nodes[host]["twinrail_weights"][index]
            if value is None:
                item.pop(key, None)
            else:
                item[key] = value
    return patch


def add_weights(**item):
    def patch(groups, nodes):
        for host in ("spark-a", "spark-b"):
            first = nodes[host]["twinrail_weights"][0]
            nodes[host]["twinrail_weights"].append(dict(first, **item))
    return patch


def delvar(key, hosts=("spark-a", "spark-b")):
    def patch(groups, nodes):
        for host in hosts:
            del nodes[host][key]
    return patch


def setrail(host, index, key, value):
    def patch(groups, nodes):
        rail(nodes, host, index)[key] = value
    return patch


def no_master(groups, nodes):
    groups["master"] = []
    groups["workers"] = ["spark-a", "spark-b"]


def two_masters(groups, nodes):
    grow(groups, nodes, 3, masters=2)


def no_workers(groups, nodes):
    groups["workers"] = []
    groups["cluster"] = ["spark-a"]
    del nodes["spark-b"]


def eight_workers(groups, nodes):
    grow(groups, nodes, 9)


def in_both(groups, nodes):
    grow(groups, nodes, 3)
    groups["workers"].append("node0")


def in_neither(groups, nodes):
    grow(groups, nodes, 3)
    groups["workers"].remove("node2")


def fewer_rails(groups, nodes):
    nodes["spark-b"]["twinrail_rails"].pop()


def renamed_rail(groups, nodes):
    rail(nodes, "spark-b", 1)["name"] = "rail2"


def shared_subnet(groups, nodes):
    rail(nodes, "spark-a", 1)["address"] = "10.100.0.5/29"
    rail(nodes, "spark-b", 1)["address"] = "10.100.0.6/29"


def rail_on_mgmt(groups, nodes):
    rail(nodes, "spark-a", 1)["address"] = "10.20.0.101/24"
    rail(nodes, "spark-b", 1)["address"] = "10.20.0.102/24"


def duplicate_interface(groups, nodes):
    rail(nodes, "spark-a", 1)["interface"] = rail(nodes, "spark-a", 0)["interface"]


def mgmt_equals_other(groups, nodes):
    nodes["spark-b"]["twinrail_mgmt_address"] = "10.20.0.11/24"


# (id, patch, expected sentence fragment, number of sentences)
BAD = [
    ("fabric-typo", setvar("twinrail_rail_fabric", "switched"),
     "spark-a: twinrail_rail_fabric: expected direct (node to node cables, one worker) or switch (a switch per "
     "rail), got 'switched' (str)", 1),
    ("no-master", no_master,
     "inventory: group 'master': expected exactly one host, got 0", 1),
    ("two-masters", two_masters,
     "inventory: group 'master': expected exactly one host, got 2 (node0, node1)", 1),
    ("no-workers", no_workers,
     "inventory: group 'workers': expected 1 to 7 hosts, got 0", 1),
    ("eight-workers", eight_workers,
     "inventory: group 'workers': expected 1 to 7 hosts, got 8", 1),
    ("master-also-worker", in_both,
     "node0: inventory: expected a host in either 'master' or 'workers', got it in both", 1),
    ("mgmt-missing", delvar("twinrail_mgmt_address", ["spark-b"]),
     "spark-b: twinrail_mgmt_address: expected an IPv4 address with its prefix, such as "
     "10.0.0.11/24, got nothing (undefined)", 1),
    ("mgmt-no-prefix", setvar("twinrail_mgmt_address", "10.20.0.12", ["spark-b"]),
     "spark-b: twinrail_mgmt_address: expected an IPv4 address with its prefix", 1),
    ("mgmt-duplicate", mgmt_equals_other,
     "spark-b: twinrail_mgmt_address: expected an address unique in the cluster, got "
     "10.20.0.11, already used by spark-a twinrail_mgmt_address", 1),
    ("rails-missing", delvar("twinrail_rails", ["spark-b"]),
     "spark-b: twinrail_rails: expected a non-empty list of rails", 1),
    ("rails-not-a-list", setvar("twinrail_rails", "enp1s0f0np0", ["spark-a"]),
     "spark-a: twinrail_rails: expected a non-empty list of rails", 1),
    ("rail-address-invalid", setrail("spark-b", 0, "address", "10.100.0.300/30"),
     "spark-b: twinrail_rails[0].address: expected an IPv4 address with its prefix, such "
     "as 10.10.0.1/30, got '10.100.0.300/30' (str)", 1),
    ("rail-address-no-prefix", setrail("spark-a", 1, "address", "10.100.1.1"),
     "spark-a: twinrail_rails[1].address: expected an IPv4 address with its prefix", 1),
    ("rail-address-network", setrail("spark-b", 0, "address", "10.100.0.0/30"),
     "spark-b: twinrail_rails[0].address: expected a host address, not the network or "
     "broadcast address of 10.100.0.0/30", 1),
    ("rail-address-host-prefix", setrail("spark-b", 0, "address", "10.100.0.2/32"),
     "spark-b: twinrail_rails[0].address: expected a prefix of /31 or shorter", 1),
    ("rail-count-differs", fewer_rails,
     "inventory: twinrail_rails: expected the same number of rails on every node, got "
     "spark-a has 2, spark-b has 1", 1),
    ("rail-name-differs", renamed_rail,
     "spark-b: twinrail_rails: expected a rail named 'rail1' as on spark-a, got none", 2),
    ("rail-name-invalid", setrail("spark-a", 0, "name", "Rail 0"),
     "spark-a: twinrail_rails[0].name: expected a short lowercase name", 1),
    ("rail-ends-apart", setrail("spark-b", 0, "address", "10.100.5.2/30"),
     "spark-b: twinrail_rails 'rail0'.address: expected an address in 10.100.0.0/30 (the "
     "subnet of spark-a's end of 'rail0'), got 10.100.5.2/30", 1),
    ("rails-share-subnet", shared_subnet,
     "inventory: twinrail_rails: expected each rail on its own subnet, got 'rail0' "
     "(10.100.0.0/30) overlapping 'rail1' (10.100.0.0/29)", 1),
    ("rail-on-mgmt", rail_on_mgmt,
     "spark-a: twinrail_mgmt_address: expected a management network apart from the "
     "rails, got 10.20.0.0/24 overlapping rail 'rail1' (10.20.0.0/24)", 1),
    ("rail-address-duplicate", setrail("spark-b", 0, "address", "10.100.0.1/30"),
     "spark-b: twinrail_rails 'rail0'.address: expected an address unique in the "
     "cluster, got 10.100.0.1, already used by spark-a twinrail_rails 'rail0'.address", 1),
    ("interface-too-long", setrail("spark-a", 0, "interface", "enp1s0f0np0-uplink"),
     "spark-a: twinrail_rails[0].interface: expected a Linux interface name of 1 to 15 "
     "characters, got 'enp1s0f0np0-uplink' (str)", 1),
    ("interface-duplicate", duplicate_interface,
     "spark-a: twinrail_rails[1].interface: expected an interface used by one rail only", 1),
    ("rdma-device-invalid", setrail("spark-b", 1, "rdma_device", "mlx5 1"),
     "spark-b: twinrail_rails[1].rdma_device: expected an RDMA device name such as "
     "mlx5_0, or empty for none, got 'mlx5 1' (str)", 1),
    ("mtu-out-of-range", setvar("twinrail_rail_mtu", 9600),
     "spark-a: twinrail_rail_mtu: expected an integer from 1280 to 9216, got 9600 (int)", 1),
    ("mtu-a-string", setvar("twinrail_rail_mtu", "9000"),
     "spark-a: twinrail_rail_mtu: expected an integer from 1280 to 9216, got '9000' (str)", 1),
    ("rail-mtu-ends-differ", setrail("spark-a", 0, "mtu", 4200),
     "spark-b: twinrail_rails 'rail0'.mtu: expected the MTU of spark-a's end (4200), "
     "got 9000", 1),
    ("cluster-var-differs", setvar("twinrail_rail_mtu", 1500, ["spark-b"]),
     "spark-b: twinrail_rail_mtu: expected the same value as on spark-a (9000) since it "
     "is cluster-wide, got 1500", 1),
    ("link-rate-zero", setvar("twinrail_rail_link_rate_gbps", 0),
     "spark-a: twinrail_rail_link_rate_gbps: expected a positive number of Gb/s", 1),
    ("ratio-above-one", setvar("twinrail_bandwidth_min_ratio", 1.5),
     "spark-a: twinrail_bandwidth_min_ratio: expected a number above 0 and at most 1", 1),
    ("aggregate-above-line-rates", setvar("twinrail_bandwidth_aggregate_min_gbps", 450),
     "spark-a: twinrail_bandwidth_aggregate_min_gbps: expected at most the sum of the rails' "
     "line rates (2 x 200 = 400 Gb/s), got 450", 1),
    ("aggregate-missing", delvar("twinrail_bandwidth_aggregate_min_gbps"),
     "spark-a: twinrail_bandwidth_aggregate_min_gbps: expected a positive number of Gb/s", 1),
    ("bidir-above-both-directions", setvar("twinrail_bandwidth_bidir_min_gbps", 900),
     "spark-a: twinrail_bandwidth_bidir_min_gbps: expected at most twice the sum of the rails' "
     "line rates (2 x 2 x 200 = 800 Gb/s), got 900", 1),
    ("bidir-missing", delvar("twinrail_bandwidth_bidir_min_gbps"),
     "spark-a: twinrail_bandwidth_bidir_min_gbps: expected a positive number of Gb/s, both directions", 1),
    ("watermarks-unordered", setvar("twinrail_memory_soft_watermark_pct", 95),
     "spark-a: twinrail_memory_soft_watermark_pct / twinrail_memory_hard_watermark_pct: "
     "expected soft < hard < 100, got soft 95 and hard 92", 1),
    ("watermark-100", setvar("twinrail_memory_hard_watermark_pct", 100),
     "spark-a: twinrail_memory_hard_watermark_pct: expected a percentage above 0 and "
     "below 100, got 100 (int)", 1),
    ("profile-not-a-name", setvar("twinrail_profile", "../dgx-spark"),
     "spark-a: twinrail_profile: expected the name of a hardware profile (a file profiles/<name>.yml), "
     "got '../dgx-spark' (str)", 1),
    ("boolean-as-string", setvar("twinrail_lab", "yes"),
     "spark-a: twinrail_lab: expected a boolean (true or false), got 'yes' (str)", 1),
    ("boolean-missing", delvar("twinrail_tcp_fallback_allowed"),
     "spark-a: twinrail_tcp_fallback_allowed: expected a boolean (true or false), got "
     "nothing (undefined)", 1),
    ("path-relative", setvar("twinrail_weights_root", "srv/models"),
     "spark-a: twinrail_weights_root: expected an absolute path, got 'srv/models' (str)", 1),
    ("model-missing", delvar("twinrail_model"),
     "spark-a: twinrail_model: expected a mapping", 1),
    ("model-layers-missing", setmodel("layers", None),
     "spark-a: twinrail_model.layers: expected a positive integer, got nothing", 1),
    ("model-params-string", setmodel("params_b", "552B"),
     "spark-a: twinrail_model.params_b: expected a positive number, got '552B' (str)", 1),
    ("model-bits-too-many", setmodel("bits_per_param", 64),
     "spark-a: twinrail_model.bits_per_param: expected at most 32 bits, got 64 (int)", 1),
    ("cluster-host-in-neither", in_neither,
     "node2: inventory: expected every host of 'cluster' in 'master' or 'workers', got it in neither", 1),
    ("model-kv-type-unknown", setmodel("kv_type", "q8"),
     "spark-a: twinrail_model.kv_type: expected a KV cache type llama.cpp has: f32 (4 bytes per element), "
     "f16 (2 bytes per element), bf16 (2 bytes per element), q8_0 (1.0625 bytes per element)", 1),
    ("model-kv-bytes-left", setmodel("kv_bytes", 1),
     "spark-a: twinrail_model.kv_bytes: expected no kv_bytes: it became kv_type", 1),
    ("model-gguf-relative", setmodel("gguf", "models/x.gguf"),
     "spark-a: twinrail_model.gguf: expected an absolute path on the controller", 1),
    ("weights-not-a-list", setvar("twinrail_weights", {"model": "m"}),
     "spark-a: twinrail_weights: expected a list of weight sets", 1),
    ("weights-empty", setvar("twinrail_weights", []),
     "spark-a: twinrail_weights: expected a list of weight sets", 1),
    ("weights-model-dotdot", setweights(0, "model", ".."),
     "spark-a: twinrail_weights[0].model: expected a directory name", 1),
    ("weights-revision-slash", setweights(0, "revision", "v1/../../etc"),
     "spark-a: twinrail_weights[0].revision: expected a directory name", 1),
    ("weights-source-unknown", setweights(0, "source", "s3"),
     "spark-a: twinrail_weights[0].source: expected one of controller, url, master, got 's3'", 1),
    ("weights-path-relative", setweights(0, "path", "incoming/model"),
     "spark-a: twinrail_weights[0].path: expected an absolute path of a directory on the master", 1),
    ("weights-manifest-escapes", setweights(0, "manifest", "../SHA256SUMS"),
     "spark-a: twinrail_weights[0].manifest: expected a file name inside path", 1),
    ("weights-no-manifest-untrusted", setweights(0, "manifest", ""),
     "spark-a: twinrail_weights[0].manifest: expected a SHA256SUMS manifest, or trust_first_copy", 1),
    ("weights-trust-not-bool", setweights(0, "trust_first_copy", "yes"),
     "spark-a: twinrail_weights[0].trust_first_copy: expected a boolean", 1),
    ("weights-url-without-base", setweights(0, "source", "url"),
     "spark-a: twinrail_weights[0].base_url: expected an http(s) URL", 1),
    ("weights-unknown-key", setweights(0, "sha256sums", "SHA256SUMS"),
     "spark-a: twinrail_weights[0].sha256sums: expected one of the known keys", 1),
    ("weights-duplicate-set", add_weights(current=False),
     "spark-a: twinrail_weights[1]: expected each model and revision once", 1),
    ("weights-two-current", add_weights(revision="2025-08-01"),
     "spark-a: twinrail_weights[1].current: expected one current revision per model", 1),
    ("gpu-count-word", setvar("twinrail_gpu_count", "eight", hosts=("spark-b",)),
     "spark-b: twinrail_gpu_count: expected a whole number of GPUs, 1 or more (or unset), got 'eight' (str)", 1),
    ("gpu-width-odd", setvar("twinrail_gpu_pcie_min_width", 12, hosts=("spark-a",)),
     "spark-a: twinrail_gpu_pcie_min_width: expected a PCIe width, one of 1, 2, 4, 8, 16, 32 (or unset), got 12", 1),
    ("gpu-mig-quoted", setvar("twinrail_gpu_mig", "no", hosts=("spark-a",)),
     "spark-a: twinrail_gpu_mig: expected a boolean (true or false), got 'no' (str)", 1),
    ("gpu-utilization-percent", setvar("twinrail_gpu_memory_utilization", 90, hosts=("spark-b",)),
     "spark-b: twinrail_gpu_memory_utilization: expected a fraction above 0 and at most 1, such as 0.9, got 90", 1),
]


def test_example_inventory_is_sound():
    groups, nodes = example()
    assert groups["master"] == ["spark-a"]
    assert set(nodes) == {"spark-a", "spark-b"}
    assert validate(groups, nodes) == []


@pytest.mark.parametrize("name", ["example-8gpu", "example-consumer"])
def test_the_gpu_examples_are_sound(name):
    """Two 8-GPU servers, and two desktops with consumer GPUs on one TCP rail."""
    groups, nodes = load_inventory(REPO / "inventory" / name)
    assert len(groups["master"]) == 1 and len(groups["workers"]) == 1
    assert all(hv.get("twinrail_gpu_count") for hv in nodes.values())
    assert validate(json.loads(json.dumps(groups)), json.loads(json.dumps(nodes))) == []


def test_lab_inventory_is_sound():
    groups, nodes = load_inventory(LAB)
    assert validate(json.loads(json.dumps(groups)), json.loads(json.dumps(nodes))) == []


def test_there_are_at_least_twenty_bad_inventories():
    assert len({case[0] for case in BAD}) == len(BAD) >= 20


@pytest.mark.parametrize(("patch", "expected", "count"),
                         [pytest.param(p, e, c, id=i) for i, p, e, c in BAD])
def test_bad_inventory_is_refused(patch, expected, count):
    groups, nodes = example()
    patch(groups, nodes)
    errors = validate(groups, nodes)
    assert any(expected in error for error in errors), errors
    assert len(errors) == count, errors


def test_every_defect_is_reported_at_once():
    """Two independent defects give two sentences: the operator fixes both in one go."""
    groups, nodes = example()
    setvar("twinrail_lab", "no")(groups, nodes)
    setrail("spark-b", 0, "address", "10.100.0.300/30")(groups, nodes)
    errors = validate(groups, nodes)
    assert len(errors) == 2, errors


def test_seven_workers_are_accepted():
    groups, nodes = example()
    grow(groups, nodes, 8)
    assert validate(groups, nodes) == []


def test_a_second_worker_on_direct_cables_is_refused_saying_a_switch_is_needed():
    """What scale.yml meets first when a site adds a worker to the seed's
    two boxes joined by one cable: refused by the validation, before any
    host is contacted."""
    groups, nodes = example()
    assert "twinrail_rail_fabric" not in nodes["spark-a"]  # the example's default: direct
    grow(groups, nodes, 3)
    for hv in nodes.values():
        del hv["twinrail_rail_fabric"]
    assert validate(groups, nodes) == [
        "inventory: group 'workers': expected one worker with twinrail_rail_fabric: direct (a rail's cable joins "
        "two ports), got 2 (node1, node2); more workers need a switch on each rail: cable every node's rails to "
        "it and set twinrail_rail_fabric: switch"]
    for hv in nodes.values():
        hv["twinrail_rail_fabric"] = "switch"
    assert validate(groups, nodes) == []


def test_the_three_node_lab_inventory_is_sound():
    groups, nodes = load_inventory(REPO / "inventory" / "lab3")
    assert len(groups["workers"]) == 2 and nodes["lab-worker2"]["twinrail_rail_fabric"] == "switch"
    assert validate(json.loads(json.dumps(groups)), json.loads(json.dumps(nodes))) == []


@pytest.mark.parametrize("change", [
    {"manifest": "", "trust_first_copy": True},
    {"source": "url", "base_url": "https://models.example/moe/resolve/main/", "path": None},
    {"source": "controller", "path": "/home/ops/bundle/moe", "current": False},
], ids=["trust-first-copy", "url", "controller"])
def test_the_other_weight_sources_are_accepted(change):
    groups, nodes = example()
    for host in nodes:
        item = nodes[host]["twinrail_weights"][0]
        item.update({k: v for k, v in change.items() if v is not None})
        for key in [k for k, v in change.items() if v is None]:
            item.pop(key)
    assert validate(groups, nodes) == []


def all_names(path) -> dict:
    """Every variable name each host of an inventory has, as the preflight play hands them over."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    inventory = InventoryManager(loader=loader, sources=[str(path)])
    variables = VariableManager(loader=loader, inventory=inventory)
    return {h.name: sorted(variables.get_vars(host=h)) for h in inventory.get_hosts()}


def settings() -> set:
    import twinrail_inventory
    return twinrail_inventory.stage_settings(str(REPO / "roles"))


@pytest.mark.parametrize("inventory", [EXAMPLE, LAB, REPO / "inventory" / "example-8gpu",
                                       REPO / "inventory" / "example-consumer"],
                         ids=["example", "lab", "example-8gpu", "example-consumer"])
def test_every_name_of_the_shipped_inventories_is_known(inventory):
    groups, nodes = load_inventory(inventory)
    names = all_names(inventory)
    assert any(n.startswith("inference_service_") for n in names[groups["master"][0]])
    assert validate(json.loads(json.dumps(groups)), json.loads(json.dumps(nodes)), names, settings(),
                    prefixes(REPO)) == []


def test_typos_are_named_once_with_their_hosts_and_the_closest_name():
    names = {"spark-a": ["twinrail_weight", "system_backup_retension", "ansible_host", "twinrail_rails"],
             "spark-b": ["twinrail_weight", "acceptance_min_prefil_tps"]}
    errors = check_names(names, settings(), prefixes(REPO))
    assert [e.split(":")[0] + ":" + e.split(":")[1] for e in errors] == [
        "spark-b: acceptance_min_prefil_tps", "spark-a: system_backup_retension", "spark-a, spark-b: twinrail_weight"]
    assert errors[0].endswith("did you mean acceptance_min_prefill_tps?")
    assert errors[1].endswith("did you mean system_backup_retention?")
    assert errors[2].endswith("did you mean twinrail_weights?")
    # far from every known name: refused without a guess
    assert check_names({"n": ["twinrail_zzzzzzzzzzzz"]}, settings(), prefixes(REPO))[0].endswith(
        "which every stage would ignore")


def _misspelt(name: str) -> str:
    """A setting with one letter dropped from its last word (retention_time -> retention_tme)."""
    head, last = name.rsplit("_", 1)
    cut = 1 if len(last) > 2 else 0
    return f"{head}_{last[:cut]}{last[cut + 1:]}"


def test_a_misspelt_setting_of_every_stage_is_refused_with_the_closest_name():
    """Every stage of the registry (site.yml's play files and their roles,
    so a new stage cannot be missed): one of its settings misspelt is
    refused, naming the setting it meant; monitoring_retention_tme among them."""
    known = settings()
    stages = registry(REPO)
    assert [s["name"] for s in stages] == ["preflight", "backup", "kernel", "rdma", "bandwidth", "runtime", "weights",
                                           "service", "monitoring", "acceptance"]
    for stage in stages:
        own = sorted(n for n in known if n.startswith(stage["prefix"]))
        assert own, f"{stage['name']}: no setting with the prefix {stage['prefix']}"
        meant = own[0]
        typo = _misspelt(meant)
        errors = check_names({"spark-a": [typo, meant]}, known, prefixes(REPO))
        assert len(errors) == 1 and errors[0].startswith(f"spark-a: {typo}: expected a name twinrail reads"), stage
        assert errors[0].endswith(f"did you mean {meant}?"), (stage, errors)
    errors = check_names({"spark-a": ["monitoring_retention_tme"]}, known, prefixes(REPO))
    assert errors == ["spark-a: monitoring_retention_tme: expected a name twinrail reads (an inventory variable in "
                      "README's table or a stage's setting in roles/<role>/meta/argument_specs.yml), got an unknown "
                      "one, which every stage would ignore; did you mean monitoring_retention_time?"]


def test_names_without_the_stages_prefixes_are_a_programming_error():
    groups, nodes = load_inventory(REPO / "inventory" / "example")
    with pytest.raises(ValueError, match="without the stages' prefixes"):
        validate(groups, nodes, {"n": ["twinrail_weight"]}, settings())


def test_the_facts_stages_hand_on_are_the_only_unspecified_prefixed_names():
    """A set_fact named with a stage's prefix (not __) is read by another
    stage; it must be declared, or preflight would call it a typo when
    passed with -e (and a new one would go unnoticed)."""
    import yaml as _yaml
    from ansible.module_utils.inventory.names import STAGE_FACTS
    from ansible.module_utils.stages.catalogue import prefixes
    stage_prefixes = prefixes(REPO)
    found = set()

    def walk(node):
        if isinstance(node, dict):
            facts = node.get("ansible.builtin.set_fact")
            if isinstance(facts, dict):
                found.update(k for k in facts if k.startswith(stage_prefixes))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in (REPO / "roles").glob("*/tasks/*.yml"):
        walk(_yaml.safe_load(path.read_text()))
    assert found and found - settings() == set(STAGE_FACTS)
