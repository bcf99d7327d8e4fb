# -*- coding: utf-8 -*-
"""Parsers for perftest (ib_*_bw, ib_*_lat) and iperf3 --json output, and
the bandwidth/latency gate applied to them.

perftest output as it is found in the wild: CPU-frequency warnings between
the column header and the rows, raw tabs, the 6-decimal format for small
Gb/s figures, vendor builds with extra header lines, shell prompts and job
lines, partial captures whose header was elided ("..."), server-side output
with a single row, 0.00 peak in duration mode, bidirectional sums and
#iterations multiplied by the QP count. Units: [MB/sec] and [MiB/sec] are
2^20 bytes/s (x 0.008388608 to Gb/s); [Gb/sec] is 10^9 bit/s.

The gate reads the BW *average* column, never the peak: a degraded run can
show a healthy peak over a collapsed average.
"""

from __future__ import annotations

import json
import re

MIB_TO_GBPS = 0.008388608
BW_TESTS = ("ib_write_bw", "ib_read_bw", "ib_send_bw")
LAT_TESTS = ("ib_write_lat", "ib_read_lat", "ib_send_lat")
TESTS = BW_TESTS + LAT_TESTS + ("iperf3",)

# perftest's own failure sentences (perftest_resources.c, perftest_communication.c)
_RULE = re.compile(r"^[-*=]+$")
FAILURES = tuple(re.compile(p) for p in (
    r"Did not detect devices",
    r"Unable to find the Infiniband/RoCE device",
    r"IB device \S+ not found",
    r"Couldn't get context for the device",
    r"Port number \d+ state is Down",
    r"Couldn't connect to \S+",
    r"Unable to open file descriptor for socket connection",
    r"Unable to init the socket connection",
    r"Unable to connect \(retries",
    r"rdma_resolve_addr failed",
    r"Couldn't create IB resources",
    r"Failed to create QP",
    r"Couldn't allocate MR",
    r"Completion with error",
    r"Failed status \d+",
    r"Failed to modify QP",
    r"Couldn't read remote address",
    r"Failed to exchange data between server and clients",
    r"Problems with warm up",
))

_DASHES = re.compile(r"^\s*-{20,}\s*$")
_TITLE = re.compile(r"^\s*(RDMA_Write|RDMA_Read|Send)\s+(Bidirectional\s+)?(BW|Latency)\s+Test\s*$")
_KV = re.compile(r"([A-Za-z][A-Za-z0-9_ .*/()-]*?)\s*:\s*([^\s:]+)")
_ROW = re.compile(r"^\s*\d+\s+\d+(\s+-?[\d.]+)+\s*$")


_IPERF3_ERROR = re.compile(r"^iperf3: error - .*$", re.M)


class PerftestError(Exception):
    """perftest failed or printed nothing that can be gated."""


