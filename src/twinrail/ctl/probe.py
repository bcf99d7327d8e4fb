"""What `twinrail status` reads on every node, in one SSH round trip per
node: the same small program (standard library only, run with the node's
python3, as root when the inventory says become) on every node of a
fabric.ThreadingGroup. It prints one JSON object: the service's units, the
links and addresses, the rail speeds, each RPC server's journal since it
started, the deployment record and, where they listen, the guard's status,
llama-server's metrics, the proxy's answer and Prometheus's (the tokens
generated over the last minute, the alerts firing) and, where nvidia-smi
is installed, its -q reading and the kernel's Xid lines since boot."""

from __future__ import annotations

import base64
import json
import shlex

from twinrail.guard.gpu import QUERY as GPU_QUERY

from .inventory import Cluster, Node

PROBE = r'''
import json, os, ssl, subprocess, sys, time, urllib.error, urllib.request
guard_port, llama_port, proxy_port, record_dir = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
prometheus_port, gpu_query = int(sys.argv[5]), sys.argv[6]

def run(*argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return ""

def get(url, limit=200000):
    ctx = ssl._create_unverified_context()  # the proxy's own loopback: only whether it answers
    try:
        with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
            return {"status": r.status, "body": r.read(limit).decode(errors="replace")}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": e.read(2000).decode(errors="replace")}
    except (OSError, ValueError) as e:
        return {"status": None, "error": str(e)}

out = {"hostname": os.uname().nodename, "time": time.time(), "units": {}, "journals": {}}
listed = run("systemctl", "list-units", "--all", "--plain", "--no-legend", "twinrail-*", "nginx.service",
             "prometheus*")
names = sorted({line.split()[0] for line in listed.splitlines() if line.strip()})
for name in names:
    show = run("systemctl", "show", "-p", "ActiveState,SubState,ActiveEnterTimestamp,NRestarts,InvocationID", name)
    out["units"][name] = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    if name.startswith("twinrail-rpc@") and out["units"][name].get("InvocationID"):
        invocation = out["units"][name]["InvocationID"]
        out["journals"][name] = run("journalctl", "--no-pager", "-o", "cat", "-n", "400",
                                    "_SYSTEMD_INVOCATION_ID=" + invocation, "+", "INVOCATION_ID=" + invocation)
out["links"] = json.loads(run("ip", "-j", "-d", "link", "show") or "[]")
out["addresses"] = json.loads(run("ip", "-j", "address", "show") or "[]")
out["speeds"] = {}
for link in out["links"]:
    try:
        with open("/sys/class/net/%s/speed" % link["ifname"]) as f:
            out["speeds"][link["ifname"]] = int(f.read().strip())
    except (OSError, ValueError):
        out["speeds"][link["ifname"]] = None
try:
    with open(os.path.join(record_dir, "current")) as f:
        out["record"] = json.load(f)
except (OSError, ValueError):
    out["record"] = None
out["guard"] = get("http://127.0.0.1:%d/twinrail/status" % guard_port)
out["llama_metrics"] = get("http://127.0.0.1:%d/metrics" % llama_port)
out["proxy"] = get("https://127.0.0.1:%d/health" % proxy_port, 2000)
if os.path.exists("/usr/bin/prometheus"):  # the monitoring stage's Prometheus, on its loopback
    api = "http://127.0.0.1:%d/monitoring/api/v1/" % prometheus_port
    out["prometheus"] = {"tokens": get(api + "query?query=" + urllib.request.quote(
                             "sum(rate(llamacpp:tokens_predicted_total[1m]))")),
                         "alerts": get(api + "alerts")}
smi = next((p for p in ("/usr/bin/nvidia-smi", "/usr/sbin/nvidia-smi") if os.path.exists(p)), None)
if smi:  # the GPUs' health (nvidia-smi -q) and the kernel's Xid lines about them since boot
    try:
        q = subprocess.run([smi, "-q"], capture_output=True, text=True, timeout=30, env=dict(os.environ, LC_ALL="C"))
        out["gpu"] = {"rc": q.returncode, "detail": q.stdout, "stderr": q.stderr[-2000:],
                      "loaded": os.path.exists("/proc/driver/nvidia/version")}
    except (OSError, subprocess.SubprocessError) as e:
        out["gpu"] = {"rc": None, "detail": "", "stderr": str(e), "loaded": False}
    # each GPU's figures, the telemetry's own query (twinrail.guard.gpu), and the node's memory (a GB10's)
    out["gpu"]["query"] = run(smi, "--query-gpu=" + gpu_query, "--format=csv")
    out["gpu"]["meminfo"] = run("cat", "/proc/meminfo")
    out["gpu"]["xid"] = "\n".join([line for line in run("journalctl", "-k", "-b", "--no-pager", "-o", "short-iso")
                                     .splitlines() if "NVRM: Xid" in line][-50:])
print(json.dumps(out))
'''


