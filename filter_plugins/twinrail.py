# -*- coding: utf-8 -*-
"""twinrail's Jinja filters: what the stages would otherwise compute in
Jinja loops (the rails' state, the bandwidth plan, what a node lacks of a
weight set), as plain functions over plain data, unit-tested in
tests/unit/test_filters.py."""

from __future__ import annotations

import hashlib
import os
import re

from ansible.errors import AnsibleFilterError

from twinrail.loader import module_utils

DOCUMENTATION = r"""
name: twinrail
short_description: twinrail's filters (rails, bandwidth plan, weights)
description:
  - twinrail_bandwidth_plan, twinrail_bandwidth_rails, twinrail_bandwidth_clients, twinrail_bandwidth_aggregates, twinrail_rails_drifted, twinrail_rail_probes, twinrail_rails_routed_directly,
    twinrail_weights_needed, twinrail_rail_problems, twinrail_checksum_mismatches, twinrail_idle_workers,
    twinrail_rails_not_answering, twinrail_api_key_problems, twinrail_api_key_digests,
    twinrail_transport_problems, twinrail_tensor_split, twinrail_service_restarts,
    twinrail_scale_change, twinrail_unit_pids, twinrail_units_restarted, twinrail_setting_names,
    twinrail_setting_problems.
"""


def _bare(address: str) -> str:
    """198.19.0.1/24 -> 198.19.0.1."""
    return str(address).split("/", 1)[0]


def _rail(rails: list[dict], name: str) -> dict:
    for rail in rails:
        if rail["name"] == name:
            return rail
    raise ValueError(f"no rail named {name!r} among {[r['name'] for r in rails]}")


def bandwidth_plan(master: str, workers: list[str], rails: dict, links: dict, active=None, *,
                   default_rate_gbps: float, min_ratio: float, perftest_port_base: int,
                   iperf3_port_base: int) -> list[dict]:
    """One measurement per (worker, rail of the master) among ``active`` rails
    (every rail when None): who serves, who measures, over which transport, on
    which port, and the figure required from the rate both ends negotiated
    (the lower; ``default_rate_gbps`` when neither end knows it).

    ``rails``: host -> twinrail_rails; ``links``: host -> rdma_link_facts' rails."""
    if active is None:
        active = [rail["name"] for rail in rails[master]]
    plan = []
    # by name: the caller's list may come from a set (intersect), and the
    # ports follow the order
    for w, worker in enumerate(sorted(workers)):
        for i, rail in enumerate(rails[master]):
            if rail["name"] not in active:
                continue
            peer = _rail(rails[worker], rail["name"])
            ours, theirs = links[master][rail["name"]], links[worker][rail["name"]]
            rates = [r for r in (ours.get("rate_gbps"), theirs.get("rate_gbps")) if r]
            link = min(rates) if rates else default_rate_gbps
            # a NIC behind a narrower PCIe link than its port cannot fill the port
            ceilings = [c for c in (ours.get("pcie_gbps"), theirs.get("pcie_gbps")) if c]
            pcie = min(ceilings) if ceilings else None
            rate = min(link, pcie) if pcie else link
            basis = (f"{float(min_ratio):g} x the {pcie:g} Gb/s PCIe ceiling (the link runs at {link:g} Gb/s)"
                     if pcie and pcie < link else f"{float(min_ratio):g} x the {link:g} Gb/s link rate")
            client_device, server_device = rail.get("rdma_device") or "", peer.get("rdma_device") or ""
            rdma = bool(client_device and server_device)
            plan.append({
                "rail": rail["name"], "client": master, "server": worker,
                "transport": "rdma" if rdma else "tcp",
                "client_address": _bare(rail["address"]), "server_address": _bare(peer["address"]),
                "client_device": client_device, "server_device": server_device,
                "client_gid": ours.get("gid_index"), "server_gid": theirs.get("gid_index"),
                "port": int(perftest_port_base if rdma else iperf3_port_base) + 10 * w + i,
                "rate_gbps": rate, "link_gbps": link, "pcie_gbps": pcie,
                "required_gbps": round(rate * float(min_ratio), 3), "required_basis": basis,
            })
    return plan


