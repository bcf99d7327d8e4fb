"""When the bandwidth and acceptance stages measure: the decision on the
rails as the sysfs reader sees them (a sysfs tree laid out as the kernel
lays it out) and on deployment records as deployment_record writes them."""

from __future__ import annotations

import copy

import pytest
from test_rdma_link import RAIL, build_sysfs

from ansible.module_utils.stages.measure_due import (acceptance_due, bandwidth_due, bandwidth_fingerprint, deployed_key,
                         run_time)
from ansible.module_utils.rails.rdma_link import rail_state

NOW = run_time("20261201T120000Z")
DAY = 86400
SETTINGS = {"min_ratio": 0.9, "aggregate_min_gbps": 200.0, "repeats": 3}


def pci_sysfs(root, *, driver="mlx5_core", speed="32.0 GT/s PCIe", width="4", fw="28.45.1020"):
    """A NIC's PCI function under the interface, as sysfs shows a ConnectX."""
    root = build_sysfs(root)
    pci = root / "devices" / "pci0000:00" / "0000:01:00.0"
    pci.mkdir(parents=True)
    (pci / "current_link_speed").write_text(speed + "\n")
    (pci / "current_link_width").write_text(width + "\n")
    drivers = root / "bus" / "pci" / "drivers" / driver
    drivers.mkdir(parents=True)
    (pci / "driver").symlink_to(drivers)
    (root / "class" / "net" / RAIL["interface"] / "device").symlink_to(pci)
    (root / "class" / "infiniband" / RAIL["rdma_device"] / "fw_ver").write_text(fw + "\n")
    return root


def links(root, kernel="6.17.0-1021-nvidia", machine_id="5c1f0c3e8e6a4b0c9a1d2e3f4a5b6c7d"):
    return {"kernel": kernel, "machine_id": machine_id, "rails": {"rail0": rail_state(str(root), RAIL)}}


def fingerprint(root, **kw):
    return bandwidth_fingerprint({"spark-a": [RAIL]}, {"spark-a": links(root, **kw)})


def baseline_of(fp, run="20261201T110000Z", passed=True, counters=None):
    return {"run": run, "passed": passed, "fingerprint": fp, "settings": dict(SETTINGS),
            "counters": counters or {"spark-a": {"rail0": {"netdev.rx_errors": 0}}}}


COUNTERS = {"spark-a": {"rail0": {"netdev.rx_errors": 0}}}


def due(baseline, fp, *, settings=SETTINGS, counters=COUNTERS, mode="auto", asked=False):
    return bandwidth_due(baseline, fp, settings, counters, NOW, DAY, mode, asked)


def test_the_fingerprint_names_driver_firmware_and_pcie_link(tmp_path):
    fp = fingerprint(pci_sysfs(tmp_path))
    assert fp["spark-a"]["kernel"] == "6.17.0-1021-nvidia" and fp["spark-a"]["machine_id"] == "5c1f0c3e8e6a4b0c9a1d2e3f4a5b6c7d"
    assert fp["spark-a"]["rails"]["rail0"] == {
        "interface": "ens1f0np0", "address": "10.100.0.1/30", "rdma_device": "mlx5_0", "mtu": 9000,
        "rate_gbps": 200.0, "driver": "mlx5_core", "firmware": "28.45.1020", "pci_link": "32.0 GT/s PCIe x4"}


def test_an_unchanged_fresh_baseline_is_kept_and_named(tmp_path):
    fp = fingerprint(pci_sysfs(tmp_path))
    out = due(baseline_of(fp), fp)
    assert out["measure"] is False and out["reasons"] == []
    assert "baseline of 2026-12-01 11:00 UTC still valid" in out["msg"] and "1.0 h old" in out["msg"]


@pytest.mark.parametrize("change, reason", [
    ({"driver": "mlx4_core"}, "spark-a: rail0 driver 'mlx5_core' -> 'mlx4_core'"),
    ({"fw": "28.39.1002"}, "spark-a: rail0 firmware '28.45.1020' -> '28.39.1002'"),
    ({"width": "2"}, "spark-a: rail0 pci_link '32.0 GT/s PCIe x4' -> '32.0 GT/s PCIe x2'"),
])
def test_a_changed_driver_firmware_or_pcie_link_measures(tmp_path, change, reason):
    old = fingerprint(pci_sysfs(tmp_path / "old"))
    new = fingerprint(pci_sysfs(tmp_path / "new", **change))
    out = due(baseline_of(old), new)
    assert out["measure"] and out["reasons"] == [reason], out
    assert out["msg"] == "bandwidth: measuring: " + reason


def test_kernel_mtu_address_and_nodes(tmp_path):
    old = fingerprint(pci_sysfs(tmp_path))
    new = copy.deepcopy(old)
    new["spark-a"]["kernel"] = "6.17.0-1022-nvidia"
    new["spark-a"]["machine_id"] = "0" * 32
    new["spark-a"]["rails"]["rail0"]["mtu"] = 1500
    new["spark-b"] = copy.deepcopy(old["spark-a"])
    out = due(baseline_of(old), new)
    assert out["reasons"] == ["spark-a: not the node the baseline was measured on (machine-id "
                              "5c1f0c3e8e6a4b0c9a1d2e3f4a5b6c7d -> " + "0" * 32 + ")",
                              "spark-a: kernel 6.17.0-1021-nvidia -> 6.17.0-1022-nvidia",
                              "spark-a: rail0 mtu 9000 -> 1500", "spark-b is not in the baseline"]


