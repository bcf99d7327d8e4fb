#!/usr/bin/env bash
# Install and start what twinrail's lab and tests need on the controller:
# Docker (docker.io), debootstrap, iproute2, OpenSSH client, util-linux
# (nsenter), rsync (the weights stage sends from the controller with it),
# chromium (the chat page's browser test). As root it installs them from the distribution and starts
# dockerd when it is not running; otherwise it says what is missing.
set -euo pipefail

need_pkgs=()
have() { command -v "$1" >/dev/null 2>&1; }
have docker || need_pkgs+=(docker.io)
have dockerd || need_pkgs+=(docker.io)
have debootstrap || need_pkgs+=(debootstrap)
have ip || need_pkgs+=(iproute2)
have ssh-keygen || need_pkgs+=(openssh-client)
have nsenter || need_pkgs+=(util-linux)
have make || need_pkgs+=(make)
have gcc || need_pkgs+=(gcc)
have file || need_pkgs+=(file)
have readelf || need_pkgs+=(binutils)
have rsync || need_pkgs+=(rsync)
have zstd || need_pkgs+=(zstd)
# the chat page's browser test (headless, driven by playwright from the venv)
have chromium || need_pkgs+=(chromium)
python3 -c 'import ensurepip, venv' 2>/dev/null || need_pkgs+=(python3-venv)

if ((${#need_pkgs[@]})); then
  mapfile -t need_pkgs < <(printf '%s\n' "${need_pkgs[@]}" | sort -u)
  if [[ $(id -u) -ne 0 ]]; then
    echo "prereqs: missing packages: ${need_pkgs[*]}" >&2
    echo "prereqs: run as root, or: sudo apt-get install -y ${need_pkgs[*]}" >&2
    exit 1
  fi
  echo "prereqs: installing ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${need_pkgs[@]}"
fi

if ! docker info >/dev/null 2>&1; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "prereqs: the Docker engine is not running; start it as root (dockerd)" >&2
    exit 1
  fi
  echo "prereqs: starting dockerd"
  if [[ -d /run/systemd/system ]]; then
    systemctl start docker
  else
    # no systemd on this machine (a container or a CI runner): run it ourselves
    nohup dockerd >/var/log/twinrail-dockerd.log 2>&1 &
  fi
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  docker info >/dev/null 2>&1 || {
    echo "prereqs: dockerd did not start; see /var/log/twinrail-dockerd.log" >&2
    exit 1
  }
fi
echo "prereqs: docker $(docker info --format '{{.ServerVersion}}'), $(debootstrap --version)"