def bandwidth_rails(plan: list[dict], results: list[dict], max_typical_us: float, max_p999_us: float) -> list[dict]:
    """Each planned measurement with its runs: bandwidth results (kind bw)
    and latency results (kind lat) of the same rail and server, in the order
    they ran, and the latency bounds the verdict applies."""
    out = []
    for item in plan:
        mine = [r for r in results if r["rail"] == item["rail"] and r["server"] == item["server"]]
        out.append(dict(item, runs=[r["result"] for r in mine if r["kind"] == "bw"],
                        latency=[r["result"] for r in mine if r["kind"] == "lat"],
                        max_typical_us=float(max_typical_us), max_p999_us=float(max_p999_us)))
    return out


def bandwidth_clients(plan: list[dict], worker: str, bidirectional: bool, tcp_streams: int,
                      message_size: int) -> list[dict]:
    """ib_perftest's `clients` for every rail between the master and
    ``worker`` at once (plan order): perftest where both ends have an RDMA
    device, iperf3 with ``tcp_streams`` streams where not."""
    way = "<->" if bidirectional else "->"
    clients = []
    for item in plan:
        if item["server"] != worker:
            continue
        rdma = item["transport"] == "rdma"
        clients.append({
            "test": "ib_write_bw" if rdma else "iperf3", "server": item["server_address"],
            "device": (item["client_device"] or None) if rdma else None,
            "gid_index": item["client_gid"] if rdma else None,
            "port": item["port"], "bind_address": item["client_address"],
            "qps": 1 if rdma else int(tcp_streams), "size": int(message_size) if rdma else None,
            "label": (f"{item['rail']} {item['client']} {way} {item['server']} "
                      f"(all rails{', both ways' if bidirectional else ''})"),
        })
    return clients


def bandwidth_aggregates(aggregates: list[dict], plan: list[dict], master: str, required_gbps: float,
                         bidir_required_gbps: float | None = None) -> list[dict]:
    """Per worker and direction measured with every rail at once (first seen
    first): its rails, one way or both ways, the required aggregate (both
    ways: ``bidir_required_gbps``) and the results of each run."""
    out = []
    for worker, both in dict.fromkeys((a["server"], bool(a.get("bidirectional"))) for a in aggregates):
        out.append({"client": master, "server": worker,
                    "rails": [p["rail"] for p in plan if p["server"] == worker],
                    "bidirectional": both,
                    "required_gbps": float(bidir_required_gbps if both else required_gbps),
                    "runs": [a["results"] for a in aggregates
                             if a["server"] == worker and bool(a.get("bidirectional")) == both]})
    return out


def rails_drifted(rails: list[dict], addresses: list[dict], routes: list[dict], default_mtu: int,
                  table_base: int) -> list[str]:
    """Interfaces of the rails that are up but whose MTU, address or own
    routing table (table_base + the rail's position, from 1) differ from what
    their files say. ``addresses``: `ip -j address show`; ``routes``:
    `ip -j route show table all`. A rail set down is not drifted: someone
    took it out of service, and the gate reports it."""
    live = {link["ifname"]: link for link in addresses}
    drifted = []
    for index, rail in enumerate(rails, start=1):
        link = live.get(rail["interface"], {})
        inet = [a.get("local") for a in link.get("addr_info", []) if a.get("family") == "inet"]
        table = str(table_base + index)
        routed = [r for r in routes if str(r.get("table", "")) == table and r.get("dev") == rail["interface"]]
        if "UP" in link.get("flags", []) and (
                link.get("mtu", 0) != rail.get("mtu", default_mtu) or _bare(rail["address"]) not in inet
                or not routed):
            drifted.append(rail["interface"])
    return drifted


def rail_probes(rails: list[dict], peers: dict, default_mtu: int) -> list[dict]:
    """The rail gate's probes from this node (rdma_link_facts' `peers`): one
    per rail and peer, peers in name order, the peer's address on the same
    rail, without prefix lengths. ``peers`` maps each other node to its
    twinrail_rails."""
    probes = []
    for rail in rails:
        for peer in sorted(peers):
            theirs = _rail(peers[peer], rail["name"])
            probes.append({"rail": rail["name"], "interface": rail["interface"],
                           "own": _bare(rail["address"]), "peer": peer, "address": _bare(theirs["address"]),
                           "mtu": int(rail.get("mtu") or default_mtu)})
    return probes


