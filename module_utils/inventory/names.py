# -*- coding: utf-8 -*-
"""The names a site may set: the inventory variables twinrail reads
(README's table), the stages' settings (their argument specs) and the
facts one stage hands the next. A name with twinrail's prefix or a
stage's that is none of them is a typo every stage would ignore: preflight
refuses it with the closest known name (inventory_rules.validate)."""

from __future__ import annotations

import difflib


# The inventory variables twinrail reads (README's table); with the stages'
# settings (their argument specs) and the facts the stages hand to later
# ones, every name a site may set. Anything else with these prefixes is a
# typo that would silently be ignored.
TWINRAIL_VARIABLES = (
    "twinrail_mgmt_address", "twinrail_rails", "twinrail_rail_mtu", "twinrail_rail_link_rate_gbps",
    "twinrail_rail_fabric",
    "twinrail_tcp_fallback_allowed", "twinrail_bandwidth_min_ratio", "twinrail_bandwidth_aggregate_min_gbps",
    "twinrail_bandwidth_bidir_min_gbps",
    "twinrail_memory_soft_watermark_pct", "twinrail_memory_hard_watermark_pct", "twinrail_model",
    "twinrail_weights", "twinrail_weights_root", "twinrail_runtime_root", "twinrail_lab", "twinrail_profile",
    "twinrail_site",
    # a run's switch (-e twinrail_measure=always | <stages>): the stages' measurements whatever their state
    "twinrail_measure",
    # a node's GPUs (the 8-GPU servers' and consumer pairs' profiles)
    "twinrail_gpu_count", "twinrail_gpu_mig", "twinrail_gpu_pcie_min_width", "twinrail_gpu_memory_utilization",
    # the lab's own (tools/lab.py, inventory/lab)
    "twinrail_lab_bundle_dir", "twinrail_lab_state_dir", "twinrail_lab_name", "twinrail_lab_mgmt_subnet",
    "twinrail_lab_memory_mb", "twinrail_lab_shm_mb", "twinrail_lab_publish",
)
# set by one stage for the next (set_fact), never by a site
STAGE_FACTS = ("rdma_network_active_rails", "rdma_network_check_pending")


def check_names(names_by_host: dict, settings: set, prefixes: tuple) -> list[str]:
    """Unknown names with twinrail's prefix or a stage's (``prefixes``: the
    stage registry's, module_utils/stages/catalogue.py), each once with the hosts
    that have it and the closest known name."""
    known = sorted(set(TWINRAIL_VARIABLES) | set(settings) | set(STAGE_FACTS))
    watched = ("twinrail_",) + tuple(prefixes)
    hosts_of: dict = {}
    for host in sorted(names_by_host):
        for name in names_by_host[host] or []:
            if name.startswith(watched) and name not in known:
                hosts_of.setdefault(name, []).append(host)
    errors = []
    for name in sorted(hosts_of):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
        hint = f"; did you mean {close[0]}?" if close else ""
        errors.append(
            f"{', '.join(hosts_of[name])}: {name}: expected a name twinrail reads (an inventory variable in README's "
            f"table or a stage's setting in roles/<role>/meta/argument_specs.yml), got an unknown one, which every "
            f"stage would ignore{hint}")
    return errors
