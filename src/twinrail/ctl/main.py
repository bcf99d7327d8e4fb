"""twinrail: the operator's command line.

  twinrail [-i INV] status [--json]         the cluster in one screen, a verdict and an exit code
  twinrail logs [NODE] [UNIT] [-f] [--since=S] [-n N] [--timings]  the service's journals across nodes, by time
  twinrail bench --key-file F [--streams N] [--duration S]  a short load through the proxy, its latency figures
  twinrail drill {kill-worker,stop-worker,cut-rail RAIL,memory-hog} --yes --key-file F   a fault drill, measured
  twinrail init SITE --profile P --node NAME=ADDRESS ... --user U   find the boxes, write inventory/SITE/ and its vault
  twinrail secrets -i inventory/SITE       the site's vault: an operator password and an API key

The global options (-i, --timeout, --vault-password-file, --ask-vault-pass)
are taken before or after the subcommand.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

from . import bench as bench_mod
from . import drill as drill_mod
from . import logs as logs_mod
from . import probe, site as site_mod, status as status_mod
from .inventory import InventoryError, site_name, vault_args
from .inventory import load as load_inventory
from .. import loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.engines.llamacpp import timings as llama_timings

# the project's lab (an absolute path: the command may run from anywhere)
DEFAULT_INVENTORY = os.environ.get("TWINRAIL_INVENTORY", str(status_mod.REPO / "inventory" / "lab"))


def site_files(args) -> Path:
    """The site's own files on the controller (~/.config/twinrail/<site>/:
    the vault password and API key `twinrail secrets` made)."""
    return site_mod.config_dir(site_name(args.inventory))


def load(args):
    """The inventory the command names, its vault opened as asked (or with
    the site's password file, when `twinrail secrets` made one)."""
    return load_inventory(args.inventory, vault_args(vault_password(args), args.ask_vault_pass))


def vault_password(args) -> str | None:
    """The vault's password file: the one named, else the site's when
    `twinrail secrets` made one (none when asked to prompt)."""
    password = args.vault_password_file
    if not password and not args.ask_vault_pass and (site_files(args) / "vault-pass").exists():
        password = str(site_files(args) / "vault-pass")
    return password


def reports_dir(args, cluster) -> Path:
    """The site's reports on the controller: reports/<site>/, where the
    stages write them (<site>: the inventory's twinrail_site, else the
    name of its directory), so one site never shows another's."""
    if args.reports:
        return Path(args.reports)
    return status_mod.REPO / "reports" / (cluster.settings.get("twinrail_site") or site_name(args.inventory))


def cmd_status(args) -> int:
    cluster = load(args)
    probes = probe.collect(cluster, timeout=args.timeout)
    reports = status_mod.reports_of(reports_dir(args, cluster))
    result = status_mod.judge(cluster, probes, reports)
    print(json.dumps(result, indent=2) if args.json else status_mod.render(result))
    return status_mod.CODES[result["health"]]


def cmd_logs(args) -> int:
    cluster = load(args)
    node = args.node
    unit = args.unit
    # one argument that is a unit, not a node: every node's journal of that unit
    if node and unit is None and node not in [n.name for n in cluster.nodes] and node != "all":
        if node in logs_mod.ALIASES or node.startswith(("twinrail-", "nginx")):
            node, unit = None, node
    nodes = logs_mod.pick(cluster, node)
    units = logs_mod.unit_pattern(unit)
    conns = dict(zip([n.name for n in nodes], probe.connections(cluster, nodes, args.timeout)))
    if args.follow:
        def follow(name, conn, spec):
            class Out:
                buffer = ""

                def write(self, data):
                    self.buffer += data
                    *done, self.buffer = self.buffer.split("\n")
                    for entry in logs_mod.entries(name, "\n".join(done)):
                        print(logs_mod.line(entry), flush=True)

                def flush(self):
                    pass
            conn.run(logs_mod.command(spec, units, args.since, True, args.lines), out_stream=Out(), warn=True)

        threads = [threading.Thread(target=follow, args=(n.name, conns[n.name], n), daemon=True) for n in nodes]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                thread.join()
        except KeyboardInterrupt:
            return 130
        return 0
    per_node, failed = {}, []
    for spec in nodes:
        try:
            result = conns[spec.name].run(logs_mod.command(spec, units, args.since, False, args.lines), hide=True,
                                          warn=True, timeout=60)
            per_node[spec.name] = logs_mod.entries(spec.name, result.stdout)
        except Exception as exc:  # pylint: disable=broad-except  # an unreachable node is said, not a traceback
            failed.append(f"{spec.name}: unreachable: {type(exc).__name__}: {exc}")
    if args.timings:
        # llama.cpp's timing lines of what was read, a request a line, with their summary
        for name, found in per_node.items():
            requests = llama_timings.parse_timings("\n".join(e["message"] for e in found))
            for said in llama_timings.lines(requests) if requests else ["no timing lines in what was read"]:
                print(f"{name}: {said}")
    else:
        for entry in logs_mod.interleave(per_node):
            print(logs_mod.line(entry))
    for message in failed:
        print(f"twinrail logs: {message}", file=sys.stderr)
    return 1 if failed else 0


def cmd_bench(args) -> int:
    if args.collectives:
        return bench_collectives(args)
    if args.streams < 1 or args.duration <= 0 or args.tokens < 1:
        raise InventoryError(f"bench: expected --streams >= 1, --duration > 0 s and --tokens >= 1, got "
                             f"{args.streams}, {args.duration:g} and {args.tokens}")
    cluster = load(args)
    url = args.url or f"https://{cluster.master.host}:{cluster.settings['inference_service_proxy_port']}"
    result = bench_mod.run(url, api_key(args), args.model, args.streams, args.duration, args.tokens, verify=not args.insecure)
    print(json.dumps(result, indent=2) if args.json else bench_mod.render(result))
    return 1 if result["failures"] else 0


def bench_collectives(args) -> int:
    """The service stage's collectives gate again on the serving group
    (ansible-playbook, whose output shows), then its report."""
    cluster = load(args)
    report = reports_dir(args, cluster) / "collectives.json"
    before = report.stat().st_mtime if report.exists() else None
    argv = bench_mod.collectives_argv(str(Path(sys.executable).parent / "ansible-playbook"), status_mod.REPO,
                                      args.inventory, vault_args(vault_password(args), args.ask_vault_pass))
    rc = subprocess.run(argv, cwd=status_mod.REPO, check=False).returncode
    if not report.exists() or report.stat().st_mtime == before:
        print(f"twinrail bench --collectives: the run (exit {rc}) wrote no report {report}: the engine measures "
              "no collectives, or the run stopped before the service stage's gate", file=sys.stderr)
        return rc or 1
    result = json.loads(report.read_text())
    print(json.dumps(result, indent=2) if args.json else bench_mod.render_collectives(result))
    return 0 if rc == 0 and result.get("passed") else 1


def api_key(args) -> str:
    key_file = args.key_file or (str(site_files(args) / "api-key") if (site_files(args) / "api-key").exists() else None)
    key = os.environ.get("TWINRAIL_API_KEY") or (Path(key_file).read_text().strip() if key_file else "")
    if not key:
        raise InventoryError(f"{args.command}: an API key is needed: --key-file FILE or $TWINRAIL_API_KEY "
                             "(one of inference_service_api_keys)")
    return key


def cmd_drill(args) -> int:
    if args.kind == "cut-rail" and not args.rail:
        raise InventoryError("drill cut-rail: name the rail (twinrail drill cut-rail rail1)")
    if not args.yes:
        raise InventoryError(f"drill {args.kind}: it interrupts the service for every client; run it in a "
                             "maintenance window with --yes")
    cluster = load(args)
    before = status_mod.judge(cluster, probe.collect(cluster, timeout=args.timeout),
                              status_mod.reports_of(reports_dir(args, cluster)))
    errors = [c["message"] for c in before["checks"] if c["severity"] == "ERR"]
    if errors:
        raise InventoryError(f"drill {args.kind}: the cluster is not healthy to begin with ({before['health']}: "
                             + "; ".join(errors) + ")")
    master = next(n for n in before["nodes"] if n["role"] == "master")
    guard = {"memory": {master["name"]: master["memory"]}} if master.get("memory") else {}
    plan = drill_mod.plan(cluster, args.kind, args.rail, args.worker, guard)
    plan["kind"] = args.kind
    url = args.url or f"https://{cluster.master.host}:{cluster.settings['inference_service_proxy_port']}"
    client = drill_mod.Client(url, api_key(args), verify=not args.insecure)
    conn = probe.connections(cluster, [plan["node"]], args.timeout)[0]
    result = drill_mod.run(cluster, conn, client, plan, sla=args.sla)
    result["saved"] = str(drill_mod.save(result, reports_dir(args, cluster)))
    print(json.dumps(result, indent=2) if args.json else drill_mod.render(result) + f"\n  saved in {result['saved']}")
    return 1 if result["failures"] else 0


def global_options(parser, suppress: bool) -> None:
    """The options every subcommand shares. Given to the main parser with
    their defaults and to each subcommand with none (argparse.SUPPRESS),
    so `twinrail status -i SITE` and `twinrail -i SITE status` are one."""
    def default(value):
        return argparse.SUPPRESS if suppress else value
    parser.add_argument("-i", "--inventory", default=default(DEFAULT_INVENTORY),
                        help=f"the Ansible inventory (default {DEFAULT_INVENTORY}, or $TWINRAIL_INVENTORY)")
    parser.add_argument("--timeout", type=float, default=default(10), help="seconds to connect to a node")
    parser.add_argument("--vault-password-file", default=default(None), metavar="FILE",
                        help="the vault's password file, as ansible-playbook takes it "
                             "(or $ANSIBLE_VAULT_PASSWORD_FILE)")
    parser.add_argument("--ask-vault-pass", action="store_true", default=default(False),
                        help="ask for the vault's password")


def cmd_secrets(args) -> int:
    if args.inventory == DEFAULT_INVENTORY:
        raise InventoryError("secrets: name the site: twinrail secrets -i inventory/<site>")
    site_dir = Path(args.inventory)
    if not (site_dir / "hosts.yml").exists():
        raise InventoryError(f"secrets: {site_dir}: expected an inventory directory with hosts.yml")
    files = site_files(args)
    made = site_mod.write_secrets(site_dir, Path(args.vault_password_file or files / "vault-pass"),
                                  Path(args.key_file or files / "api-key"), force=args.force)
    print(render_secrets(made))
    return 0


def render_secrets(made: dict) -> str:
    return "\n".join([
        f"  vault      {made['vault']} (an operator password and API key '{made['api_key_name']}', encrypted)",
        f"  password   {made['password_file']} ({'made now, ' if made['password_made'] else ''}mode 0600: keep it "
        "safe, every run needs it)",
        f"  API key    {made['key_file']} (mode 0600: give it to the first client)"])


def cmd_init(args) -> int:
    nodes = []
    for item in args.node:
        name, _, address = item.partition("=")
        if not name or not address:
            raise InventoryError(f"init: --node {item!r}: expected NAME=ADDRESS (the first node is the master)")
        nodes.append((name, address))
    if len(nodes) < 2 or len(nodes) > 8:
        raise InventoryError(f"init: expected 2 to 8 --node NAME=ADDRESS, got {len(nodes)}")
    profile_file = status_mod.REPO / "profiles" / f"{args.profile}.yml"
    if not profile_file.exists():
        known = ", ".join(sorted(p.stem for p in (status_mod.REPO / "profiles").glob("*.yml")))
        raise InventoryError(f"init: --profile {args.profile!r}: expected one of {known}")
    site_dir = Path(args.root) / args.site
    if site_dir.exists() and any(site_dir.iterdir()) and not args.force:
        raise InventoryError(f"init: {site_dir} exists: nothing was changed (--force writes it again)")
    profile = site_mod.yaml.safe_load(profile_file.read_text())
    known_hosts = os.path.expanduser(args.known_hosts)
    found = {name: site_mod.discover(address, args.user, args.port, args.ssh_key, known_hosts, args.timeout)
             for name, address in nodes}
    decided = site_mod.plan(nodes, found, profile, args.rail_subnets.split(","))
    if decided["problems"]:
        raise InventoryError("init: nothing was written: " + "; ".join(decided["problems"]))
    connection = {"user": args.user, "port": args.port, "key_file": args.ssh_key,
                  "known_hosts": args.known_hosts if args.known_hosts != "~/.ssh/known_hosts" else None}
    site_dir.mkdir(parents=True, exist_ok=True)
    files = site_mod.config_dir(args.site)
    # the vault first: a refused password file leaves no half-written site
    made = site_mod.write_secrets(site_dir, Path(args.vault_password_file or files / "vault-pass"),
                                  files / "api-key", force=args.force)
    site_mod.write_site(site_dir, status_mod.REPO / "inventory" / "example", args.profile, nodes, decided, connection)
    lines = [f"twinrail init: site {args.site} in {site_dir} (profile {args.profile})"]
    for name, address in nodes:
        host = decided["hosts"][name]
        rails = "; ".join(f"{r['name']} {r['interface']} {r['address']}"
                          + (f" RDMA {r['rdma_device']}" if r["rdma_device"] else " (no RDMA device)")
                          for r in host["rails"])
        lines.append(f"  {name:<14} {address:<15} {host['machine']}, {host['memtotal_gib']} GiB, "
                     f"management {host['management']}; {rails}")
    lines.append(render_secrets(made))
    lines.append("Next: set the model and its weights in "
                 f"{site_dir / 'group_vars' / 'cluster' / 'main.yml'}, then")
    playbook = Path(sys.executable).parent / "ansible-playbook"
    lines.append(f"  cd {status_mod.REPO} && {playbook} site.yml -i {site_dir} --vault-password-file "
                 f"{made['password_file']}")
    print("\n".join(lines))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="twinrail", description="The operator's command line of a twinrail cluster.")
    global_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name, **kwargs):
        found = sub.add_parser(name, **kwargs)
        global_options(found, suppress=True)
        return found

    status = command("status", help="the cluster in one screen: HEALTH_OK, HEALTH_WARN or HEALTH_ERR")
    status.add_argument("--json", action="store_true", help="the status as JSON (schema: docs/cli.md)")
    status.add_argument("--reports", help="the site's reports on the controller (default reports/<site>/, "
                                          "<site> the inventory's directory)")
    status.set_defaults(func=cmd_status)
    logs = command("logs", help="the service's journals across nodes, by time")
    logs.add_argument("node", nargs="?", help="a node of the inventory (default every node)")
    logs.add_argument("unit", nargs="?", help=f"one of {', '.join(sorted(logs_mod.ALIASES))} or a unit name")
    logs.add_argument("-f", "--follow", action="store_true", help="follow the journals as they grow")
    logs.add_argument("--since", help="journalctl --since (e.g. '-10min', '2026-12-01 10:00')")
    logs.add_argument("-n", "--lines", type=int, default=50, help="lines per node without --since (default 50)")
    logs.add_argument("--timings", action="store_true",
                      help="llama.cpp's timing lines of what was read: prefill and decode per request, cached "
                           "prompt tokens and single-token rates left out")
    logs.set_defaults(func=cmd_logs)
    bench = command("bench", help="a short load through the proxy: latency and tokens/s, 1 then N streams")
    bench.add_argument("--url", help="the proxy (default https://<the master's address>:<its proxy port>)")
    bench.add_argument("--key-file", help="a file holding an API key (or $TWINRAIL_API_KEY)")
    bench.add_argument("--model", help="the model name (default the first /v1/models lists)")
    bench.add_argument("--streams", type=int, default=4, help="concurrent streams of the second level (default 4)")
    bench.add_argument("--duration", type=float, default=20, help="seconds per level (default 20)")
    bench.add_argument("--tokens", type=int, default=32, help="tokens per request (default 32)")
    bench.add_argument("--insecure", action="store_true", help="do not check the proxy's certificate (self-signed)")
    bench.add_argument("--json", action="store_true", help="the figures as JSON, every request included")
    bench.add_argument("--collectives", action="store_true",
                       help="instead: the service stage's collectives gate again on the serving group (NCCL on GPUs, "
                            "gloo on CPUs), its figures against the rails'")
    bench.add_argument("--reports", help="with --collectives: the site's reports (default reports/<site>/)")
    bench.set_defaults(func=cmd_bench)
    drill = command("drill", help="a fault drill of the acceptance table on the cluster, measured (--yes)")
    drill.add_argument("kind", choices=drill_mod.KINDS)
    drill.add_argument("rail", nargs="?", help="cut-rail: the master's rail to set down (rail0, rail1, ...)")
    drill.add_argument("--worker", help="kill-worker, stop-worker: the worker (default the first)")
    drill.add_argument("--yes", action="store_true", help="it interrupts the service: say so")
    drill.add_argument("--key-file", help="a file holding an API key (or $TWINRAIL_API_KEY)")
    drill.add_argument("--url", help="the proxy (default https://<the master's address>:<its proxy port>)")
    drill.add_argument("--insecure", action="store_true", help="do not check the proxy's certificate (self-signed)")
    drill.add_argument("--sla", type=float, default=10.0, help="seconds within which clients must get their 503 (10)")
    drill.add_argument("--reports", help="where the result is saved (default the site's reports/<site>/, beside "
                                         "its acceptance reports)")
    drill.add_argument("--json", action="store_true", help="the result as JSON")
    drill.set_defaults(func=cmd_drill)
    init = command("init", help="find what two to eight boxes are and write inventory/SITE/ with its vault")
    init.add_argument("site", help="the site's name: inventory/SITE/ is written")
    init.add_argument("--profile", required=True, help="the hardware profile the boxes must be (profiles/<name>.yml)")
    init.add_argument("--node", action="append", default=[], metavar="NAME=ADDRESS",
                      help="a box's name and management address; the first is the master (2 to 8)")
    init.add_argument("--user", required=True, help="the SSH user on every box (sudo without a password)")
    init.add_argument("--port", type=int, default=22, help="SSH port (22)")
    init.add_argument("--ssh-key", help="the SSH private key (default the agent's or ~/.ssh's)")
    init.add_argument("--known-hosts", default="~/.ssh/known_hosts",
                      help="the known_hosts file holding the boxes' keys (an unknown key is refused)")
    init.add_argument("--rail-subnets", default="192.168.100.0/24,192.168.101.0/24",
                      help="one subnet per rail for ports that have no address yet (comma-separated)")
    init.add_argument("--root", default=str(status_mod.REPO / "inventory"), help="where inventories live")
    init.add_argument("--force", action="store_true", help="write over an existing site and its secrets")
    init.set_defaults(func=cmd_init)
    secrets = command("secrets", help="the site's vault: a generated operator password and API key")
    secrets.add_argument("--key-file", help="where the API key is written (default ~/.config/twinrail/SITE/api-key)")
    secrets.add_argument("--force", action="store_true", help="replace the vault's secrets")
    secrets.set_defaults(func=cmd_secrets)
    args = parser.parse_args(argv)
    # paramiko logs a failed handshake with its traceback; twinrail says it once, per node
    logging.getLogger("paramiko").setLevel(logging.CRITICAL)
    try:
        return args.func(args)
    except InventoryError as exc:
        print(f"twinrail: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