def _header_key(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", key.strip().lower()).strip("_")


def parse_perftest(text: str, test: str | None = None) -> dict:
    """Parse one perftest run (client or server side) into a dict."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if any(reason.search(line) for reason in FAILURES):
            # its reason and what it said after it (perftest explains in several lines)
            said = [rest.strip() for rest in lines[number:] if rest.strip() and not _RULE.match(rest.strip())]
            raise PerftestError(" / ".join(said)[:400])
    title = None
    header: dict = {}
    columns: list[str] | None = None
    rows_raw: list[list[str]] = []
    in_header = False
    for line in lines:
        if _TITLE.match(line):
            title = _TITLE.match(line)
            in_header = True
            continue
        if _DASHES.match(line):
            in_header = False  # the header block ends at the first dashes after the title
            if columns is not None and rows_raw:
                break  # the dashes that close the table
            continue
        stripped = line.strip()
        if stripped.startswith("#bytes"):
            columns = re.split(r"\s{2,}|\t+", stripped)
            continue
        if columns is not None:
            if _ROW.match(line):
                rows_raw.append(line.split())
            continue
        if in_header:
            for key, value in _KV.findall(line):
                header[_header_key(key)] = value
    if columns is None:
        # the tool's own last words say why (perftest prints its reason last)
        said = [line.strip() for line in lines if line.strip() and not _RULE.match(line.strip())][-3:]
        raise PerftestError("no '#bytes' column header: not perftest output, or the run "
                            "failed before measuring" + (f"; it said: {' / '.join(said)}" if said else ""))
    if not rows_raw:
        raise PerftestError("the result table has no rows")
    return _shape(title, header, columns, rows_raw, test)


def _column_kind(columns: list[str]) -> tuple[str, float | None]:
    joined = " ".join(columns)
    if "BW average" in joined or "BW peak" in joined:
        unit = re.search(r"BW average\[([^\]]+)\]", joined)
        unit = unit.group(1) if unit else ""
        if unit == "Gb/sec":
            return "bw", 1.0
        if unit in ("MB/sec", "MiB/sec"):
            return "bw", MIB_TO_GBPS
        raise PerftestError(f"unknown bandwidth unit {unit!r}")
    if "t_min" in joined:
        return "lat", None
    if "t_avg" in joined and "tps" in joined:
        return "lat_duration", None
    raise PerftestError(f"unknown result columns: {joined}")


def _shape(title, header: dict, columns: list[str], rows_raw: list[list[str]],
           test: str | None) -> dict:
    kind, factor = _column_kind(columns)
    rows = []
    for fields in rows_raw:
        nums = [float(f) for f in fields]
        row = {"bytes": int(nums[0]), "iterations": int(nums[1])}
        if kind == "bw":
            row.update(bw_peak_gbps=nums[2] * factor, bw_average_gbps=nums[3] * factor,
                       msg_rate_mpps=nums[4] if len(nums) > 4 else None,
                       bw_peak_raw=nums[2], bw_average_raw=nums[3])
        elif kind == "lat":
            keys = ("t_min_us", "t_max_us", "t_typical_us", "t_avg_us", "t_stdev_us",
                    "p99_us", "p999_us")
            row.update(dict(zip(keys, nums[2:9])))
        else:
            row.update(t_avg_us=nums[2], tps_average=nums[3] if len(nums) > 3 else None)
        rows.append(row)
    verb = {"RDMA_Write": "write", "RDMA_Read": "read", "Send": "send"}
    detected = None
    if title is not None:
        detected = f"ib_{verb[title.group(1)]}_{'bw' if title.group(3) == 'BW' else 'lat'}"
    if test and detected and test != detected:
        raise PerftestError(f"the output is from {detected}, expected {test}")
    test = test or detected
    if test is None:
        test = "ib_?_bw" if kind == "bw" else "ib_?_lat"
    qps = int(header["number_of_qps"]) if header.get("number_of_qps", "").isdigit() else None
    mtu = header.get("mtu")
    info = {
        "link_type": header.get("link_type"),
        "device": header.get("device"),
        "mtu": int(mtu.split("[")[0]) if mtu and mtu.split("[")[0].isdigit() else None,
        "qps": qps,
        "gid_index": int(header["gid_index"]) if header.get("gid_index", "").isdigit() else None,
        "connection": header.get("connection_type"),
        "rdma_cm": header.get("rdma_cm_qps") == "ON" if "rdma_cm_qps" in header else None,
        "bidirectional": bool(title and title.group(2)),
        "raw": header,
    }
    result = {"test": test, "transport": "rdma", "header": info, "rows": rows,
              "kind": "bandwidth" if kind == "bw" else "latency",
              "duration_mode": kind == "lat_duration"}
    if kind == "bw":
        last = max(rows, key=lambda r: r["bytes"])
        result["bw_average_gbps"] = last["bw_average_gbps"]
        result["bw_peak_gbps"] = last["bw_peak_gbps"]
        result["gated_bytes"] = last["bytes"]
        if qps:
            # perftest prints #iterations multiplied by the QP count
            result["iterations_per_qp"] = last["iterations"] // qps
    else:
        first = min(rows, key=lambda r: r["bytes"])
        result["gated_bytes"] = first["bytes"]
        result["t_typical_us"] = first.get("t_typical_us")
        result["t_avg_us"] = first.get("t_avg_us")
        result["p999_us"] = first.get("p999_us")
    return result


def parse_iperf3(text: str) -> dict:
    """iperf3 --json (client side) -> the same shape as a perftest result."""
    # the tool's own failure first: "iperf3: error - ..." in plain text (it
    # failed before -J took effect), an {"event": "error"} line of
    # --json-stream, or the "error" key of -J's object
    said = _IPERF3_ERROR.search(text)
    if said:
        raise PerftestError(f"iperf3 failed: {said.group(0).strip()}")
    for line in text.splitlines():
        if line.startswith('{"event":'):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "error":
                raise PerftestError(f"iperf3 failed: {event.get('data')}")
    try:
        data = json.loads(text)
    except ValueError as exc:
        shown = " / ".join(line.strip() for line in text.splitlines() if line.strip())[-200:] or "(nothing)"
        raise PerftestError(f"iperf3 output is not JSON ({exc}): {shown}") from exc
    if not isinstance(data, dict):
        raise PerftestError(f"iperf3 output is not its -J object: {text.strip()[:200]}")
    if data.get("error"):
        raise PerftestError(f"iperf3 failed: {data['error']}")
    end = data.get("end") or {}
    if "sum_received" not in end or "sum_sent" not in end:
        raise PerftestError("iperf3 output has no end.sum_sent / end.sum_received")
    start = data.get("start") or {}
    test_start = start.get("test_start") or {}
    intervals = data.get("intervals") or []
    received = end["sum_received"]["bits_per_second"] / 1e9
    sent = end["sum_sent"]["bits_per_second"] / 1e9
    # --bidir: the reverse direction (server -> client) has sums of its own;
    # the figure is both directions' received bytes together, as perftest's
    # -b reports the sum of both directions
    reverse = end.get("sum_received_bidir_reverse")
    if reverse is not None:
        received += reverse["bits_per_second"] / 1e9
        sent += end["sum_sent_bidir_reverse"]["bits_per_second"] / 1e9
    return {
        "test": "iperf3", "transport": "tcp", "kind": "bandwidth",
        "header": {"protocol": test_start.get("protocol"),
                   "streams": test_start.get("num_streams"),
                   "duration_s": test_start.get("duration"),
                   "omit_s": test_start.get("omit"),
                   "version": start.get("version"),
                   "bidirectional": reverse is not None},
        "rows": [{"bytes": end["sum_received"].get("bytes"),
                  "bw_average_gbps": received, "bw_sent_gbps": sent}],
        "intervals": len(intervals),
        "omitted_intervals": sum(1 for i in intervals if (i.get("sum") or {}).get("omitted")),
        "retransmits": end["sum_sent"].get("retransmits"),
        "bw_average_gbps": received,
        "bw_sent_gbps": sent,
    }


def parse(text: str, test: str | None) -> dict:
    if test == "iperf3":
        return parse_iperf3(text)
    return parse_perftest(text, test)


def gate(result: dict, min_bw_gbps: float | None = None, max_typical_us: float | None = None,
         max_p999_us: float | None = None, where: str = "") -> list[str]:
    """Sentences for every threshold the result misses (empty: passed)."""
    failures = []
    prefix = f"{where}: " if where else ""
    if min_bw_gbps is not None and result["kind"] == "bandwidth":
        got = result["bw_average_gbps"]
        if got < min_bw_gbps:
            failures.append(f"{prefix}{result['test']} average {got:.2f} Gb/s, required "
                            f"{min_bw_gbps:.2f} Gb/s")
    if result["kind"] == "latency":
        typical = result.get("t_typical_us") or result.get("t_avg_us")
        if max_typical_us is not None and typical is not None and typical > max_typical_us:
            failures.append(f"{prefix}{result['test']} typical latency {typical:.2f} us, "
                            f"required at most {max_typical_us:.2f} us")
        p999 = result.get("p999_us")
        if max_p999_us is not None and p999 is not None and p999 > max_p999_us:
            failures.append(f"{prefix}{result['test']} p99.9 latency {p999:.2f} us, required "
                            f"at most {max_p999_us:.2f} us")
    return failures


def spread_pct(values: list[float]) -> float:
    """(max - min) / mean of repeated averages, in percent (the seed's 'fluctuation')."""
    if not values:
        return 0.0
    mean = sum(values) / len(values)
    return 100 * (max(values) - min(values)) / mean if mean else float("inf")


def counter_deltas(before: dict, after: dict) -> dict:
    """Counters that increased between two readings {name: value}."""
    return {k: after[k] - before.get(k, 0) for k in after
            if isinstance(after[k], int) and after[k] > before.get(k, 0)}


# --------------------------------------------------------------------------
# error counters and the whole-stage verdict

# Counters that must not move during a measurement ("loss must stay zero").
IB_ERROR_COUNTERS = (
    "symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
    "port_xmit_constraint_errors", "port_rcv_constraint_errors",
    "local_link_integrity_errors", "excessive_buffer_overrun_errors", "VL15_dropped",
    # hw_counters (mlx5)
    "out_of_sequence", "packet_seq_err", "duplicate_request", "implied_nak_seq_err",
    "local_ack_timeout_err", "rnr_nak_retry_err", "req_cqe_error", "resp_cqe_error",
    "req_remote_access_errors", "resp_local_length_error", "rx_icrc_encapsulated",
)
NETDEV_ERROR_COUNTERS = (
    "rx_errors", "tx_errors", "rx_dropped", "tx_dropped", "rx_crc_errors", "rx_frame_errors",
    "rx_fifo_errors", "rx_missed_errors", "rx_over_errors", "tx_aborted_errors",
    "tx_carrier_errors", "tx_fifo_errors", "collisions",
)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


# A ConnectX-7 that came up in a stale state after boot carries a small
# fraction of its ceiling while the link reports full speed and width:
# NVIDIA's dgx-spark-playbooks (PR #108) describe 8-25 Gb/s on a rail that
# reports 200G and Gen5 x4 (13.23 Gb/s with 8 QPs, 12.86 Gb/s over TCP).
STALE_SHARE = 0.25


def _ends(item: dict) -> tuple[tuple[str, str], tuple[str, str]]:
    return ("client", item["client"]), ("server", item["server"])


def slow_diagnosis(item: dict, gated: float, both_ways: float | None = None) -> str:
    """Why an RDMA rail measured under STALE_SHARE of its ceiling
    (rate_gbps: the lower of the link rate and the PCIe ceiling), and what
    to do; '' when it did not. The stale state slows both directions of a
    link that is otherwise sound, so it is named only when neither end
    differs in MTU (client_mtu, server_mtu) or runs a narrowed PCIe link
    (client_pcie_problem, server_pcie_problem), and the rail's both-ways
    figure (both_ways: the two directions at once, as perftest's
    --bidirectional sums them) does not show the other direction healthy."""
    ceiling = item.get("rate_gbps")
    if item.get("transport") != "rdma" or not ceiling or gated >= STALE_SHARE * ceiling:
        return ""
    share = f"; {gated:.2f} Gb/s is {100 * gated / ceiling:.1f} % of the rail's {ceiling:g} Gb/s ceiling"
    mtus = [(host, item.get(f"{end}_mtu")) for end, host in _ends(item)]
    if all(mtu for _, mtu in mtus) and mtus[0][1] != mtus[1][1]:
        return (f"{share}, and its ends differ in MTU ({', '.join(f'{host} {mtu}' for host, mtu in mtus)}): not a "
                f"ConnectX-7's stale state; set twinrail_rail_mtu alike on both ends (and on a switch between them) "
                f"and run the rdma stage")
    narrowed = [f"{host}: {item[f'{end}_pcie_problem']}" for end, host in _ends(item) if item.get(f"{end}_pcie_problem")]
    if narrowed:
        return f"{share}, and a PCIe link under it is narrowed ({'; '.join(narrowed)}): not a ConnectX-7's stale state"
    if both_ways is not None and both_ways - gated >= STALE_SHARE * ceiling:
        return (f"{share} from {item['client']} to {item['server']}, while both ways at once carry {both_ways:.2f} Gb/s "
                f"(about {both_ways - gated:.2f} Gb/s the other way): one direction only, not a ConnectX-7's stale "
                f"state (which slows both); compare {item['client']}'s pause and ring settings (ethtool -a, ethtool -g) "
                f"and error counters with {item['server']}'s, then swap the cable's ends")
    other_way = "" if both_ways is None else f" and no more the other way ({both_ways:.2f} Gb/s both ways at once)"
    return (f"{share}{other_way}, the band of a ConnectX-7 left in a stale state at boot (NVIDIA's DGX Spark "
            f"playbooks: 8-25 Gb/s on a link that reports full speed and width; here the MTUs match and the PCIe "
            f"link is not narrowed): reboot both nodes, and if it stays, power both off and on again")


def both_ways_by_rail(aggregates: list[dict]) -> dict:
    """(rail, server) -> the median of that rail's figure in the
    aggregates measured both ways (each run: one result per rail, in the
    aggregate's rail order)."""
    seen: dict = {}
    for agg in aggregates:
        if not agg.get("bidirectional"):
            continue
        for run in agg["runs"]:
            for rail, result in zip(agg["rails"], run):
                seen.setdefault((rail, agg["server"]), []).append(result["bw_average_gbps"])
    return {key: median(values) for key, values in seen.items()}


def verdict(rails: list[dict], aggregates: list[dict], counters_before: dict,
            counters_after: dict, max_latency_spread_pct: float) -> dict:
    """Judge the bandwidth stage.

    rails: [{rail, client, server, transport, required_gbps, runs: [result...],
             latency: [result...] (rdma only), max_typical_us, max_p999_us}]
    aggregates: [{client, server, rails, bidirectional, required_gbps, runs: [result...]}]
    counters_*: {host: {rail: {counter: value}}}
    """
    failures: list[str] = []
    report_rails = []
    both_ways = both_ways_by_rail(aggregates)
    for item in rails:
        where = f"{item['rail']} {item['client']} -> {item['server']}"
        averages = [r["bw_average_gbps"] for r in item["runs"]]
        gated = median(averages)
        entry = {"rail": item["rail"], "client": item["client"], "server": item["server"],
                 "transport": item["transport"], "required_gbps": item["required_gbps"],
                 "required_basis": item.get("required_basis", ""),
                 "bw_average_gbps": gated, "runs_gbps": averages,
                 "spread_pct": spread_pct(averages), "passed": gated >= item["required_gbps"]}
        if item["transport"] == "tcp":
            entry["retransmits"] = [r.get("retransmits") for r in item["runs"]]
        if not entry["passed"]:
            basis = f" ({item['required_basis']})" if item.get("required_basis") else ""
            failures.append(f"{where}: {item['transport']} average {gated:.2f} Gb/s "
                            f"(median of {len(averages)}), required "
                            f"{item['required_gbps']:.2f} Gb/s{basis}"
                            f"{slow_diagnosis(item, gated, both_ways.get((item['rail'], item['server'])))}")
        lat = item.get("latency") or []
        if lat:
            typicals = [r.get("t_typical_us") or r.get("t_avg_us") for r in lat]
            tails = [r.get("p999_us") for r in lat if r.get("p999_us") is not None]
            avgs = [r.get("t_avg_us") for r in lat if r.get("t_avg_us") is not None]
            entry["latency"] = {"t_typical_us": median(typicals),
                                "p999_us": max(tails) if tails else None,
                                "t_avg_us_runs": avgs, "spread_pct": spread_pct(avgs)}
            if median(typicals) > item["max_typical_us"]:
                failures.append(f"{where}: typical latency {median(typicals):.2f} us, "
                                f"required at most {item['max_typical_us']:.2f} us")
            if tails and max(tails) > item["max_p999_us"]:
                failures.append(f"{where}: p99.9 latency {max(tails):.2f} us, required at "
                                f"most {item['max_p999_us']:.2f} us")
            if spread_pct(avgs) > max_latency_spread_pct:
                failures.append(f"{where}: average latency varies {spread_pct(avgs):.2f} % "
                                f"over {len(avgs)} runs, required at most "
                                f"{max_latency_spread_pct:.2f} %")
        report_rails.append(entry)
    report_aggregates = []
    for agg in aggregates:
        totals = [sum(r["bw_average_gbps"] for r in run) for run in agg["runs"]]
        gated = median(totals)
        both = bool(agg.get("bidirectional"))
        entry = {"client": agg["client"], "server": agg["server"], "rails": agg["rails"],
                 "bidirectional": both, "required_gbps": agg["required_gbps"], "bw_average_gbps": gated,
                 "runs_gbps": totals, "passed": gated >= agg["required_gbps"]}
        if not entry["passed"]:
            way = (f"{agg['client']} <-> {agg['server']}, both directions" if both
                   else f"{agg['client']} -> {agg['server']}")
            failures.append(f"all rails ({', '.join(agg['rails'])}) {way}: {gated:.2f} Gb/s together, "
                            f"required {agg['required_gbps']:.2f} Gb/s")
        report_aggregates.append(entry)
    moved = {}
    for host, by_rail in counters_after.items():
        for rail, after in by_rail.items():
            delta = counter_deltas(counters_before.get(host, {}).get(rail, {}), after)
            if delta:
                moved.setdefault(host, {})[rail] = delta
                listing = ", ".join(f"{k} +{v}" for k, v in sorted(delta.items()))
                failures.append(f"{rail} on {host}: error counters moved during the "
                                f"measurements ({listing}), required no change")
    return {"rails": report_rails, "aggregates": report_aggregates,
            "counters_moved": moved, "failures": failures, "passed": not failures}


def baseline_drops(report: dict, baseline: dict | None, max_drop_pct: float) -> list[str]:
    """Rails whose figure fell more than max_drop_pct below the kept baseline."""
    if not baseline:
        return []
    old = {(r["rail"], r["client"], r["server"]): r["bw_average_gbps"]
           for r in baseline.get("rails", [])}
    drops = []
    for rail in report["rails"]:
        before = old.get((rail["rail"], rail["client"], rail["server"]))
        if before:
            drop = 100 * (before - rail["bw_average_gbps"]) / before
            if drop > max_drop_pct:
                drops.append(f"{rail['rail']} {rail['client']} -> {rail['server']}: "
                             f"{rail['bw_average_gbps']:.2f} Gb/s, {drop:.1f} % below the "
                             f"baseline {before:.2f} Gb/s (allowed {max_drop_pct:g} %)")
    return drops
