"""Power cuts on the converged, serving lab, with no Ansible run in between:
a worker, the master, then the whole cluster at once with the nodes booting
in a random order (tools/lab.py reboot: SIGKILL to the whole container, then
a power-on with the cables kept). Each time the time from the cut to a chat
answered through the proxy is measured and bounded, and what the stages set
up (firewall, rails' addresses, routes and rules, namespaced sysctls, the
service's units) is what it was before the cut; systemd boots clean."""

from __future__ import annotations

import json
import time

import pytest
from lab_client import MASTER, WORKER, default, lab, node, record, wait_available

testinfra_hosts = ["ansible://master"]

NODES = {"lab-master": MASTER, "lab-worker1": WORKER}
# What each drill does: the worker's links come 10 s after its power-on (a
# rail address that is late at boot: its RPC servers must wait for it, not
# exit for good); the master and the whole cluster keep their cables.
DRILLS = {"lab-worker1": ["lab-worker1", "--late-cables", "10"], "lab-master": ["lab-master"],
          "--all": ["--all"]}
# Measured on the lab (docs/benchmarks.md): 7-22 s. exo allows 30 s of node
# timeout; the bounds leave room for a loaded CI machine, the whole
# cluster within a minute.
BOUND_S = {"lab-worker1": 60, "lab-master": 45, "--all": 60}
UNITS = ("twinrail-firewall.service", "twinrail-roce.service", "nginx.service", "twinrail-llama.service",
         "twinrail-guard.service", "twinrail-agent.service", "ssh.service")


def sh(container: str, *argv: str) -> str:
    return node(container, *argv).stdout


def rails(container: str) -> list[str]:
    return sorted(link["ifname"] for link in json.loads(sh(container, "ip", "-j", "link", "show"))
                  if link["ifname"].startswith("ens"))


def state(container: str) -> dict:
    """What the stages leave on a node, in a form that survives new links."""
    names = rails(container)
    links = {link["ifname"]: {"mtu": link["mtu"], "operstate": link["operstate"],
                              "addresses": sorted(f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"])}
             for link in json.loads(sh(container, "ip", "-j", "address", "show")) if link["ifname"] in names}
    rules = sorted((r.get("priority"), r.get("src"), r.get("table"))
                   for r in json.loads(sh(container, "ip", "-j", "rule", "show")))
    routes = sorted((r.get("table", "main"), r["dst"], r.get("dev"), r.get("prefsrc", ""), r.get("scope", ""))
                    for r in json.loads(sh(container, "ip", "-j", "route", "show", "table", "all"))
                    if r.get("dev") in names)
    keys = [line.split("=")[0].strip()
            for line in sh(container, "cat", default("kernel_tuning_sysctl_net_file")).splitlines()
            if "=" in line and not line.lstrip().startswith("#")]
    keys += [f"net.ipv4.conf.{name}.{key}" for name in names for key in ("arp_ignore", "arp_announce", "rp_filter")]
    sysctls = {key: " ".join(sh(container, "sysctl", "-n", key).split()) for key in sorted(keys)}
    units = list(UNITS) + sorted(line.split()[0] for line in sh(
        container, "systemctl", "list-units", "--all", "--plain", "--no-legend", "twinrail-rpc@*").splitlines())
    return {"links": links, "rules": rules, "routes": routes, "sysctls": sysctls,
            # -s: the rules without their counters (a boot starts them at 0)
            "firewall": sh(container, "nft", "-s", "list", "table", "inet", "twinrail"),
            "units": {unit: node(container, "systemctl", "is-active", unit, check=False).stdout.strip()
                      for unit in units}}


def booted_clean(container: str) -> None:
    deadline = time.monotonic() + 60
    while (status := node(container, "systemctl", "is-system-running", check=False).stdout.strip()) in (
            "starting", "initializing") and time.monotonic() < deadline:
        time.sleep(1)
    failed = node(container, "systemctl", "--failed", "--plain", "--no-legend", check=False).stdout.strip()
    assert status == "running", f"{container}: systemd is {status!r} after the boot; failed units: {failed!r}"


@pytest.fixture(scope="module")
def before():
    assert wait_available(180) >= 0
    states = {name: state(container) for name, container in NODES.items()}
    for name, seen in states.items():  # what must come back is there to begin with
        assert seen["firewall"].startswith("table inet twinrail"), (name, seen["firewall"])
        assert len(seen["links"]) == 2 and all(link["addresses"] for link in seen["links"].values()), (name, seen)
        assert seen["rules"] and seen["sysctls"], (name, seen)
    assert states["lab-master"]["units"]["twinrail-guard.service"] == "active"
    assert [u for u, a in states["lab-worker1"]["units"].items() if u.startswith("twinrail-rpc@") and a == "active"]
    return states


@pytest.mark.parametrize("target", ["lab-worker1", "lab-master", "--all"])
def test_power_cut_comes_back_by_itself(host, before, target):
    cut = time.monotonic()
    lab("reboot", *DRILLS[target])
    powered = time.monotonic() - cut
    back = wait_available(BOUND_S[target], since=cut, timeout=10)
    print(f"power cut of {target}: nodes powering on {powered:.1f} s after the cut, "
          f"chat answered through the proxy {back:.1f} s after the cut")
    record(f"power cut {target}", {"chat_answered_s": round(back, 2), "power_on_s": round(powered, 2)})
    for name, container in NODES.items():
        booted_clean(container)
        now = state(container)
        for part in before[name]:
            assert now[part] == before[name][part], f"{name}: {part} differs after the power cut of {target}"
