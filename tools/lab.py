#!/usr/bin/env python3
"""twinrail lab: bare boxes and a dual-rail cable, simulated on one Linux host.

Nodes are Docker containers running systemd and sshd, made from a Debian 12
image that this tool builds with debootstrap and ``docker import`` (no
registry is pulled). Each rail of the inventory is a cable: with one worker, a
veth pair with one end in the master's network namespace and the other in the
worker's (point-to-point, no bridge, no address: the ``rdma`` stage configures
them); with more workers a direct cable cannot join them all, so each rail gets
a switch: a network namespace of the lab's own holding a bridge, with one veth
per node plugged into it.

The lab reads everything from the inventory (``ansible-inventory --list``):
hosts, groups, management addresses, rails. There is one way to make lab
nodes: ``make lab`` and the molecule scenarios both call this tool.

A node powers on in two steps, as a machine does: its container starts
(the hardware: network namespace, cables laid by this tool), then its
systemd boots, only once every cable is in place. ``reboot NODE`` is a power
cut (SIGKILL to the whole container) and a power-on with the cables kept;
``reboot --all`` cuts the whole cluster and lets the nodes boot in a random
order.

Commands: up, down, status, image, cut RAIL, mend RAIL, pause NODE,
resume NODE, kill NODE PROCESS, reboot NODE|--all. ``up`` is idempotent;
``down`` leaves no container, veth, namespace or network behind.

This file brings the lab up and runs its commands; what it is made of
lives beside it: the topology read from the inventory and its names
(lab_topology.py), the node image (lab_image.py), the cables
(lab_cables.py), the lab's keys and password (lab_secrets.py), and the
quick start an operator follows (lab_quickstart.py).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

from lab_cables import check_cables, ensure_rails, link_info, ns_argv, set_rail
from lab_image import IMAGE_DIR, NODE_PYTHON_DIR, NODE_PYTHON_FILES, build_image, require_docker
from lab_secrets import LAB_API_KEYS, api_keys, service_password, ssh_key, write_known_hosts
from lab_topology import (LABEL, POWER_GOOD, REPO, STATE_DIR, SWITCH_NS_PREFIX, LabError, Node, Topology,
                          container_name, container_pid, container_state, load_topology, log, network_name, out,
                          powered_on, run, switch_netns, switch_port)

DEFAULT_INVENTORY = REPO / "inventory" / "lab"
# The runtime builder's ccache is kept on the controller, like the image and
# the model bundle, and bound into every node at the runtime stage's
# <runtime_build_root>/ccache: a lab made anew still configures, compiles
# (through the cache), links, checks and ships every build, but compiles
# again only what an earlier lab did not. The first lab on a machine
# compiles everything.
CCACHE_DIR = Path.home() / ".cache" / "twinrail" / "ccache"


def ccache_mount() -> str:
    """<runtime_build_root>/ccache, the root read where its default lives
    (this tool runs without the project's virtualenv: a line, not YAML)."""
    text = (REPO / "roles" / "runtime_build" / "defaults" / "main.yml").read_text()
    root = re.search(r"^runtime_build_root:\s*(\S+)\s*$", text, re.M)
    if not root:
        raise SystemExit("lab: runtime_build_root: expected a path in roles/runtime_build/defaults/main.yml")
    return f"{root.group(1).strip(chr(34))}/ccache"


OPERATOR = "twinrail"
# What systemd needs to run as PID 1 without --privileged (refused here),
# plus what later stages need: memlock for RDMA, interface configuration.
# SYS_RESOURCE is not in this workplace's bounding set (runc refuses it), so
# a lab node cannot raise a hard rlimit above the host's.
CAPABILITIES = ("NET_ADMIN", "SYS_ADMIN", "IPC_LOCK", "SYS_NICE")
BOOT_TIMEOUT_S = 90
ENTRYPOINT = ["/bin/sh", "-c",
              f"until [ -e {POWER_GOOD} ]; do sleep 0.1; done; exec /sbin/init"]


def cgroup_v2() -> bool:
    return out(["stat", "-fc", "%T", "/sys/fs/cgroup"]) == "cgroup2fs"


def ensure_network(topo: Topology) -> None:
    name = network_name(topo)
    if run(["docker", "network", "inspect", name], check=False).returncode == 0:
        return
    log(f"creating management network {name} ({topo.mgmt_subnet})")
    run(["docker", "network", "create", "--driver", "bridge",
         "--subnet", topo.mgmt_subnet, "--label", f"{LABEL}={topo.lab}", name])


def run_node(topo: Topology, node: Node, image: str) -> None:
    name = container_name(topo, node.name)
    argv = ["docker", "run", "--detach", "--name", name, "--hostname", node.name,
            "--entrypoint", ENTRYPOINT[0],
            "--label", f"{LABEL}={topo.lab}", "--label", f"{LABEL}.node={node.name}",
            "--network", network_name(topo), "--ip", node.address,
            "--stop-signal", "SIGRTMIN+3",
            "--tmpfs", "/run", "--tmpfs", "/run/lock",
            "--volume", f"{STATE_DIR / 'ssh' / 'authorized_keys'}:"
                        f"/etc/ssh/authorized_keys/{OPERATOR}:ro",
            "--volume", f"{CCACHE_DIR}:{ccache_mount()}"]
    for name in NODE_PYTHON_FILES:
        argv += ["--volume", f"{IMAGE_DIR / 'python' / name}:{NODE_PYTHON_DIR}/{name}:ro"]
    CCACHE_DIR.mkdir(parents=True, exist_ok=True)
    for cap in CAPABILITIES:
        argv += ["--cap-add", cap]
    if cgroup_v2():
        argv += ["--cgroupns", "private", "--volume", "/sys/fs/cgroup:/sys/fs/cgroup:rw"]
    else:
        argv += ["--volume", "/sys/fs/cgroup:/sys/fs/cgroup:ro"]
    for spec in node.publish:
        argv += ["--publish", spec]
    if node.memory_mb:
        # a node of its own size: the service's memory watermarks are shares of it
        argv += ["--memory", f"{node.memory_mb}m", "--memory-swap", f"{node.memory_mb}m"]
    if node.shm_mb:
        # a host's /dev/shm is half its memory; vLLM's ranks share their queues there
        argv += ["--shm-size", f"{node.shm_mb}m"]
    argv += [image, *ENTRYPOINT[1:]]
    run(argv)


def ensure_nodes(topo: Topology, image: str) -> None:
    for node in topo.nodes:
        name = container_name(topo, node.name)
        state = container_state(name)
        if state is not None:
            ip = state["NetworkSettings"]["Networks"].get(network_name(topo), {}).get(
                "IPAMConfig") or {}
            same = (state["Config"]["Image"] == image
                    and ip.get("IPv4Address") == node.address
                    and sorted(c.removeprefix("CAP_")
                               for c in state["HostConfig"].get("CapAdd") or [])
                    == sorted(CAPABILITIES)
                    and state["HostConfig"].get("Memory", 0) == node.memory_mb * 2**20
                    and (not node.shm_mb or state["HostConfig"].get("ShmSize", 0) == node.shm_mb * 2**20)
                    and (state["Config"].get("Entrypoint") or [])[:1] + (state["Config"].get("Cmd") or [])
                    == ENTRYPOINT)
            if not same:
                log(f"{node.name}: recreating (image, address, capabilities, memory, /dev/shm or boot changed)")
                run(["docker", "rm", "--force", name])
                state = None
            elif state["State"]["Paused"]:
                run(["docker", "unpause", name])
            elif not state["State"]["Running"]:
                log(f"{node.name}: starting stopped container")
                run(["docker", "start", name])
        if state is None:
            log(f"{node.name}: starting container {name} ({node.address})")
            run_node(topo, node, image)


def power_on(topo: Topology, node: Node) -> None:
    """Let a started node boot: its hardware is in place."""
    ensure_net_sysctls_writable(topo, node)
    if not powered_on(topo, node.name):
        run(["docker", "exec", container_name(topo, node.name), "touch", POWER_GOOD])
        log(f"{node.name}: powered on, booting")


def cmd_reboot(topo: Topology, names: list[str], seed: int | None = None,
               late_cables: float = 0) -> None:
    """A power cut of these nodes and a power-on with their cables kept: the
    nodes' systemd boots in a random order when there are several. With
    late_cables, the nodes boot first and their links appear that many
    seconds later (a link or its address that comes late at boot)."""
    rng = random.Random(seed)
    order = list(names)
    rng.shuffle(order)
    for name in names:  # the cut: every process at once, no shutdown
        run(["docker", "kill", "--signal", "KILL", container_name(topo, name)])
        run(["docker", "wait", container_name(topo, name)])
    log(f"power cut: {', '.join(names)}")
    for name in order:
        run(["docker", "start", container_name(topo, name)])
    if not late_cables:
        ensure_rails(topo)
        check_cables(topo, names)
    for name in order:
        power_on(topo, topo.node(name))
        if len(order) > 1:
            time.sleep(rng.uniform(0, 2))
    log(f"boot order: {', '.join(order)}")
    if late_cables:
        time.sleep(late_cables)
        ensure_rails(topo)
        check_cables(topo, names)
        log(f"cables laid {late_cables:g} s after the power-on")


def wait_booted(topo: Topology, node: Node) -> None:
    name = container_name(topo, node.name)
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    state = ""
    while time.monotonic() < deadline:
        state = run(["docker", "exec", name, "systemctl", "is-system-running"],
                    check=False).stdout.decode().strip()
        ssh = run(["docker", "exec", name, "systemctl", "is-active", "ssh"],
                  check=False).stdout.decode().strip()
        if state in ("running", "degraded") and ssh == "active":
            if state == "degraded":
                failed = out(["docker", "exec", name, "systemctl", "--failed",
                              "--no-legend", "--plain"])
                log(f"{node.name}: systemd degraded: {failed}")
            return
        time.sleep(1)
    raise LabError(f"{node.name}: systemd did not reach 'running' with sshd active within "
                   f"{BOOT_TIMEOUT_S} s (last state: {state or 'unknown'}); "
                   f"see `docker exec {name} journalctl -b`")


WEBHOOK_PORT = 9099
WEBHOOK_LOG = "/var/lib/twinrail-lab/alerts.jsonl"
WEBHOOK_UNIT = f"""[Unit]
Description=twinrail lab: the alert receiver (webhook on loopback, {WEBHOOK_LOG})
After=network.target

[Service]
ExecStart=/usr/bin/python3 /usr/local/lib/twinrail-lab/lab_webhook.py 127.0.0.1 {WEBHOOK_PORT} {WEBHOOK_LOG}
StateDirectory=twinrail-lab
Restart=always

[Install]
WantedBy=multi-user.target
"""


def install_webhook(topo: Topology) -> None:
    """The lab's alert receiver on the master (the webhook a site points
    Alertmanager at): tools/lab_webhook.py as a unit, on loopback."""
    master = next(n for n in topo.nodes if n.role == "master")
    name = container_name(topo, master.name)
    run(["docker", "exec", name, "mkdir", "-p", "/usr/local/lib/twinrail-lab"])
    run(["docker", "cp", str(REPO / "tools" / "lab_webhook.py"), f"{name}:/usr/local/lib/twinrail-lab/lab_webhook.py"])
    run(["docker", "exec", "-i", name, "tee", "/etc/systemd/system/twinrail-lab-webhook.service"],
        input_bytes=WEBHOOK_UNIT.encode())
    run(["docker", "exec", name, "systemctl", "daemon-reload"])
    run(["docker", "exec", name, "systemctl", "enable", "--now", "twinrail-lab-webhook.service"])
    run(["docker", "exec", name, "systemctl", "restart", "twinrail-lab-webhook.service"])


def ensure_net_sysctls_writable(topo: Topology, node: Node) -> None:
    """Let a node write its own network namespace's sysctls, and nothing else.

    Docker mounts /proc/sys read-only. /proc/sys/net resolves to the netns
    of the process that opens it, so a read-write bind of /proc/sys/net
    inside the node's mount namespace lets the kernel stage set the node's
    own net.* values, while vm.* and kernel.* (the host's) stay read-only.
    Redone after every container start (mounts do not survive a restart).
    """
    pid = container_pid(topo, node.name)
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/proc/sys/net" and fields[5].split(",")[0] == "rw":
            return
    run(["nsenter", "--target", str(pid), "--mount", "--",
         "mount", "--bind", "/proc/sys/net", "/proc/sys/net"])
    run(["nsenter", "--target", str(pid), "--mount", "--",
         "mount", "-o", "remount,bind,rw", "/proc/sys/net"])


# --------------------------------------------------------------------------
# commands


def remove_strays(topo: Topology) -> None:
    """What an earlier, larger inventory of this lab left: nodes it no longer
    has, switches of rails that are now a direct cable."""
    names = out(["docker", "ps", "--all", "--format", "{{.Names}}",
                 "--filter", f"label={LABEL}={topo.lab}"]).split()
    wanted = {container_name(topo, n.name) for n in topo.nodes}
    for name in sorted(set(names) - wanted):
        log(f"removing {name}: not in this inventory")
        run(["docker", "rm", "--force", "--volumes", name])
    namespaces = [line.split()[0] for line in out(["ip", "netns", "list"]).splitlines() if line.strip()]
    for rail in topo.rails:
        if rail.direct and switch_netns(topo, rail.name) in namespaces:
            log(f"{rail.name}: a direct cable now, removing its switch")
            run(["ip", "netns", "delete", switch_netns(topo, rail.name)])


def cmd_up(topo: Topology) -> None:
    require_docker()
    image = build_image()
    ssh_key()
    service_password()
    api_keys()
    ensure_network(topo)
    remove_strays(topo)
    ensure_nodes(topo, image)
    ensure_rails(topo)
    check_cables(topo)
    for node in topo.nodes:
        power_on(topo, node)
    for node in topo.nodes:
        wait_booted(topo, node)
    install_webhook(topo)
    write_known_hosts(topo)
    cmd_status(topo)


def cmd_down(topo: Topology | None, everything: bool) -> None:
    require_docker()
    filt = f"label={LABEL}" if everything or topo is None else f"label={LABEL}={topo.lab}"
    ids = out(["docker", "ps", "--all", "--quiet", "--filter", filt]).split()
    if ids:
        log(f"removing {len(ids)} container(s)")
        run(["docker", "rm", "--force", "--volumes"] + ids)
    nets = out(["docker", "network", "ls", "--quiet", "--filter", filt]).split()
    if nets:
        run(["docker", "network", "rm"] + nets)
    prefix = SWITCH_NS_PREFIX if everything or topo is None else switch_netns(topo, "")
    for line in out(["ip", "netns", "list"]).splitlines():
        ns = line.split()[0] if line.strip() else ""
        if ns.startswith(prefix):
            run(["ip", "netns", "delete", ns])
    known = STATE_DIR / "known_hosts"
    if known.exists():
        known.unlink()
    log("down: no lab container, network or rail namespace left")


def cmd_service(topo: Topology) -> int:
    """Where the service is, from the controller: the master's published
    port, the operator account, the password file (never the password)."""
    master = next(n for n in topo.nodes if n.role == "master")
    https = [spec for spec in master.publish if spec.endswith(":443")]
    if not https:
        print(f"lab: {master.name} publishes no port 443 (twinrail_lab_publish): the service is reachable "
              f"from the nodes only", file=sys.stderr)
        return 1
    host, port, _ = https[0].rsplit(":", 2)
    url = f"https://{host}:{port}"
    password = STATE_DIR / "service-password"
    user = topo.service_user or "operator"
    print(f"The service: {url}/ (the chat page; OpenAI API at {url}/v1)")
    print(f"  account {user}, password in {password} (made by tools/lab.py; the certificate is self-signed)")
    print(f"  curl -sk -u {user}:\"$(cat {password})\" {url}/v1/models")
    key = STATE_DIR / "api-keys" / LAB_API_KEYS[0]
    print(f"OpenAI clients: base URL {url}/v1, API key in {key}, e.g.")
    print(f"  curl -sk -H \"Authorization: Bearer $(cat {key})\" {url}/v1/models")
    return 0


def cmd_status(topo: Topology, as_json: bool = False) -> int:
    report: dict = {"lab": topo.lab, "nodes": [], "rails": []}
    healthy = True
    for node in topo.nodes:
        state = container_state(container_name(topo, node.name))
        if state is None:
            entry = {"node": node.name, "state": "absent"}
        else:
            st = state["State"]
            status = "paused" if st["Paused"] else st["Status"]
            entry = {"node": node.name, "role": node.role, "state": status,
                     "address": node.address, "image": state["Config"]["Image"]}
            if status == "running":
                entry["systemd"] = run(
                    ["docker", "exec", container_name(topo, node.name), "systemctl",
                     "is-system-running"], check=False).stdout.decode().strip()
        healthy &= entry["state"] == "running"
        report["nodes"].append(entry)
    for rail in topo.rails:
        ends = []
        for node, ifname in rail.ends:
            try:
                info = link_info(ns_argv(container_pid(topo, node)), ifname)
            except LabError:
                info = None
            ends.append({"node": node, "interface": ifname,
                         "state": info["operstate"] if info else "absent",
                         "mtu": info["mtu"] if info else None})
            healthy &= info is not None
        entry = {"rail": rail.name, "kind": "direct cable" if rail.direct else "switch", "ends": ends,
                 "mtu": rail.mtu}
        if not rail.direct:
            sw = ns_argv(None, switch_netns(topo, rail.name))
            bridge = link_info(sw, "br0") if switch_netns(topo, rail.name) in out(["ip", "netns", "list"]) else None
            ports = [link_info(sw, switch_port(node)) for node, _ in rail.ends] if bridge else []
            entry["switch_mtu"] = sorted({x["mtu"] for x in [bridge, *ports] if x}) if bridge else None
            healthy &= entry["switch_mtu"] == [rail.mtu]
        report["rails"].append(entry)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        for n in report["nodes"]:
            extra = f" {n.get('address', '')} systemd={n.get('systemd', '-')}" \
                if n["state"] != "absent" else ""
            print(f"node {n['node']:<10} {n['state']:<8}{extra}")
        for r in report["rails"]:
            ends = "  <->  ".join(f"{e['node']}:{e['interface']} ({e['state']}, mtu {e['mtu']})"
                                  for e in r["ends"])
            switch = f" (switch mtu {'/'.join(map(str, r['switch_mtu'] or ['absent']))})" if "switch_mtu" in r else ""
            print(f"rail {r['rail']:<10} {r['kind']}{switch}: {ends}")
    return 0 if healthy else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-i", "--inventory", type=Path, default=DEFAULT_INVENTORY,
                        help="the lab inventory (default: inventory/lab)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", help="build the image if needed, start nodes, lay cables")
    down = sub.add_parser("down", help="remove nodes, cables and the network")
    down.add_argument("--all", action="store_true",
                      help="remove every twinrail lab on this host, whatever its inventory")
    st = sub.add_parser("status", help="show nodes and rails; exit 1 if anything is missing")
    st.add_argument("--json", action="store_true")
    sub.add_parser("image", help="build the node image only")
    sub.add_parser("service", help="where the lab serves: the chat page, the account, a curl that works")
    for verb, text in (("cut", "set a rail's link down"), ("mend", "set it up again")):
        p = sub.add_parser(verb, help=text)
        p.add_argument("rail")
        p.add_argument("--node", help="which end (default: the master's)")
    for verb in ("pause", "resume"):
        sub.add_parser(verb, help=f"{verb} a node's container").add_argument("node")
    reboot = sub.add_parser("reboot", help="a power cut and power-on of a node (cables kept), "
                                           "or of every node (--all, random boot order)")
    reboot.add_argument("node", nargs="?")
    reboot.add_argument("--all", action="store_true", help="every node of the lab at once")
    reboot.add_argument("--seed", type=int, help="the boot order's random seed (printed order either way)")
    reboot.add_argument("--wait", action="store_true", help="return once every node's systemd has booted")
    reboot.add_argument("--late-cables", type=float, default=0, metavar="SECONDS",
                        help="boot first, lay the cables this many seconds later (links that come late)")
    kill = sub.add_parser("kill", help="SIGKILL a process (by name) on a node")
    kill.add_argument("node")
    kill.add_argument("process")
    args = parser.parse_args(argv)

    try:
        if args.command == "image":
            require_docker()
            print(build_image())
            return 0
        if args.command == "down" and args.all:
            cmd_down(None, everything=True)
            return 0
        topo = load_topology(args.inventory)
        if args.command == "up":
            cmd_up(topo)
        elif args.command == "down":
            cmd_down(topo, everything=False)
        elif args.command == "service":
            return cmd_service(topo)
        elif args.command == "status":
            require_docker()
            return cmd_status(topo, as_json=args.json)
        elif args.command in ("cut", "mend"):
            set_rail(topo, args.rail, args.node, up=args.command == "mend")
        elif args.command in ("pause", "resume"):
            topo.node(args.node)
            run(["docker", "pause" if args.command == "pause" else "unpause",
                 container_name(topo, args.node)])
            log(f"{args.node}: {args.command}d")
        elif args.command == "reboot":
            if bool(args.node) == args.all:
                raise LabError("reboot: name one node, or --all")
            names = [n.name for n in topo.nodes] if args.all else [topo.node(args.node).name]
            require_docker()
            cmd_reboot(topo, names, args.seed, args.late_cables)
            if args.wait:
                for name in names:
                    wait_booted(topo, topo.node(name))
        elif args.command == "kill":
            topo.node(args.node)
            proc = run(["docker", "exec", container_name(topo, args.node), "pkill",
                        "--signal", "KILL", "--exact", args.process], check=False)
            if proc.returncode == 1:
                raise LabError(f"{args.node}: no process named '{args.process}'")
            if proc.returncode != 0:
                raise LabError(f"{args.node}: pkill failed: {proc.stderr.decode().strip()}")
            log(f"{args.node}: killed {args.process}")
        return 0
    except LabError as exc:
        print(f"lab: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
