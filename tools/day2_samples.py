#!/usr/bin/env python3
"""docs/day2.md's sample outputs: taken from the lab, and kept current.

Each sample is a fenced block in docs/day2.md between
`<!-- sample: NAME -->` and `<!-- /sample -->`. The lab pass's verifiers
run the day-2 commands (twinrail status, logs, bench, drill; stop.yml,
start.yml, rollback.yml, restore.yml, scale.yml) and hand what each printed
to `check(name, text)`:

- in `make test`, it fails when the sample no longer matches what the
  command prints: its *fields* (the lines' words and keys, each number,
  time, duration, PID and hash masked), not its figures or timestamps;
- with TWINRAIL_WRITE_SAMPLES=1 (`make day2-samples`, on a lab fresh from
  `make lab`: this script runs those verifiers so), it writes what the
  command printed into the block instead.

Each sample says how it is compared (`kind`): `lines` (every line, in
order), `json` (every key path), `prefixes` (the set
of each line's first words: journal lines differ run to run, their shape
does not), `tasks` (a short playbook's plays, tasks and recap hosts, in
order) or `plays` (a long one's plays and recap hosts: which of its tasks
run depends on what is due, so they are not shown).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAY2 = REPO / "docs" / "day2.md"
WRITE = os.environ.get("TWINRAIL_WRITE_SAMPLES") == "1"

# name -> (how it is compared, how many lines the block keeps at most)
SAMPLES = {
    "status": ("lines", 60),
    "status-json": ("json", 400),
    "logs": ("prefixes", 12),
    "bench": ("lines", 30),
    "drill": ("json", 60),
    "stop": ("tasks", 60),
    "start": ("tasks", 80),
    "rollback": ("plays", 40),
    "restore": ("plays", 60),
    "scale": ("plays", 60),
}

_BLOCK = re.compile(r"(<!-- sample: (?P<name>[a-z0-9-]+) -->\n```(?P<lang>\w*)\n)(?P<body>.*?)(```\n<!-- /sample -->)",
                    re.S)
# what a line shows only in some states, not a field: a unit's restart count
# (twinrail status prints it once a unit has restarted, e.g. after a drill)
_STATE = re.compile(r", \d+ restarts\b")
_MASKS = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?"), "<time>"),
    (re.compile(r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\w* \d\d? \w+ \d{4} \d\d:\d\d:\d\d\b"), "<time>"),
    # systemd's "Sat 2026-12-05 23:13:14 UTC": the weekday is part of the time
    (re.compile(r"\b(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) )?\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b"), "<time>"),
    (re.compile(r"\b\w{3} \d\d \d\d:\d\d:\d\d(?:\.\d+)?\b"), "<time>"),
    (re.compile(r"\b\d\d:\d\d:\d\d(?:\.\d+)?\b"), "<time>"),
    (re.compile(r"\b[0-9a-f]{12,64}\b"), "<hash>"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?(?:/\d+)?\b"), "<address>"),
    (re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"), "#"),
    (re.compile(r"\s+"), " "),
]
_ANSIBLE_NOISE = re.compile(r"^\w+ \d\d \w+ \d{4} \d\d:\d\d:\d\d [+-]\d{4} \(.*\)\s+[\d:.]+ \*+\s*$")


class SampleError(AssertionError):
    """A sample no longer matches what its command prints, or is missing."""


def mask(line: str) -> str:
    """A line's fields: its words, with every number, time, hash and
    address replaced by a placeholder (and what only some states show, gone)."""
    line = _STATE.sub("", line)
    for pattern, placeholder in _MASKS:
        line = pattern.sub(placeholder, line)
    return line.strip()


def _json_paths(value, prefix: str = "") -> set[str]:
    if isinstance(value, dict):
        out = {f"{prefix}{{}}"} if not value else set()
        for key, item in value.items():
            out |= _json_paths(item, f"{prefix}.{key}")
        return out
    if isinstance(value, list):
        out = {f"{prefix}[]"}
        for item in value:
            out |= _json_paths(item, f"{prefix}[]")
        return out
    return {prefix or "."}  # a value: its path (a figure may be null one run, a number the next)


def playbook_outline(text: str, tasks: bool = True) -> str:
    """A playbook's output as the sample keeps it: its plays, its tasks
    (each once, in order; included files' lines and the profiler's timings
    left out; none with ``tasks`` false) and its recap."""
    out, seen, recap = [], set(), False
    for line in text.splitlines():
        if _ANSIBLE_NOISE.match(line) or not line.strip():
            continue
        if line.startswith("PLAY RECAP"):
            recap = True
            out.append("PLAY RECAP")
            continue
        if recap:
            if re.match(r"^\S+\s+: ok=", line):
                out.append(re.sub(r"\s+", " ", line.strip()))
            continue
        head = re.match(r"^(PLAY|TASK|RUNNING HANDLER) \[(?P<name>.*)\]", line)
        if head and head.group(1) != "PLAY" and not tasks:
            continue
        if head and line not in seen:
            seen.add(line)
            out.append(line.rstrip("* ").rstrip())
    return "\n".join(out) + "\n"


def fields(kind: str, text: str) -> list | set:
    """What a sample and a fresh output must share."""
    if kind == "json":
        return _json_paths(json.loads(text))
    if kind == "prefixes":
        return {mask(" ".join(line.split()[:4])) for line in text.splitlines() if line.strip()}
    if kind in ("tasks", "plays"):
        raw = "PLAY [" in text and "*" * 10 in text
        lines = playbook_outline(text, kind == "tasks").splitlines() if raw else text.splitlines()
        return [mask(line) if re.match(r"^\S+ : ok=", line) else line for line in lines]
    return [mask(line) for line in text.splitlines() if line.strip()]


def blocks(text: str | None = None) -> dict:
    text = DAY2.read_text() if text is None else text
    return {m.group("name"): m.group("body") for m in _BLOCK.finditer(text)}


def shown(name: str, output: str) -> str:
    """What the block shows of a fresh output: a playbook's outline, or the
    output itself, cut to the sample's length."""
    kind, limit = SAMPLES[name]
    text = playbook_outline(output, kind == "tasks") if kind in ("tasks", "plays") else output
    lines = text.splitlines()
    if kind == "prefixes":
        lines = lines[-limit:]
    elif len(lines) > limit:
        raise SampleError(f"sample {name}: the command printed {len(lines)} lines, the sample keeps at most {limit}")
    return "\n".join(lines) + "\n"


