"""Verify the kernel stage on the lab nodes.

The network namespace's own values are applied and read back; the
kernel-wide ones are rendered only, and the host under the lab keeps its
own values (the lab makes them read-only, the role must not even try).
"""

from __future__ import annotations

import pytest
from lab_client import default

NET = {
    "net.ipv4.tcp_rmem": "4096 1048576 268435456",
    "net.ipv4.tcp_wmem": "4096 1048576 268435456",
    "net.ipv4.tcp_mtu_probing": "1",
}


def sysctl(host, key: str) -> str:
    return " ".join(host.file("/proc/sys/" + key.replace(".", "/")).content_string.split())


@pytest.mark.parametrize(("key", "value"), NET.items())
def test_namespaced_sysctls_are_in_effect(host, key, value):
    assert sysctl(host, key) == value


def test_rail_interfaces_have_their_arp_and_rp_filter_settings(host):
    for rail in host.ansible.get_variables()["twinrail_rails"]:
        base = f"net.ipv4.conf.{rail['interface']}"
        assert sysctl(host, f"{base}.arp_ignore") == "1"
        assert sysctl(host, f"{base}.arp_announce") == "2"
        assert sysctl(host, f"{base}.rp_filter") == "2"


def test_drop_ins_are_rendered(host):
    kernel = host.file(default("kernel_tuning_sysctl_kernel_file"))
    net = host.file(default("kernel_tuning_sysctl_net_file"))
    assert kernel.mode == 0o644 and kernel.user == "root"
    assert "vm.max_map_count = 1048576" in kernel.content_string
    assert "net.core.rmem_max = 268435456" in kernel.content_string
    assert "net.ipv4.tcp_rmem = 4096 1048576 268435456" in net.content_string
    assert "vm." not in net.content_string
    limits = host.file(default("kernel_tuning_memlock_limits_file")).content_string
    assert "twinrail-llm  hard  memlock  unlimited" in limits
    systemd = host.file(default("kernel_tuning_memlock_systemd_file")).content_string
    assert "DefaultLimitMEMLOCK=infinity" in systemd
    grub = host.file(default("kernel_tuning_grub_file")).content_string
    assert "iommu=pt pcie_aspm=off" in grub
    tmpfiles = host.file(default("kernel_tuning_tmpfiles_file")).content_string
    assert "/sys/kernel/mm/transparent_hugepage/enabled - - - - madvise" in tmpfiles


def test_kernel_wide_values_were_not_applied_from_the_container(host):
    """The rendered vm.max_map_count is 1048576; the host's stays its own."""
    with open("/proc/sys/vm/max_map_count", encoding="ascii") as handle:
        controller = handle.read().strip()
    assert controller != "1048576", "the controller's vm.max_map_count was changed"
    assert sysctl(host, "vm.max_map_count") == controller