def rails_routed_directly(routes: list[dict], rails: list[dict], loop_var: str) -> list[dict]:
    """The loop items (rails) of ``routes`` (results of `ip -j route get PEER
    from OWN` looped over rails, the rail under ``loop_var``) whose route
    leaves by that rail's own interface in ``rails`` (the asking node's):
    never the management network or a default route."""
    direct = []
    for result in routes:
        item = result[loop_var]
        mine = _rail(rails, item["name"])
        if result.get("rc") == 0 and module_utils("rdma_link").route_dev(result.get("stdout")) == mine["interface"]:
            direct.append(item)
    return direct


def weights_needed(bad: list[dict], sizes: dict) -> dict:
    """file -> its size at the source, for every file the check found bad
    (missing or not matching the manifest)."""
    return {item["file"]: sizes.get(item["file"], 0) for item in bad or []}


def rail_problems(rails: list[dict], links: list[dict], devices: list[str], default_mtu: int) -> list[str]:
    """What the rdma stage refuses before configuring anything, one sentence
    per rail: an interface this host lacks, one whose NIC cannot carry the
    MTU, an RDMA device that does not exist.

    ``links``: ``ip -j -d link show``; ``devices``: /sys/class/infiniband's names."""
    by_name = {link["ifname"]: link for link in links or []}
    out = []
    for rail in rails or []:
        mtu = int(rail.get("mtu", default_mtu))
        link = by_name.get(rail["interface"])
        if link is None:
            has = ", ".join(name for name in by_name if name != "lo")
            out.append(f"{rail['name']}: interface {rail['interface']} does not exist (has: {has})")
        elif "max_mtu" in link and int(link["max_mtu"]) < mtu:
            out.append(f"{rail['name']}: {rail['interface']} carries at most MTU {link['max_mtu']}, "
                       f"twinrail_rail_mtu asks for {mtu}")
        device = rail.get("rdma_device") or ""
        if device and device not in (devices or []):
            out.append(f"{rail['name']}: RDMA device {device} does not exist (has: {', '.join(devices or []) or 'none'})")
    return out


def checksum_mismatches(results: list[dict], want: dict, loop_var: str) -> list[str]:
    """The looped-over names whose stat checksum is not the one wanted
    (a missing file has none)."""
    return [r[loop_var] for r in results or []
            if (r.get("stat") or {}).get("checksum", "") != want.get(r[loop_var])]


def idle_workers(results: list[dict], model_bytes: int, min_share: float) -> list[dict]:
    """Workers whose RPC servers hold less than ``min_share`` of the model
    (their command printed "<bytes>"): they took no part."""
    return [r for r in results or [] if "stdout" in r
            and int(r["stdout"].split()[0]) < model_bytes * float(min_share)]


def rails_not_answering(results: list[dict], loop_var: str) -> list[dict]:
    """The rails whose RPC server the worker's agent does not report as up
    (the agent not answering, or its entry for that address missing or not ok)."""
    out = []
    for result in results or []:
        if "skipped" in result:
            continue
        rail = result[loop_var]
        address = _bare(rail["address"])
        rpc = ((result.get("json") or {}).get("rpc") or []) if result.get("status", 0) == 200 else []
        if len([e for e in rpc if e.get("address") == address and e.get("ok")]) != 1:
            out.append(rail)
    return out


def transport_problems(results: list[dict], loop_var: str) -> list[str]:
    """Each rail of each worker whose RPC server's connections do not use
    the transport the rail should carry (rpc_transport_facts, looped over
    the workers), as '<worker> <rail> (<address>): <why>'."""
    out = []
    for result in results or []:
        if "skipped" in result:
            continue
        for rail in result.get("rails") or []:
            if rail.get("problem"):
                out.append(f"{result[loop_var]} {rail['name']} ({rail['address']}, expected "
                           f"{rail['expected'].upper()}): {rail['problem']}")
    return out


API_KEY_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
API_KEY_MIN_LENGTH = 24


