# -*- coding: utf-8 -*-
"""What a generated token costs in energy, from the acceptance soak: the
GPUs' mean power while it ran (the sum over every node's GPUs of the
monitoring stage's twinrail_gpu_power_watts, sampled from Prometheus)
times its length, over the tokens it generated; and at an electricity
price per kWh the cost of a million tokens. The GPUs' draw only (not the
CPUs', NICs' and fans'). Unknown, with the reason, where no power was
read (the lab's CPU nodes, a GPU that reports none, no monitoring): never
a zero. Pure functions, unit-tested."""

from __future__ import annotations

import statistics

JOULES_PER_KWH = 3.6e6


def energy(power_w: list, tokens: int, seconds: float, price_per_kwh: float = 0.0) -> dict:
    """joules_per_token, cost_per_million_tokens (None without a price) and
    the mean power over the samples read (None ones are not read); unknown
    says why a figure is missing."""
    read = [p for p in power_w if p is not None]
    out = {"power_w": None, "samples": len(read), "seconds": round(seconds, 1), "tokens": tokens,
           "joules_per_token": None, "price_per_kwh": price_per_kwh or None, "cost_per_million_tokens": None,
           "unknown": None}
    if not read:
        out["unknown"] = ("no GPU power was read during the soak (no twinrail_gpu_power_watts in Prometheus: "
                          "no GPU telemetry on these nodes, or a GPU that reports no power)")
        return out
    out["power_w"] = round(statistics.fmean(read), 2)
    if not tokens or seconds <= 0:
        out["unknown"] = "the soak generated no token"
        return out
    joules = statistics.fmean(read) * seconds / tokens
    out["joules_per_token"] = round(joules, 3)
    if price_per_kwh:
        out["cost_per_million_tokens"] = round(joules * 1e6 / JOULES_PER_KWH * price_per_kwh, 4)
    return out


def sentence(figures: dict | None) -> str:
    """The report's line."""
    if not figures:
        return "energy per token: unknown (no soak was run)"
    if figures["joules_per_token"] is None:
        return f"energy per token: unknown: {figures['unknown']}"
    cost = (f"; {figures['cost_per_million_tokens']} per million tokens at {figures['price_per_kwh']} per kWh"
            if figures["cost_per_million_tokens"] is not None else "; no electricity price set, no cost")
    return (f"energy per token: {figures['joules_per_token']} J (the GPUs' mean {figures['power_w']} W over "
            f"{figures['seconds']:g} s, {figures['tokens']} tokens){cost}")
