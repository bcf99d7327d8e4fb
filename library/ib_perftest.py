#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Run (or re-judge) one perftest or iperf3 measurement and gate on it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ib_perftest
short_description: Run one perftest (ib_*_bw / ib_*_lat) or iperf3 measurement and gate on it
description:
  - Runs one perftest program as server or client, or iperf3 for rails
    without an RDMA device, under a timeout on both sides (a perftest server
    waits forever for its client), so that no process is left behind.
  - Parses the output (average, never peak; MB/sec converted to Gb/s) and
    applies the gates given; returns the figures, the gated figures, C(passed)
    and C(failures), one sentence each.
  - With O(from_file) it parses a saved capture instead and applies the same
    gates, so archived baselines can be judged again.
  - A failed run (no device, wrong device, port down, no peer, QP creation
    failed, unparsable output) fails the task with perftest's own reason.
  - Measures only, so it never reports a change. In check mode nothing is run.
version_added: "0.1.0"
author: twinrail developers
options:
  test:
    description: The program.
    type: str
    required: true
    choices: [ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat, ib_read_lat, ib_send_lat, iperf3]
  mode:
    description: Server or client side.
    type: str
    choices: [server, client]
    default: client
  server:
    description: The server's address (client side).
    type: str
  device:
    description: RDMA device (perftest -d).
    type: str
  ib_port:
    description: Port of the RDMA device (perftest -i).
    type: int
    default: 1
  gid_index:
    description: GID index (perftest -x); RoCE v2 GID of the rail's address.
    type: int
  size:
    description: Message size in bytes (perftest -s).
    type: int
  all_sizes:
    description: All sizes 2 to 2^23 (perftest -a).
    type: bool
    default: false
  qps:
    description: Number of QPs (perftest -q) or parallel TCP streams (iperf3 -P).
    type: int
    default: 1
  duration:
    description: Seconds to run (perftest -D, iperf3 -t).
    type: int
  iterations:
    description: Iterations (perftest -n).
    type: int
  port:
    description: TCP port of the control connection (perftest -p, iperf3 -p).
    type: int
    default: 18515
  rdma_cm:
    description: Connect with rdma_cm (perftest -R).
    type: bool
    default: false
  bind_address:
    description: Source address (perftest --source_ip, iperf3 -B).
    type: str
  report_gbits:
    description: Ask perftest for Gb/s (--report_gbits).
    type: bool
    default: true
  bidirectional:
    description:
      - Measure both directions at once (perftest C(-b), on both sides; iperf3 C(--bidir), on the client).
        The figure is the two directions' sum.
    type: bool
    default: false
  timeout:
    description: Seconds after which the program is killed, on either side.
    type: int
    default: 120
  from_file:
    description: Parse this saved output instead of running anything.
    type: path
  min_bw_gbps:
    description: Required BW average in Gb/s (bandwidth tests).
    type: float
  max_typical_us:
    description: Largest typical (or, in duration mode, average) latency in microseconds.
    type: float
  max_p999_us:
    description: Largest p99.9 latency in microseconds.
    type: float
  label:
    description: What is measured (rail, hosts), put in front of every failure sentence.
    type: str
    default: ""
  fail_on_gate:
    description: Fail the task when a gate is missed (false returns passed=false).
    type: bool
    default: true
  clients:
    description:
      - Several clients started at the same time (one thread each), for a
        measurement of every rail at once; each entry overrides the options
        it names (O(test), O(server), O(device), O(gid_index), O(port),
        O(bind_address), O(qps), O(size), O(label)) and the others apply to
        all. The task waits for every client and returns C(results), one
        per entry in the order given; a client that fails fails the task
        with its label.
    type: list
    elements: dict
attributes:
  check_mode:
    support: full
"""

EXAMPLES = r"""
- name: Serve ib_write_bw on the worker's rail
  ib_perftest:
    test: ib_write_bw
    mode: server
    device: mlx5_0
    gid_index: 3
    port: 18515
    timeout: 60
  async: 90
  poll: 0

- name: Measure it from the master
  ib_perftest:
    test: ib_write_bw
    server: 10.100.0.2
    device: mlx5_0
    gid_index: 3
    size: 1048576
    duration: 5
    min_bw_gbps: 180
    label: rail0 spark-a -> spark-b

- name: Judge an archived baseline again
  ib_perftest:
    test: ib_write_bw
    from_file: /var/lib/twinrail/baseline/rail0.txt
    min_bw_gbps: 180
"""

RETURN = r"""
test:
  description: The program.
  returned: success
  type: str
transport:
  description: C(rdma) for perftest, C(tcp) for iperf3.
  returned: success
  type: str
header:
  description: Link type, device, MTU, QPs, GID index where printed.
  returned: success
  type: dict