def api_key_problems(keys) -> list[str]:
    """What is wrong with inference_service_api_keys ([{name, key}]), never
    quoting a key: names unique, of lower-case letters, digits, . _ -; keys
    unique strings of at least API_KEY_MIN_LENGTH characters, no spaces."""
    if not isinstance(keys, list):
        return [f"expected a list of {{name, key}}, got {type(keys).__name__}"]
    problems, names, seen = [], set(), set()
    for index, entry in enumerate(keys):
        if not isinstance(entry, dict) or set(entry) != {"name", "key"}:
            fields = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            problems.append(f"entry {index}: expected {{name, key}}, got {fields}")
            continue
        name, key = entry["name"], entry["key"]
        if not isinstance(name, str) or not API_KEY_NAME.match(name):
            problems.append(f"entry {index}: name {name!r} is not lower-case letters, digits, . _ - (up to 63)")
        elif name in names:
            problems.append(f"entry {index}: name {name!r} given twice")
        names.add(name)
        if not isinstance(key, str) or len(key) < API_KEY_MIN_LENGTH or any(c.isspace() for c in key):
            problems.append(f"entry {index} ({name}): the key must be a string of at least {API_KEY_MIN_LENGTH} "
                            f"characters without spaces (e.g. `openssl rand -hex 24`, kept in ansible-vault)")
        elif key in seen:
            problems.append(f"entry {index} ({name}): the same key as an earlier entry")
        seen.add(key)
    return problems


