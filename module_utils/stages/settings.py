# -*- coding: utf-8 -*-
"""The form each stage's settings must have, one rule a setting, and the
refusal that names only the settings that break theirs.

A stage's settings are checked on the controller before any host is
touched (each role's tasks/settings.yml, run by preflight for every stage
at once). The refusal an operator reads lists the wrong settings only,
each with the value it has and the form expected, so the bad value is
not lost in a list of good ones. Rules that tie two settings (a timeout
above a duration) name both. Secrets (API keys, passwords) are not here:
their checks never print a value.

The tasks read the settings through the filters twinrail_setting_names
(the names a stage's rules read) and twinrail_setting_problems (what is
wrong with their values), filter_plugins/stages.py."""

from __future__ import annotations

import ipaddress
import re


def _number(value, kind=float):
    """A setting's number as Jinja's | int or | float would read it ("16",
    16, 16.0; an int setting rendered "150.0" is 150); None when it is none."""
    if isinstance(value, bool):
        return None
    try:
        number = float(str(value).strip())
    except (TypeError, ValueError):
        return None
    if kind is int:
        return int(number) if number.is_integer() else None
    return number


def at_least(low, kind=int):
    return lambda v: (n := _number(v, kind)) is not None and n >= low


def above(low, kind=float):
    return lambda v: (n := _number(v, kind)) is not None and n > low


def between(low, high, kind=int):
    return lambda v: (n := _number(v, kind)) is not None and low <= n <= high


def matches(pattern: str):
    return lambda v: isinstance(v, str) and re.fullmatch(pattern, v) is not None


def _list_of(check):
    return lambda v: isinstance(v, list) and all(check(item) for item in v)


def _prompts(value) -> bool:
    return (isinstance(value, list) and len(value) > 0
            and all(isinstance(p, dict) and "name" in p and "prompt" in p
                    and p.get("kind", "chat") in ("chat", "completion") for p in value))


def _soak(seconds, window) -> bool:
    s, w = _number(seconds, int), _number(window, int)
    return s is not None and w is not None and (s == 0 or s >= 3 * w)


def _above_other(value, other) -> bool:
    a, b = _number(value, int), _number(other, int)
    return a is not None and b is not None and a > b


def _address_with_prefix(value) -> bool:
    try:
        return isinstance(value, str) and "/" in value and bool(ipaddress.ip_interface(value))
    except ValueError:
        return False


DURATION = r"[0-9]+(ms|s|m|h)"
ALERT_DURATION = r"[0-9]+(s|m|h)"