rows:
  description: One dict per message size.
  returned: success
  type: list
  elements: dict
bw_average_gbps:
  description: The gated bandwidth, from the largest message size's average column.
  returned: for bandwidth tests
  type: float
t_typical_us:
  description: The gated typical latency (smallest size).
  returned: for latency tests
  type: float
p999_us:
  description: The gated p99.9 latency.
  returned: for latency tests
  type: float
passed:
  description: Whether every given gate passed.
  returned: success
  type: bool
failures:
  description: One sentence per missed gate.
  returned: success
  type: list
  elements: str
argv:
  description: The command that was run.
  returned: when run
  type: list
  elements: str
results:
  description: With O(clients), each client's result (the keys above, and C(label)), in the order given.
  returned: with clients
  type: list
  elements: dict
"""

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.rails.perftest import PerftestError, gate, parse


def build_argv(p: dict) -> list[str]:
    """The command line for the parameters (a list, never a shell string)."""
    if p["test"] == "iperf3":
        argv = ["iperf3", "--json", "-p", str(p["port"])]
        if p["bind_address"]:
            argv += ["-B", p["bind_address"]]
        if p["mode"] == "server":
            return argv + ["-s", "-1"]
        argv += ["-c", p["server"], "-P", str(p["qps"]), "-t", str(p["duration"] or 5),
                 "-O", "1"]
        if p["bidirectional"]:
            argv.append("--bidir")
        return argv
    argv = [p["test"], "-F", "-p", str(p["port"]), "-i", str(p["ib_port"])]
    if p["device"]:
        argv += ["-d", p["device"]]
    if p["gid_index"] is not None:
        argv += ["-x", str(p["gid_index"])]
    if p["all_sizes"]:
        argv.append("-a")
    elif p["size"]:
        argv += ["-s", str(p["size"])]
    if p["qps"] and p["qps"] > 1:
        argv += ["-q", str(p["qps"])]
    if p["duration"]:
        argv += ["-D", str(p["duration"])]
    elif p["iterations"]:
        argv += ["-n", str(p["iterations"])]
    if p["rdma_cm"]:
        argv.append("-R")
    if p["bind_address"]:
        argv += ["--source_ip", p["bind_address"]]
    if p["report_gbits"] and p["test"].endswith("_bw"):
        argv.append("--report_gbits")
    if p["bidirectional"] and p["test"].endswith("_bw"):
        argv.append("-b")
    if p["mode"] == "client":
        argv.append(p["server"])
    return argv


CLIENT_KEYS = ("test", "server", "device", "gid_index", "port", "bind_address", "qps", "size", "label")
TESTS = ["ib_write_bw", "ib_read_bw", "ib_send_bw", "ib_write_lat", "ib_read_lat", "ib_send_lat", "iperf3"]


class Failed(Exception):
    """A run that failed: the task's message and what goes with it."""

    def __init__(self, msg: str, **extra):
        super().__init__(msg)
        self.msg, self.extra = msg, extra


def run_all(argvs: list[list[str]], timeout: int) -> list[tuple[int, str, str]]:
    """Every command at once (one run alone, or every client of an
    aggregate), one thread each, each under `timeout` (both sides of a
    measurement end by themselves); (rc, stdout, stderr) in order."""
    def one(argv):
        proc = subprocess.run(["timeout", "--kill-after=5", str(timeout)] + argv, capture_output=True,
                              text=True, check=False, env=dict(os.environ, LC_ALL="C"))
        return proc.returncode, proc.stdout, proc.stderr
    with ThreadPoolExecutor(max_workers=max(1, len(argvs))) as pool:
        return list(pool.map(one, argvs))


def said_failed(test: str, exc: Exception) -> str:
    """'<test> failed: <why>', once: the parser's own sentence may already say it."""
    said = str(exc)
    return said if said.startswith(f"{test} failed") else f"{test} failed: {said}"