# the stages twinrail_measure can force: those whose role's defaults ask it (the stage registry)
MEASURED_STAGES = module_utils("stages").measured(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def measure_mode(value, stage: str) -> str:
    """What twinrail_measure asks of `stage`'s costly measurement: 'always'
    when it is `always` or a list naming the stage, else 'auto' (the stage
    decides from the state it depends on). A list is a YAML list or a string
    of comma-separated names (-e twinrail_measure=bandwidth,weights)."""
    if stage not in MEASURED_STAGES:
        raise AnsibleFilterError(f"twinrail_measure: no measured stage {stage!r}; "
                                 f"expected one of {', '.join(MEASURED_STAGES)}")
    if value in (None, "", "auto"):
        return "auto"
    if value == "always":
        return "always"
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else value
    if not isinstance(names, list) or not all(isinstance(n, str) and n in MEASURED_STAGES for n in names):
        raise AnsibleFilterError(f"twinrail_measure: expected auto, always, or a list of the stages to measure "
                                 f"whatever their state ({', '.join(MEASURED_STAGES)}), got {value!r}")
    return "always" if stage in names else "auto"


def packages_missing(wanted: list[str], installed: list[str] | None) -> bool:
    """Whether a stage's apt run has work on a node: one of its packages is
    not among those preflight read there this run. With no list read (a
    stage run alone, --tags), apt decides."""
    return bool(wanted) and (installed is None or not set(wanted) <= set(installed))


def api_key_digests(keys: list[dict]) -> dict:
    """What the guard reads: each key's name and SHA-256 digest, by name."""
    return {"keys": [{"name": entry["name"], "sha256": hashlib.sha256(entry["key"].encode()).hexdigest()}
                     for entry in sorted(keys, key=lambda e: e["name"])]}


def runtime_cmake(isa_flags, cuda, cuda_archs, rdma, cuda_root="/usr/local/cuda", extra=None) -> dict:
    """The runtime build's CMake definitions (module_utils/runtime_build.py)."""
    truthy = module_utils("stage_settings").truthy
    return module_utils("runtime_build").cmake_definitions(list(isa_flags or []), truthy(cuda), cuda_archs,
                                                           truthy(rdma), cuda_root, dict(extra or {}))


def runtime_link_allowlist(base, rdma_allowlist, cuda, rdma) -> list:
    """The libraries the runtime's link gate accepts (module_utils/runtime_build.py)."""
    truthy = module_utils("stage_settings").truthy
    return module_utils("runtime_build").link_allowlist(list(base or []), list(rdma_allowlist or []), truthy(cuda),
                                                        truthy(rdma))


def host_values(hosts: list[str], hostvars, name: str) -> dict:
    """Each host's ``name`` from hostvars, None where it sets none (Jinja's
    map(attribute=..., default=...) raises on a host's missing variable)."""
    out = {}
    for host in hosts:
        values = hostvars[host]
        out[host] = values[name] if name in values else None
    return out


def tensor_split(master: str, workers: list[str], rails: dict, port, layers, master_gpu,
                 gpus: dict | None = None) -> dict:
    """The split of the layers the memory plan assumes: the --rpc list,
    -ngl and --tensor-split, with ``gpus`` (host -> twinrail_gpu_count) one
    device per GPU of a node with several (module_utils/tensor_split.py)."""
    try:
        return module_utils("tensor_split").plan_split(master, list(workers), rails, int(port), int(layers),
                                                         str(master_gpu).lower() in ("true", "1", "yes"), gpus)
    except ValueError as exc:
        raise AnsibleFilterError(f"service: {exc}") from None


# What only the master's units read: the cluster's members (the --rpc list,
# the split, the guard's workers). A change of these alone, a worker added
# or removed, restarts the master and leaves every worker's units running
# (tests/unit/test_filters.py checks that no worker unit reads them).
MEMBERSHIP_KEYS = ("TWINRAIL_RPC_SERVERS", "TWINRAIL_SPLIT_ARGS", "TWINRAIL_GPU_LAYERS", "TWINRAIL_GUARD_WORKERS",
                   "TWINRAIL_GUARD_RAIL_ARGS")
_ENV_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")


def _env(text: str) -> dict:
    return {m.group(1): m.group(2) for m in map(_ENV_LINE.match, (text or "").splitlines()) if m}


def service_restarts(old_env: str | None, new_env: str, worker) -> bool:
    """Whether a node's service units must restart on a new configuration:
    the master on any change of a setting; a worker unless the only
    settings that changed are the cluster's members (MEMBERSHIP_KEYS). No
    configuration before (a new node): nothing runs yet, False (its units
    are started, not restarted)."""
    if not old_env:
        return False
    old, new = _env(old_env), _env(new_env)
    changed = {k for k in set(old) | set(new) if old.get(k) != new.get(k)}
    if str(worker).lower() in ("true", "1", "yes"):
        changed -= set(MEMBERSHIP_KEYS)
    return bool(changed)


def scale_change(env_text: str | None, workers: list[str], retired: dict | None = None) -> dict:
    """What scale.yml changes: the workers the master serves with now (its
    configuration's TWINRAIL_GUARD_WORKERS, host@address[=rail]) against
    the inventory's. ``kept``, ``added``, ``removed`` in a stable order;
    ``unreachable``: removed workers the run has no address for
    (``retired``: name -> management address)."""
    listed = _env(env_text or "").get("TWINRAIL_GUARD_WORKERS", "")
    serving: list[str] = []
    for item in filter(None, listed.split(",")):
        host = item.split("@", 1)[0].strip()
        if host and host not in serving:
            serving.append(host)
    workers = list(workers)
    kept = [w for w in workers if w in serving]
    added = [w for w in workers if w not in serving]
    removed = sorted(w for w in serving if w not in workers)
    unreachable = [w for w in removed if w not in (retired or {})]
    if not serving:
        summary = f"no service runs yet: every stage for {', '.join(workers)} (as site.yml)"
    elif not added and not removed:
        summary = f"the workers serving are the inventory's ({', '.join(kept)}): nothing to add or take out"
    else:
        parts = [f"adding {', '.join(added)}"] if added else []
        parts += [f"taking out {', '.join(removed)}"] if removed else []
        parts.append(f"{', '.join(kept)} keep serving, their units left running" if kept else "no worker kept")
        summary = "; ".join(parts) + "; the master restarts once with the new --rpc list"
    return {"serving": serving, "kept": kept, "added": added, "removed": removed, "unreachable": unreachable,
            "summary": summary}


def unit_pids(show: str) -> dict:
    """``systemctl show --property=Id,MainPID <units>`` -> {unit: pid}: one
    block per unit, blocks apart by a blank line, the properties in
    systemd's order (MainPID before Id), not the order asked."""
    pids = {}
    for block in re.split(r"\n\s*\n", (show or "").strip()):
        fields = dict(line.partition("=")[::2] for line in block.splitlines() if "=" in line)
        if fields.get("Id"):
            pids[fields["Id"]] = int(fields.get("MainPID") or 0)
    return pids


def units_restarted(before: str, after: str) -> list[str]:
    """The units whose main process changed between two readings (or that
    stopped): "unit: pid A -> B"."""
    old, new = unit_pids(before), unit_pids(after)
    return [f"{unit}: pid {old[unit]} -> {new.get(unit, 0)}" for unit in sorted(old)
            if old[unit] and new.get(unit) != old[unit]]


def weights_controller_sources(sets: list[dict]) -> dict:
    """"SET: its controller source" -> every file under the source's path
    (relative name, size, mtime and ctime in ns), what preflight's disk
    check counts (weights_controller_bytes); nothing is read. Sets from the
    master or a URL are left out. A path that is not there lists as None."""
    out = {}
    for item in sets or []:
        if item.get("source") != "controller":
            continue
        root = str(item.get("path", ""))
        files = None
        if os.path.isdir(root):
            files = []
            for top, dirs, names in os.walk(root, followlinks=True):
                dirs.sort()
                for name in sorted(names):
                    path = os.path.join(top, name)
                    try:
                        info = os.stat(path)
                    except OSError:
                        files.append([os.path.relpath(path, root), None])
                        continue
                    files.append([os.path.relpath(path, root), info.st_size, info.st_mtime_ns, info.st_ctime_ns])
        out[f"{item.get('model')}/{item.get('revision')}: its controller source"] = files
    return out


def model_on_master(model: dict, sets: list[dict], model_file: str) -> str:
    """The model's first GGUF file on the master, when its figures must be
    read there: twinrail_model names no GGUF on the controller, and the set
    that serves it (twinrail_weights' entry of twinrail_model.name) comes
    from the master. "" otherwise (the figures come from the controller's
    GGUF, or from the inventory)."""
    if (model or {}).get("gguf") or not model_file:
        return ""
    served = next((s for s in sets or [] if s.get("model") == (model or {}).get("name")), None)
    if not served or served.get("source") != "master":
        return ""
    return os.path.join(str(served.get("path", "")), str(model_file))


def weights_controller_bytes(sets: list[dict]) -> int:
    """The bytes of every file of the sets kept on the controller (as
    twinrail_weights_controller_sources lists them), for preflight's disk
    gate: read where they are, no module started for it."""
    return sum(entry[1] for files in weights_controller_sources(sets).values() for entry in files or []
               if entry[1] is not None)


def setting_names(stage: str) -> list[str]:
    """The settings a stage's rules read (module_utils/stage_settings.py)."""
    return module_utils("stage_settings").names(stage)


def setting_problems(stage: str, values: dict) -> list[str]:
    """Only the stage's settings that break their rule, each with its value
    and the form expected (module_utils/stage_settings.py)."""
    return module_utils("stage_settings").problems(stage, values)


class FilterModule:  # pylint: disable=too-few-public-methods
    """twinrail's filters."""

    def filters(self):
        return {
            "twinrail_bandwidth_plan": bandwidth_plan,
            "twinrail_measure": measure_mode,
            "twinrail_packages_missing": packages_missing,
            "twinrail_bandwidth_rails": bandwidth_rails,
            "twinrail_bandwidth_clients": bandwidth_clients,
            "twinrail_bandwidth_aggregates": bandwidth_aggregates,
            "twinrail_rails_drifted": rails_drifted,
            "twinrail_rail_probes": rail_probes,
            "twinrail_weights_needed": weights_needed,
            "twinrail_rails_routed_directly": rails_routed_directly,
            "twinrail_rail_problems": rail_problems,
            "twinrail_checksum_mismatches": checksum_mismatches,
            "twinrail_idle_workers": idle_workers,
            "twinrail_rails_not_answering": rails_not_answering,
            "twinrail_api_key_problems": api_key_problems,
            "twinrail_api_key_digests": api_key_digests,
            "twinrail_transport_problems": transport_problems,
            "twinrail_tensor_split": tensor_split,
            "twinrail_host_values": host_values,
            "twinrail_runtime_cmake": runtime_cmake,
            "twinrail_runtime_link_allowlist": runtime_link_allowlist,
            "twinrail_service_restarts": service_restarts,
            "twinrail_scale_change": scale_change,
            "twinrail_unit_pids": unit_pids,
            "twinrail_units_restarted": units_restarted,
            "twinrail_weights_controller_sources": weights_controller_sources,
            "twinrail_weights_controller_bytes": weights_controller_bytes,
            "twinrail_model_on_master": model_on_master,
            "twinrail_setting_names": setting_names,
            "twinrail_setting_problems": setting_problems,
        }