# stage -> [(the settings the rule reads, the check over their values, the form expected)]
RULES = {
    "backup": [
        (("system_backup_target",), lambda v: isinstance(v, str) and v.startswith("/") and v != "/",
         "an absolute directory other than /"),
        (("system_backup_retention",), at_least(1), "at least 1 (a retention of 0 would delete every backup)"),
        (("system_backup_cold_retention",), at_least(1), "at least 1 (a retention of 0 would delete every archive)"),
        (("system_backup_max_age_hours",), at_least(0, float), "0 or more hours"),
        (("system_backup_exclude",), _list_of(lambda p: isinstance(p, str) and re.match("^/.+", p) is not None),
         "a list of absolute paths"),
        (("system_backup_rear_url", "system_backup_backend"),
         lambda url, backend: backend != "rear" or (isinstance(url, str)
                                                    and re.match("^(nfs|cifs|usb|file|sshfs)://.+", url) is not None),
         "nfs://, usb://, file://, cifs:// or sshfs:// with the rear backend"),
    ],
    "kernel": [
        (("kernel_tuning_nr_hugepages",), at_least(0), "0 or more"),
        (("kernel_tuning_reboot_timeout",), at_least(60), "at least 60 s"),
        (("kernel_tuning_memlock_users",), lambda v: isinstance(v, list) and len(v) > 0, "a non-empty list of users"),
        (("kernel_tuning_cmdline",), _list_of(lambda w: isinstance(w, str)
                                              and re.fullmatch(r"[A-Za-z0-9_.-]+(=\S+)?", w) is not None),
         "a list of name or name=value words without spaces"),
    ],
    "runtime": [
        (("runtime_build_canary_model_sha256",), matches(r"[0-9a-f]{64}"), "64 lowercase hex digits (a sha256)"),
        (("runtime_build_canary_timeout",), at_least(10), "at least 10 s"),
    ],
    "rdma": [
        (("rdma_network_table_base", "twinrail_rails"),
         lambda base, rails: between(1, 252 - len(rails or []))(base),
         "a routing table from 1 to 252 less the rails (253-255 are the kernel's)"),
        (("rdma_network_rule_priority_base",), between(1, 32765), "1 to 32765"),
        (("rdma_network_roce_priority",), between(0, 7), "0 to 7"),
        (("rdma_network_roce_tos",), between(0, 255), "0 to 255"),
        (("rdma_network_ping_count",), at_least(1), "at least 1"),
        (("rdma_network_vendor_stack", "rdma_network_vendor_repo"),
         lambda stack, repo: not truthy(stack) or bool(repo), "a vendor repository set when the vendor stack is on"),
    ],
    "bandwidth": [
        (("bandwidth_gate_min_ratio",), lambda v: above(0)(v) and _number(v) <= 1,
         "a fraction of the negotiated rate in (0, 1]"),
        (("bandwidth_gate_aggregate_min_gbps",), at_least(0, float), "0 or more Gb/s"),
        (("bandwidth_gate_bidir_min_gbps",), at_least(0, float), "0 or more Gb/s"),
        (("bandwidth_gate_duration",), at_least(1), "at least 1 s"),
        (("bandwidth_gate_repeats",), at_least(1), "at least 1"),
        (("bandwidth_gate_timeout", "bandwidth_gate_duration"), _above_other, "a timeout above the duration"),
        (("bandwidth_gate_baseline_max_age",), at_least(0), "0 or more s"),
        (("bandwidth_gate_idle_wait",), at_least(0), "0 or more s"),
    ],
    "weights": [
        (("weights_sync_attempts",), at_least(1), "at least 1"),
        (("weights_sync_streams",), at_least(1), "at least 1"),
        (("weights_sync_controller_streams",), at_least(1), "at least 1"),
        (("weights_sync_bwlimit",), at_least(0), "0 or more KiB/s (0: no limit)"),
        (("weights_sync_io_timeout",), at_least(1), "at least 1 s"),
        (("weights_sync_transfer_timeout", "weights_sync_io_timeout"), _above_other, "a timeout above the I/O timeout"),
        (("weights_sync_rsync_port",), between(1, 65535), "a port, 1 to 65535"),
    ],
    "service": [
        (("inference_service_queue_max",), at_least(-1), "-1 (no cap) or more"),
        (("inference_service_rate_per_second",), above(0, int), "a positive rate"),
        (("inference_service_rate_burst",), at_least(0), "0 or more"),
        (("inference_service_max_body",), lambda v: matches(r"[0-9]+[kKmMgG]?")(str(v)), "a size like 16m"),
        (("inference_service_degrade_after",), lambda v: re.fullmatch("[0-9]+", str(v)) is not None,
         "whole seconds (0: never serve on fewer rails)"),
        (("inference_service_restore_after", "inference_service_degrade_after"),
         lambda restore, degrade: (re.fullmatch("[0-9]+", str(restore)) is not None
                                   and (_number(degrade, int) == 0 or _number(restore, int) > 0)),
         "whole seconds above 0 when a rail may be left out"),
        (("inference_service_collectives_sizes_mib",),
         lambda v: isinstance(v, list) and len(v) > 0 and all(at_least(1)(x) for x in v), "a list of sizes of 1 MiB or more"),
        (("inference_service_collectives_iterations",), at_least(1), "at least 1"),
        (("inference_service_collectives_min_share",), lambda v: above(0)(v) and _number(v) <= 1,
         "a share above 0, up to 1"),
        (("inference_service_measure",), lambda v: v in ("auto", "always"), "auto or always"),
    ],
    "acceptance": [
        (("acceptance_prompts",), _prompts, "a list of {name, kind: chat|completion, prompt, expect: [words], max_tokens}"),
        (("acceptance_concurrency",), at_least(1), "at least 1"),
        (("acceptance_long_context_chars",), at_least(1000), "at least 1000 characters"),
        (("acceptance_prefill_chars",), at_least(100), "at least 100 characters"),
        (("acceptance_max_memory_growth_pct",), above(0), "above 0 %"),
        (("acceptance_failover_drill", "twinrail_rails"), lambda drill, rails: not truthy(drill) or bool(rails),
         "rails on the master for the failover drill"),
        (("acceptance_min_single_decode_tps",), at_least(0, float), "0 or more tokens/s (0: measured, not gated)"),
        (("acceptance_min_aggregate_decode_tps",), at_least(0, float), "0 or more tokens/s (0: measured, not gated)"),
        (("acceptance_min_prefill_tps",), at_least(0, float), "0 or more tokens/s (0: measured, not gated)"),
        (("acceptance_baseline_max_drop_pct",), lambda v: above(0)(v) and _number(v) < 100,
         "a percentage above 0 and below 100"),
        (("acceptance_failover_sla",), above(0), "above 0 s"),
        (("acceptance_idle_wait",), at_least(0), "0 or more s"),
        (("acceptance_ramp_levels",), lambda v: isinstance(v, list) and len(v) > 0 and all(at_least(1)(x) for x in v),
         "a list of concurrencies of 1 or more"),
        (("acceptance_ramp_requests",), at_least(1), "at least 1"),
        (("acceptance_ramp_tokens",), at_least(1), "at least 1"),
        (("acceptance_max_ttft_p95_s",), at_least(0, float), "0 or more s (0: not gated)"),
        (("acceptance_soak_seconds", "acceptance_soak_window"), _soak,
         "0 (no soak) or at least 3 windows of acceptance_soak_window s"),
        (("acceptance_soak_concurrency",), at_least(1), "at least 1"),
        (("acceptance_soak_tokens",), at_least(1), "at least 1"),
        (("acceptance_soak_window",), at_least(1), "at least 1 s"),
        (("acceptance_soak_max_drift_pct",), above(0), "above 0 %"),
        (("acceptance_soak_max_memory_growth_pct",), above(0), "above 0 points"),
    ],
    "monitoring": [
        (("monitoring_retention_time",), matches(r"[0-9]+(ms|s|m|h|d|w|y)"), "a Prometheus duration (30d)"),
        (("monitoring_retention_size",), matches(r"[0-9]+(B|KB|MB|GB|TB|PB|EB)"), "a size (20GB)"),
        (("monitoring_scrape_interval",), matches(DURATION), "a duration (15s)"),
        (("monitoring_evaluation_interval",), matches(DURATION), "a duration (15s)"),
        (("monitoring_alert_for",), matches(ALERT_DURATION), "a duration (1m)"),
        (("monitoring_alert_queue_for",), matches(ALERT_DURATION), "a duration (5m)"),
        (("monitoring_alert_group_wait",), matches(ALERT_DURATION), "a duration (30s)"),
        (("monitoring_alert_group_interval",), matches(ALERT_DURATION), "a duration (5m)"),
        (("monitoring_alert_repeat_interval",), matches(ALERT_DURATION), "a duration (4h)"),
        (("monitoring_alert_queue_depth",), at_least(0), "0 or more"),
        (("monitoring_alert_gpu_busy_utilization",), lambda v: above(0)(v) and _number(v) <= 1, "a share above 0, up to 1"),
        (("monitoring_alert_gpu_busy_power_ratio",), lambda v: above(0)(v) and _number(v) < 1, "a share above 0, below 1"),
        (("monitoring_alert_gpu_busy_for",), matches(ALERT_DURATION), "a duration (5m)"),
        (("monitoring_alert_gpu_busy_watts",), at_least(0, float), "0 (not judged) or more W"),
        (("monitoring_alert_baseline_max_age_days",), at_least(1), "at least 1 day"),
        (("monitoring_alert_webhooks",), _list_of(matches(r"https?://.+")), "a list of http(s):// URLs"),
        (("monitoring_alert_email_to", "monitoring_alert_smarthost", "monitoring_alert_email_from"),
         lambda to, host, sender: not to or (matches(r"[^:]+:[0-9]+")(host) and bool(sender)),
         "with monitoring_alert_email_to, a smarthost host:port and a sender"),
        (("twinrail_mgmt_address",), _address_with_prefix,
         "the node's management address with its prefix (where node_exporter listens), e.g. 10.20.0.11/24"),
    ],
}


def truthy(value) -> bool:
    """A YAML, Jinja or -e boolean as Ansible reads one ('false' is false)."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "on", "1")
    return bool(value)


def _show(value) -> str:
    return "nothing (undefined)" if value is None else repr(value)


def names(stage: str) -> list[str]:
    """The settings a stage's rules read, each once, in rule order."""
    if stage not in RULES:
        raise ValueError(f"no settings rules for stage {stage!r}; the stages: {', '.join(sorted(RULES))}")
    out: list[str] = []
    for read, _check, _form in RULES[stage]:
        out.extend(name for name in read if name not in out)
    return out


def problems(stage: str, values: dict) -> list[str]:
    """One sentence per rule the values break, naming the setting (the
    first the rule reads), the form expected and what it holds; the other
    settings a rule reads are shown beside it."""
    out = []
    for read, check, form in RULES[stage]:
        got = [values.get(name) for name in read]
        try:
            good = check(*got)
        except (TypeError, ValueError):
            good = False
        if not good:
            shown = _show(got[0]) + "".join(f", {name} {_show(value)}" for name, value in zip(read[1:], got[1:]))
            out.append(f"{read[0]}: expected {form}, got {shown}")
    return out
