# -*- coding: utf-8 -*-
"""The acceptance stage's judgements: what makes an answer garbage or a
repetition loop, and the verdicts against the site's thresholds.

Pure functions (no I/O), shared by the acceptance_run module and its tests.
"""

from __future__ import annotations

import re
import unicodedata

WORD = re.compile(r"\w+", re.UNICODE)


def ngram_repetition(text: str, n: int = 3) -> float:
    """Share of the word n-grams that repeat an earlier one: 0 for text that
    never repeats itself, towards 1 for a loop ("the the the ...")."""
    words = [w.lower() for w in WORD.findall(text)]
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    return round(1.0 - len(set(grams)) / len(grams), 3)


def garbage_share(text: str) -> float:
    """Share of characters that are neither letters, digits, punctuation,
    symbols nor ordinary spacing: replacement characters, control codes,
    unassigned code points (what a broken model or tokenizer emits)."""
    if not text:
        return 0.0
    bad = 0
    for char in text:
        if char in "\n\t ":
            continue
        category = unicodedata.category(char)
        if char == "\ufffd" or category[0] == "C" or category in ("Zl", "Zp"):
            bad += 1
    return round(bad / len(text), 3)


def judge_answer(answer: str, expect: list[str], max_repetition: float, max_garbage: float) -> list[str]:
    """Why an answer fails the functional check (empty list: it passes)."""
    problems = []
    if not answer.strip():
        problems.append("empty answer")
        return problems
    repetition = ngram_repetition(answer)
    if repetition > max_repetition:
        problems.append(f"repetition loop: {repetition:.2f} of its 3-grams repeat (at most {max_repetition})")
    garbage = garbage_share(answer)
    if garbage > max_garbage:
        problems.append(f"garbage: {garbage:.2f} of its characters are not text (at most {max_garbage})")
    lowered = answer.lower()
    missing = [e for e in expect if e.lower() not in lowered]
    if missing:
        problems.append(f"does not mention {', '.join(repr(m) for m in missing)}")
    return problems


def verdicts(measured: dict, thresholds: dict) -> list[str]:
    """The performance gates: one sentence per threshold missed, naming the
    figure, what was measured and what is required."""
    failures = []
    names = {
        "single_decode_tps": "single-stream decode",
        "aggregate_decode_tps": "aggregate decode of the concurrent streams",
        "prefill_tps": "prefill",
    }
    for key, label in names.items():
        required = thresholds.get(key)
        if required is None or required <= 0:
            continue
        value = measured.get(key)
        if value is None:
            failures.append(f"{label}: not measured, {required} tokens/s required")
        elif value < required:
            failures.append(f"{label}: {value:.1f} tokens/s measured, {required} required")
    growth = measured.get("long_context_memory_growth_pct")
    limit = thresholds.get("max_memory_growth_pct")
    if growth is not None and limit is not None and growth > limit:
        failures.append(f"long context: memory grew {growth:.1f} points of the node's memory during the "
                        f"generation, at most {limit} allowed")
    return failures


# A first site sets no floors: its first passing figures become its baseline
# and later runs are held to them within a drift bound. The field reports'
# production figures (two 128 GiB workstations on 2 x 200 Gb/s, a 552B MoE
# at 2.9 bits) are the targets a site may set as floors once it reaches them.
FIGURES = {"single_decode_tps": "single-stream decode", "aggregate_decode_tps": "aggregate decode",
           "prefill_tps": "prefill"}
FLOOR_SETTINGS = {"single_decode_tps": "acceptance_min_single_decode_tps",
                  "aggregate_decode_tps": "acceptance_min_aggregate_decode_tps",
                  "prefill_tps": "acceptance_min_prefill_tps"}
FIELD_TARGETS = {"single_decode_tps": 75, "aggregate_decode_tps": 130, "prefill_tps": 2000}


def floors_set(thresholds: dict) -> bool:
    """Whether the site gates on floors of its own (any above 0)."""
    return any(float(thresholds.get(key) or 0) > 0 for key in FIGURES)


def baseline_drops(measured: dict, baseline: dict, max_drop_pct: float) -> list[str]:
    """One sentence per figure more than max_drop_pct below the site's
    baseline, naming the figure, both values and the bound."""
    failures = []
    for key, label in FIGURES.items():
        kept, value = (baseline.get("figures") or {}).get(key), measured.get(key)
        if not kept:
            continue
        if value is None:
            failures.append(f"{label}: not measured, the site's baseline is {kept:.1f} tokens/s")
            continue
        drop = 100.0 * (kept - value) / kept
        if drop > max_drop_pct:
            failures.append(f"{label}: {value:.1f} tokens/s measured, {drop:.0f} % below this site's baseline "
                            f"{kept:.1f} (run {baseline.get('run')}); at most {max_drop_pct:g} % allowed")
    return failures


def baseline_notice(figures: dict, path: str, max_drop_pct: float) -> str:
    """What a first site reads when its figures become its baseline: the
    figures, the settings that would make floors of them, the targets."""
    shown = ", ".join(f"{FIGURES[k]} {figures[k]:.1f}" for k in FIGURES if figures.get(k) is not None)
    floors = ", ".join(f"{FLOOR_SETTINGS[k]}: {round(figures[k] * 0.9, 1)}" for k in FIGURES
                       if figures.get(k) is not None)
    targets = " / ".join(str(FIELD_TARGETS[k]) for k in FIGURES)
    return (f"acceptance: no floors are set: this site's first figures ({shown} tokens/s) are kept as its baseline "
            f"in {path}; later runs fail on a drop of more than {max_drop_pct:g} %. To gate on floors instead, set "
            f"{floors} (90 % of them). The field reports' production figures, {targets} tokens/s (single, "
            f"aggregate, prefill), are the targets for two 128 GiB workstations on 2 x 200 Gb/s")
