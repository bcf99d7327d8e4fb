#!/bin/sh
# Runs inside the debootstrapped root (chroot) and turns it into a lab node:
# a minimal Debian 12 server with systemd as PID 1 and sshd, reachable by an
# unprivileged operator account with sudo, as a freshly installed box is.
# The image tag is a hash of this file and packages.txt: edit either and
# `tools/lab.py up` rebuilds the image.
set -eu

# The operator account Ansible logs in as; sudo without a password, like the
# cloud-init default user of a new machine.
useradd --create-home --shell /bin/bash --groups sudo twinrail
printf 'twinrail ALL=(ALL) NOPASSWD: ALL\n' > /etc/sudoers.d/twinrail
chmod 0440 /etc/sudoers.d/twinrail
visudo -cf /etc/sudoers.d/twinrail

# Authorized keys come from a read-only bind mount the lab makes
# (/etc/ssh/authorized_keys/<user>); no password logins, no root logins.
mkdir -p /etc/ssh/authorized_keys /etc/ssh/sshd_config.d
cat > /etc/ssh/sshd_config.d/twinrail-lab.conf <<'CONF'
AuthorizedKeysFile /etc/ssh/authorized_keys/%u .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
UseDNS no
CONF

# Host keys are made at first boot, so that every node has its own; the lab
# reads them back into a known_hosts file (strict host key checking stays on).
rm -f /etc/ssh/ssh_host_*
mkdir -p /etc/systemd/system/ssh.service.d
cat > /etc/systemd/system/ssh.service.d/twinrail-lab-hostkeys.conf <<'CONF'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
CONF
systemctl enable ssh.service

# A container has no consoles, no hardware clock and no udev to wait for.
systemctl mask getty.target console-getty.service systemd-udevd.service \
  systemd-udev-trigger.service systemd-udevd-control.socket \
  systemd-udevd-kernel.socket systemd-timesyncd.service \
  systemd-hwdb-update.service sys-kernel-config.mount \
  systemd-modules-load.service systemd-remount-fs.service \
  apt-daily.timer apt-daily-upgrade.timer 2>/dev/null || true
# Nor may a container mount rpc_pipefs (NFSv4's pipes), which nfs-common's
# generator mounts at every boot once a stage or a test installs it (ReaR
# depends on it): masked before it exists, so a node that reboots boots
# clean ("running", not "degraded") as a real host does.
ln -sf /dev/null /etc/systemd/system/run-rpc_pipefs.mount

# The management interface (eth0) is Docker's, not systemd-networkd's (on a
# real node networkd, netplan or NetworkManager brings it up), and the rails
# are not required for online (RequiredForOnline=no, the rdma stage): once
# that stage enables networkd, systemd-networkd-wait-online can never see a
# link online here, and the first unit that wants network-online.target
# (nginx, in the service stage) would sit out its timeout and leave the
# node degraded. The lab has no online to wait for: masked.
systemctl mask systemd-networkd-wait-online.service

# The lab's apt sources are Debian's archive, as on the controller.
cat > /etc/apt/sources.list <<'CONF'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
CONF

: > /etc/machine-id
# The package lists stay, as on a freshly installed system.
apt-get clean
