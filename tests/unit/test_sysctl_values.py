"""sysctl key paths and value comparison (module_utils/node/sysctl_values.py),
and the twinrail_sysctl module's check and diff modes on this machine's
real /proc/sys."""

from __future__ import annotations

from conftest import REPO, module_process
from ansible.module_utils.node.sysctl_values import key_path, mismatches, normalize, read


def test_key_path_follows_sysctl_naming():
    assert key_path("vm.swappiness") == "/proc/sys/vm/swappiness"
    assert key_path("net.ipv4.conf.ens1f0np0.arp_ignore") == \
        "/proc/sys/net/ipv4/conf/ens1f0np0/arp_ignore"
    # a '/' stands for a '.' inside an interface name, as in sysctl(8)
    assert key_path("net.ipv4.conf.eth0/100.rp_filter") == \
        "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"


def test_values_compare_as_the_kernel_prints_them():
    assert normalize("4096\t1048576\t268435456\n") == "4096 1048576 268435456"
    assert normalize(1) == "1"


def test_read_real_proc_values():
    assert read("kernel.ostype") == "Linux"
    assert read("net.ipv4.no_such_key") is None


def test_mismatches_name_key_expected_and_actual():
    got = mismatches({"vm.swappiness": 1, "a.b": "4096 87380"},
                     {"vm.swappiness": "60", "a.b": "4096 87380"})
    assert got == ["vm.swappiness: expected '1', got '60'"]
    assert mismatches({"x.y": 1}, {"x.y": None}) == ["x.y: expected '1', got absent"]


def test_check_and_diff_modes_show_the_keys_to_set_and_set_none(tmp_path):
    swappiness = read("vm.swappiness")
    other = "17" if swappiness != "17" else "18"
    settings = {"vm.swappiness": other, "kernel.ostype": "Linux"}
    args = {"settings": settings, "host": "node1", "_ansible_check_mode": True, "_ansible_diff": True}
    result = module_process(REPO / "library" / "twinrail_sysctl.py", args, tmp_path)
    assert result["changed"] and result["set"] == ["vm.swappiness"]
    # only the key that differs, before and after, in sysctl's notation
    assert result["diff"] == {"before": f"vm.swappiness = {swappiness}\n", "after": f"vm.swappiness = {other}\n",
                              "before_header": "/proc/sys", "after_header": "/proc/sys"}
    assert read("vm.swappiness") == swappiness
    # what already holds shows nothing
    same = module_process(REPO / "library" / "twinrail_sysctl.py",
                          dict(args, settings={"kernel.ostype": "Linux"}), tmp_path)
    assert not same["changed"] and "diff" not in same