def test_age_failure_settings_counters_and_asking(tmp_path):
    fp = fingerprint(pci_sysfs(tmp_path))
    assert due(baseline_of(fp, run="20261129T110000Z"), fp)["reasons"] == [
        "the baseline is 2.0 d old (at most 24.0 h)"]
    assert due(baseline_of(fp, passed=False), fp)["reasons"] == [
        "the baseline of 2026-12-01 11:00 UTC failed its gate"]
    assert due(baseline_of(fp), fp, settings=dict(SETTINGS, min_ratio=1.0))["reasons"] == [
        "setting min_ratio 0.9 -> 1.0"]
    grown = {"spark-a": {"rail0": {"netdev.rx_errors": 7}}}
    assert due(baseline_of(fp), fp, counters=grown)["reasons"] == [
        "spark-a: rail0 error counters grew since the baseline: netdev.rx_errors +7"]
    # a dropped frame is no link error (the lab's veths drop a few while a service restarts)
    dropped = {"spark-a": {"rail0": {"netdev.rx_errors": 0, "netdev.tx_dropped": 4, "netdev.rx_dropped": 9}}}
    assert due(baseline_of(fp), fp, counters=dropped)["measure"] is False
    # a counter reset (a reboot) is no error
    reset = baseline_of(fp, counters={"spark-a": {"rail0": {"netdev.rx_errors": 9}}})
    assert due(reset, fp)["measure"] is False
    assert due(baseline_of(fp), fp, asked=True)["reasons"] == ["asked for (--tags bandwidth alone)"]
    assert due(baseline_of(fp), fp, mode="always")["reasons"] == ["asked for (bandwidth_gate_measure=always)"]
    assert due(None, fp)["reasons"] == ["no baseline kept on the controller"]
    older = {k: v for k, v in baseline_of(fp).items() if k != "fingerprint"}
    assert due(older, fp)["reasons"] == [
        "the baseline of 2026-12-01 11:00 UTC does not say what it was measured on"]
    with pytest.raises(ValueError, match="mode must be one of auto, always, got 'sometimes'"):
        due(baseline_of(fp), fp, mode="sometimes")


RECORD = {  # as deployment_record writes it (library/deployment_record.py collect())
    "host": "lab-master", "machine_id": "5c1f0c3e8e6a4b0c9a1d2e3f4a5b6c7d", "kernel": "6.1.0-28-amd64",
    "runtime": {"release": "b4470-0f3c2a1d9e8b", "manifest": {"build_id": "0f3c2a1d"}},
    "guard": {"release": "0.1.0-1a2b3c4d5e6f", "sha256": "1a2b3c4d5e6f" + "0" * 52},
    "models": {"qwen": {"revision": "r1", "manifest_sha256": "ab" * 32}},
    "config_version": "7d1e2f3a", "twinrail_commit": "95270a7",
}


def report_of(records, failures=(), settings=None, run="20261201T110000Z"):
    return {"context": {"run": run, "deployed": {h: deployed_key(r) for h, r in records.items()},
                        "settings": settings or {"concurrency": 4}},
            "failures": list(failures)}


def test_acceptance_is_kept_while_nothing_deployed_changed():
    records = {"lab-master": RECORD, "lab-worker1": dict(RECORD, host="lab-worker1")}
    # a new twinrail commit or kernel is not a new deployment of the service
    now = {h: dict(r, twinrail_commit="abcdef0", kernel="6.1.0-29-amd64") for h, r in records.items()}
    out = acceptance_due(report_of(records), now, {"concurrency": 4}, "auto", False)
    assert out["measure"] is False
    assert out["msg"].startswith("acceptance: verdict of 2026-12-01 11:00 UTC still valid (PASS;")


@pytest.mark.parametrize("field, value, reason", [
    ("runtime", {"release": "b4471-aa"}, "runtime release 'b4470-0f3c2a1d9e8b' -> 'b4471-aa'"),
    ("guard", {"sha256": "ff"}, "guard '1a2b3c4d5e6f" + "0" * 52 + "' -> 'ff'"),
    ("config_version", "8e2f", "service configuration '7d1e2f3a' -> '8e2f'"),
    ("machine_id", "0" * 32, "the node itself (machine-id)"),
    ("models", {"qwen": {"revision": "r2", "manifest_sha256": "cd" * 32}}, "weights"),
])
def test_acceptance_measures_what_changed(field, value, reason):
    records = {"lab-master": RECORD}
    out = acceptance_due(report_of(records), {"lab-master": dict(RECORD, **{field: value})},
                         {"concurrency": 4}, "auto", False)
    assert out["measure"] and len(out["reasons"]) == 1 and out["reasons"][0].startswith("lab-master: " + reason)


def test_acceptance_measures_after_a_failure_a_setting_or_when_asked():
    records = {"lab-master": RECORD}
    assert acceptance_due(report_of(records, failures=["prefill 10 < 2000"]), records, {"concurrency": 4},
                          "auto", False)["reasons"] == ["the report of 2026-12-01 11:00 UTC failed 1 check(s)"]
    assert acceptance_due(report_of(records), records, {"concurrency": 8}, "auto", False)["reasons"] == [
        "setting concurrency 4 -> 8"]
    assert acceptance_due(report_of(records), {"lab-master": None}, {"concurrency": 4}, "auto", False)[
        "reasons"] == ["lab-master: what is deployed was not read in this run"]
    assert acceptance_due(None, records, {}, "auto", False)["reasons"] == [
        "no acceptance report kept on the controller"]
    assert acceptance_due(report_of(records), records, {"concurrency": 4}, "auto", True)["reasons"] == [
        "asked for (--tags acceptance alone)"]
    assert acceptance_due(report_of(records), records, {"concurrency": 4}, "always", False)["reasons"] == [
        "asked for (acceptance_measure=always)"]
