"""Stage `backup` on the lab, from the controller: the backup of each node
read back and matching its sha256, the deployment record on the node and
the controller, the cold-archive timer valid and working, a damaged file
restored byte for byte by restore.yml, a settings change calling for a new
backup, and bad input (unwritable target, no space, retention 0, a bad ReaR
URL) refused with nothing deleted; the ReaR configuration validated by
`rear dump`."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from lab_client import RECORD_DIR, default

testinfra_hosts = ["ansible://master"]

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
NODES = {"lab-master": "twinrail-lab-master", "lab-worker1": "twinrail-lab-worker1"}
TARGET = default("system_backup_target")


def node(name: str, *argv: str, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", NODES[name], *argv], capture_output=True, text=True, check=check)


def playbook(name: str, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    return subprocess.run(["ansible-playbook", "-i", str(PROJECT / "inventory" / "lab"), str(PROJECT / name), *argv],
                          cwd=PROJECT, env=env, capture_output=True, text=True, check=False)


def backups(name: str, target: str = TARGET) -> list[str]:
    out = node(name, "ls", "-1", f"{target}/{name}", check=False).stdout.split()
    return sorted(n for n in out if n.startswith("system-") and n.endswith(".tar.zst"))


@pytest.mark.parametrize("name", list(NODES))
def test_each_node_has_a_backup_that_reads_back_and_matches_its_sha256(host, name):
    found = backups(name)
    assert len(found) == 1, found
    directory = f"{TARGET}/{name}"
    assert node(name, "sh", "-c", f"cd {directory} && sha256sum -c {found[0]}.sha256").returncode == 0
    meta = json.loads(node(name, "cat", f"{directory}/{found[0]}.json").stdout)
    listing = node(name, "sh", "-c", f"zstd -dc {directory}/{found[0]} | tar -t").stdout.splitlines()
    assert meta["members"] == len(listing) > 1000
    assert "./etc/ssh/sshd_config" in listing and "./usr/bin/python3" in listing
    # nothing of the kernel's file systems, the weights or the target
    for prefix in ("./proc/", "./sys/", "./run/", "./srv/twinrail/models/", f".{TARGET}/"):
        assert not any(m.startswith(prefix) for m in listing), prefix


@pytest.mark.parametrize("name", list(NODES))
def test_the_deployment_record_is_on_the_node_and_the_controller(host, name):
    record = json.loads(node(name, "cat", f"{RECORD_DIR}/current").stdout)
    assert record["host"] == name and record["kernel"] == os.uname().release
    assert record["distribution"]["id"] == "debian" and record["twinrail_commit"]
    assert set(record["nic_firmware"]) == {"ens1f0np0", "ens1f1np1"}
    copy = PROJECT / "reports" / "lab" / "deployments" / name / f"{record['digest']}.json"
    assert json.loads(copy.read_text()) == record


@pytest.mark.parametrize("name", list(NODES))
def test_the_cold_archive_timer_is_valid_and_its_archive_reads_back(host, name):
    assert node(name, "systemctl", "is-enabled", "twinrail-cold-archive.timer").stdout.strip() == "enabled"
    assert node(name, "systemd-analyze", "verify", "/etc/systemd/system/twinrail-cold-archive.timer",
                "/etc/systemd/system/twinrail-cold-archive.service").returncode == 0
    calendar = node(name, "systemd-analyze", "calendar", "*-*-01,15 03:00:00").stdout
    assert "Next elapse:" in calendar
    node(name, "systemctl", "start", "twinrail-cold-archive.service")
    cold = node(name, "sh", "-c", f"cd {TARGET}/{name}/cold && ls -1 cold-*.tar.zst && sha256sum -c *.sha256").stdout
    assert ": OK" in cold
    archive = cold.split()[0]
    listing = node(name, "sh", "-c", f"zstd -dc {TARGET}/{name}/cold/{archive} | tar -t").stdout
    assert "var/lib/twinrail/deployments/current" in listing and "etc/systemd/system/twinrail-cold-archive.timer" in listing


def test_a_damaged_file_is_restored_byte_for_byte(host):
    name = "lab-worker1"
    before = node(name, "sha256sum", "/etc/debian_version").stdout
    node(name, "sh", "-c", "printf 'damaged\\n' > /etc/debian_version")
    assert node(name, "sha256sum", "/etc/debian_version").stdout != before
    proc = playbook("restore.yml", "-e", f"system_backup_restore_nodes={name}", "-e", "system_backup_restore_rerun=false",
                    "-e", json.dumps({"system_backup_restore_paths": ["/etc/debian_version"]}))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert node(name, "sha256sum", "/etc/debian_version").stdout == before
    assert "restore: lab-worker1: /etc/debian_version from system-" in proc.stdout


@pytest.mark.parametrize("nodes", ["", "lab-worker9"])
def test_restore_needs_the_nodes_named(host, nodes):
    proc = playbook("restore.yml", "-e", f"system_backup_restore_nodes={nodes}", "-e", "system_backup_restore_rerun=false")
    assert proc.returncode != 0
    assert "system_backup_restore_nodes: expected the node(s) to restore, of lab-master, lab-worker1" in proc.stdout
    assert f"got '{nodes}'" in proc.stdout and "nothing was changed on any node" in proc.stdout


def test_a_settings_change_calls_for_a_new_backup_and_retention_keeps_two(host):
    name = "lab-worker1"
    first = backups(name)
    for mtu in (8000, 8001):
        proc = playbook("site.yml", "--tags", "backup", "--limit", name, "-e", f"twinrail_rail_mtu={mtu}")
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert "the kernel, network or runtime settings changed since" in proc.stdout
    now = backups(name)
    assert len(now) == 2 and first[0] not in now  # the lab keeps 2
    assert "removed " + first[0] in proc.stdout


@pytest.mark.parametrize("extra, message", [
    ({"system_backup_target": "/proc/twinrail"}, "lab-worker1: target /proc/twinrail/lab-worker1 is not writable"),
    ({"system_backup_retention": 0},
     "system_backup_retention: expected at least 1 (a retention of 0 would delete every backup), got 0"),
    ({"system_backup_backend": "rear", "system_backup_rear_url": "/srv/backups"},
     "system_backup_rear_url: expected nfs://, usb://, file://, cifs:// or sshfs:// with the rear backend, got "
     "'/srv/backups', system_backup_backend 'rear'"),
])
def test_bad_input_is_refused_and_nothing_is_deleted(host, extra, message):
    name = "lab-worker1"
    before = node(name, "ls", "-l", "--time-style=full-iso", f"{TARGET}/{name}").stdout
    proc = playbook("site.yml", "--tags", "backup", "--limit", name, "-e", json.dumps(extra))
    assert proc.returncode != 0
    assert message in proc.stdout, proc.stdout[-2000:]
    assert node(name, "ls", "-l", "--time-style=full-iso", f"{TARGET}/{name}").stdout == before


def test_not_enough_space_is_refused_before_anything_is_written(host):
    name = "lab-worker1"
    node(name, "mkdir", "-p", "/mnt/tiny")
    node(name, "mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", "/mnt/tiny")
    try:
        proc = playbook("site.yml", "--tags", "backup", "--limit", name,
                        "-e", json.dumps({"system_backup_target": "/mnt/tiny", "system_backup_cold_archive": False}))
        assert proc.returncode != 0
        assert "lab-worker1: not enough space in /mnt/tiny/lab-worker1: the backup needs up to" in proc.stdout
        assert "nothing was written or deleted" in proc.stdout
        assert node(name, "ls", "-A", "/mnt/tiny/lab-worker1").stdout.strip() == ""
    finally:
        node(name, "umount", "/mnt/tiny", check=False)


def test_the_rear_configuration_is_rendered_and_validated(host):
    name = "lab-worker1"
    proc = playbook("site.yml", "--tags", "backup", "--limit", name, "-e", json.dumps({
        "system_backup_backend": "rear", "system_backup_rear_url": "file:///var/backups/rear",
        "system_backup_rear_run": False}))
    assert proc.returncode == 0, proc.stdout[-3000:]
    conf = node(name, "cat", "/etc/rear/local.conf").stdout
    assert "BACKUP_URL=file:///var/backups/rear" in conf and "'/srv/twinrail/models/*'" in conf
    dump = node(name, "rear", "dump").stdout
    assert "BACKUP_URL" in dump and "file:///var/backups/rear" in dump