def write(name: str, output: str) -> None:
    text = DAY2.read_text()
    found = False

    def swap(match):
        nonlocal found
        if match.group("name") != name:
            return match.group(0)
        found = True
        return match.group(1) + shown(name, output) + match.group(5)
    text = _BLOCK.sub(swap, text)
    if not found:
        raise SampleError(f"sample {name}: docs/day2.md has no block <!-- sample: {name} -->")
    DAY2.write_text(text)


def differences(name: str, output: str, sample: str) -> list[str]:
    """How a fresh output's fields differ from the sample's, in words."""
    kind, _ = SAMPLES[name]
    fresh, kept = fields(kind, shown(name, output) if kind != "json" else output), fields(kind, sample)
    if kind in ("json", "prefixes"):
        return ([f"new: {f}" for f in sorted(set(fresh) - set(kept))]
                + [f"gone: {f}" for f in sorted(set(kept) - set(fresh))])
    if fresh == kept:
        return []
    out = []
    for index in range(max(len(fresh), len(kept))):
        a = kept[index] if index < len(kept) else "(nothing)"
        b = fresh[index] if index < len(fresh) else "(nothing)"
        if a != b:
            out.append(f"line {index + 1}: the sample has {a!r}, the command printed {b!r}")
    return out


def check(name: str, output: str) -> None:
    """Compare (make test) or write (TWINRAIL_WRITE_SAMPLES=1) one sample."""
    if name not in SAMPLES:
        raise SampleError(f"no sample {name!r}; the samples: {', '.join(SAMPLES)}")
    if WRITE:
        write(name, output)
        return
    kept = blocks().get(name)
    if kept is None:
        raise SampleError(f"sample {name}: docs/day2.md has no block <!-- sample: {name} -->")
    problems = differences(name, output, kept)
    if problems:
        raise SampleError(f"docs/day2.md's sample {name!r} no longer matches what the command prints "
                          f"(make day2-samples takes it again): " + "; ".join(problems[:8]))


# The verifiers that run the day-2 commands, in the lab pass's order; each
# hands its output to check(). scale.yml's runs last (it grows the lab).
# The dashboard's screenshot comes from the monitoring verifier (TWINRAIL_SHOTS).
VERIFIERS = ["molecule/lab/tests/96_monitoring/test_monitoring.py::test_the_dashboard_draws_its_panels_in_chromium",
             "molecule/lab/tests/92_cli/test_twinrail_cli.py", "molecule/lab/tests/99_day2/test_day2.py",
             "molecule/lab/scale/test_scale_out.py"]


def main(argv: list[str] | None = None) -> int:
    """Take every sample from the lab (converged by `make lab`)."""
    del argv
    (REPO / "docs" / "images").mkdir(exist_ok=True)
    env = dict(os.environ, TWINRAIL_WRITE_SAMPLES="1", TWINRAIL_SHOTS=str(REPO / "docs" / "images"),
               MOLECULE_PROJECT_DIRECTORY=str(REPO),
               MOLECULE_SCENARIO_DIRECTORY=str(REPO / "molecule" / "lab"), ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                           "--ansible-inventory=inventory/lab", *VERIFIERS], cwd=REPO, env=env, check=False)
    missing = [name for name, body in blocks().items() if not body.strip()]
    if missing:
        print(f"day2-samples: no output taken for {', '.join(missing)}", file=sys.stderr)
        return 1
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