def command(cluster: Cluster, node: Node) -> str:
    """The shell command that runs the probe on a node."""
    payload = base64.b64encode(PROBE.encode()).decode()
    s = cluster.settings
    args = " ".join(shlex.quote(str(a)) for a in (s["inference_service_guard_port"], s["inference_service_listen_port"],
                                                   s["inference_service_proxy_port"], s["system_backup_record_dir"],
                                                   s["monitoring_prometheus_port"], ",".join(GPU_QUERY)))
    sudo = "sudo -n " if node.become else ""
    return f"echo {payload} | base64 -d | {sudo}python3 - {args}"


def connections(cluster: Cluster, nodes: list[Node], timeout: float = 10):
    """A Fabric connection per node, its host key checked against the
    inventory's known_hosts file (UserKnownHostsFile in
    ansible_ssh_common_args, else ~/.ssh/known_hosts), as Ansible's
    host_key_checking does: an unknown or changed key is refused."""
    from fabric import Connection  # pylint: disable=import-outside-toplevel
    from paramiko import RejectPolicy  # pylint: disable=import-outside-toplevel

    out = []
    for node in nodes:
        kwargs = {"key_filename": node.key_file} if node.key_file else {}
        conn = Connection(node.host, user=node.user, port=node.port, connect_timeout=timeout,
                          connect_kwargs={**kwargs, "look_for_keys": not node.key_file, "allow_agent": not node.key_file})
        conn.client.set_missing_host_key_policy(RejectPolicy())
        try:
            conn.client.load_host_keys(node.known_hosts)
        except FileNotFoundError:
            pass  # no key known: every connection is refused, and status says so
        out.append(conn)
    return out


def collect(cluster: Cluster, nodes: list[Node] | None = None, timeout: float = 10) -> dict:
    """Every node's probe, in parallel (fabric.ThreadingGroup): the parsed
    JSON, or {"unreachable": reason} for a node that could not be read."""
    from fabric import ThreadingGroup  # pylint: disable=import-outside-toplevel
    from fabric.exceptions import GroupException  # pylint: disable=import-outside-toplevel

    nodes = nodes or cluster.nodes
    conns = connections(cluster, nodes, timeout)
    by_conn = dict(zip(conns, nodes))
    results = {}
    # one group per way of running it (as root or not): the same command on every node of a group
    for become in sorted({n.become for n in nodes}):
        members = [c for c in conns if by_conn[c].become == become]
        group = ThreadingGroup.from_connections(members)
        try:
            results.update(group.run(command(cluster, by_conn[members[0]]), hide=True, warn=True, timeout=60))
        except GroupException as exc:
            results.update(exc.result)
    probes = {}
    for conn, result in results.items():
        node = by_conn[conn]
        if isinstance(result, Exception):
            probes[node.name] = {"unreachable": f"{type(result).__name__}: {result}".strip()}
        elif result.exited != 0:
            probes[node.name] = {"unreachable": f"the probe exited {result.exited}: {result.stderr.strip()[-300:]}"}
        else:
            try:
                probes[node.name] = json.loads(result.stdout)
            except ValueError:
                probes[node.name] = {"unreachable": f"the probe printed no JSON: {result.stdout[-200:]!r}"}
    for conn in conns:
        conn.close()
    return probes
