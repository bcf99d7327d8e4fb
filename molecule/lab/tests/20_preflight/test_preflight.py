"""Verify the lab after the preflight stage: real nodes, real cables.

Preflight changes nothing, so what is verified is what the stage stands on
(systemd and sshd run on every node); test_preflight_changes_nothing.py
checks that it changes nothing.
"""

from __future__ import annotations



def test_systemd_is_pid_1_and_running(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"
    state = host.run("systemctl is-system-running").stdout.strip()
    assert state == "running", host.run("systemctl --failed --no-legend").stdout


def test_sshd_is_running_and_enabled(host):
    ssh = host.service("ssh")
    assert ssh.is_running and ssh.is_enabled