def outcome(p: dict, argv: list[str] | None, rc: int, out: str, err: str) -> dict:
    """The figures and the gates of one run's output (raises Failed)."""
    label = p["label"] or p["test"]
    text = out + "\n" + err
    if argv is not None:
        if rc in (124, 137):
            raise Failed(f"bandwidth: {label}: {argv[0]} timed out after {p['timeout']} s (no peer, or the peer hung)",
                         argv=argv, stdout=out, stderr=err)
        if rc != 0 and p["test"] != "iperf3":
            try:
                parse(text, p["test"])
            except PerftestError as exc:
                raise Failed(f"bandwidth: {label}: {said_failed(p['test'], exc)}", argv=argv, rc=rc, stdout=out,
                             stderr=err) from exc
            raise Failed(f"bandwidth: {label}: {p['test']} exited {rc}: {(err or out).strip()[-500:]}",
                         argv=argv, rc=rc)
        if p["mode"] == "server" and p["test"] == "iperf3":
            if rc != 0:
                raise Failed(f"bandwidth: {label}: iperf3 server exited {rc}: {err.strip()[-500:]}", argv=argv)
            return {"changed": False, "argv": argv, "passed": True, "failures": [], "transport": "tcp",
                    "test": "iperf3"}
        if p["test"] == "iperf3":
            text = out
    try:
        result = parse(text, p["test"])
    except PerftestError as exc:
        raise Failed(f"bandwidth: {label}: {said_failed(p['test'], exc)}", argv=argv) from exc
    failures = gate(result, p["min_bw_gbps"], p["max_typical_us"], p["max_p999_us"], where=p["label"])
    result.update(changed=False, passed=not failures, failures=failures, argv=argv)
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "test": {"type": "str", "required": True, "choices": TESTS},
            "mode": {"type": "str", "default": "client", "choices": ["server", "client"]},
            "server": {"type": "str"},
            "device": {"type": "str"},
            "ib_port": {"type": "int", "default": 1},
            "gid_index": {"type": "int"},
            "size": {"type": "int"},
            "all_sizes": {"type": "bool", "default": False},
            "qps": {"type": "int", "default": 1},
            "duration": {"type": "int"},
            "iterations": {"type": "int"},
            "port": {"type": "int", "default": 18515},
            "rdma_cm": {"type": "bool", "default": False},
            "bind_address": {"type": "str"},
            "report_gbits": {"type": "bool", "default": True},
            "bidirectional": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 120},
            "from_file": {"type": "path"},
            "min_bw_gbps": {"type": "float"},
            "max_typical_us": {"type": "float"},
            "max_p999_us": {"type": "float"},
            "label": {"type": "str", "default": ""},
            "fail_on_gate": {"type": "bool", "default": True},
            "clients": {"type": "list", "elements": "dict"},
        },
        required_if=[("mode", "client", ("server", "from_file", "clients"), True)],
        mutually_exclusive=[("size", "all_sizes"), ("duration", "iterations"), ("clients", "from_file")],
        supports_check_mode=True,
    )
    p = module.params
    if p["clients"] is not None:
        measure_all(module, p)
    label = p["label"] or p["test"]
    argv = None
    rc, out, err = 0, "", ""
    if p["from_file"]:
        if not os.path.isfile(p["from_file"]):
            module.fail_json(msg=f"bandwidth: {label}: from_file {p['from_file']} does not exist")
        with open(p["from_file"], encoding="utf-8", errors="replace") as handle:
            out = handle.read()
    else:
        argv = build_argv(p)
        if module.check_mode:
            module.exit_json(changed=False, skipped=True, argv=argv,
                             msg="check mode: nothing was measured")
        rc, out, err = run_all([argv], p["timeout"])[0]
    try:
        result = outcome(p, argv, rc, out, err)
    except Failed as exc:
        module.fail_json(msg=exc.msg, **exc.extra)
    if result["failures"] and p["fail_on_gate"]:
        module.fail_json(msg="bandwidth: " + "; ".join(result["failures"]), **result)
    module.exit_json(**result)


def measure_all(module: AnsibleModule, p: dict) -> None:
    """`clients`: every client at once, then every outcome (exits the module)."""
    if p["mode"] != "client" or not p["clients"]:
        module.fail_json(msg="bandwidth: clients: a list of one or more clients, with mode client")
    params = []
    for index, client in enumerate(p["clients"]):
        unknown = sorted(set(client) - set(CLIENT_KEYS))
        if unknown or not client.get("server") or client.get("test", p["test"]) not in TESTS:
            module.fail_json(msg=f"bandwidth: clients[{index}]: needs server and takes only "
                                 f"{', '.join(CLIENT_KEYS)}, test one of {', '.join(TESTS)}; got {client}")
        params.append(dict(p, **{k: v for k, v in client.items() if v is not None}))
    argvs = [build_argv(one) for one in params]
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, argvs=argvs, msg="check mode: nothing was measured")
    results, errors = [], []
    for one, argv, (rc, out, err) in zip(params, argvs, run_all(argvs, p["timeout"])):
        try:
            results.append(dict(outcome(one, argv, rc, out, err), label=one["label"]))
        except Failed as exc:
            errors.append(exc.msg)
    if errors:
        module.fail_json(msg="; ".join(errors))
    failures = [f for r in results for f in r["failures"]]
    if failures and p["fail_on_gate"]:
        module.fail_json(msg="bandwidth: " + "; ".join(failures), results=results)
    module.exit_json(changed=False, results=results, passed=not failures, failures=failures)


if __name__ == "__main__":
    main()
