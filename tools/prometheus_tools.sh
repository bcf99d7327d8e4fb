#!/usr/bin/env bash
# promtool and amtool on the controller, for the unit tests (rules' own
# tests, `promtool check metrics` of the guard's exposition) and lint: the
# binaries of the same Debian packages the monitoring stage installs on the
# nodes (prometheus, prometheus-alertmanager), taken out of the .debs with
# dpkg-deb. Installing the packages here would start services on the
# controller; this places two programs in DEST and nothing else.
#   tools/prometheus_tools.sh DEST
set -euo pipefail
dest=${1:?usage: prometheus_tools.sh DEST}
cache="${XDG_CACHE_HOME:-$HOME/.cache}/twinrail/debs"
mkdir -p "$cache" "$dest"
dest=$(cd "$dest" && pwd)
cd "$cache"
fetch() {
  local pkg=$1
  ls "${pkg}"_*.deb >/dev/null 2>&1 && return 0
  apt-get download "$pkg" >/dev/null 2>&1 || {
    [[ $(id -u) -eq 0 ]] && apt-get update -q >/dev/null
    apt-get download "$pkg"
  }
}
fetch prometheus
fetch prometheus-alertmanager
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for deb in prometheus_*.deb prometheus-alertmanager_*.deb; do
  dpkg-deb -x "$deb" "$work"
done
install -m 0755 "$work/usr/bin/promtool" "$work/usr/bin/amtool" "$dest/"
"$dest/promtool" --version 2>&1 | head -1
