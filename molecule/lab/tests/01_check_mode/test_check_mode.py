"""Check mode on the converged lab: `--check --diff` with the scenario's own
tags must report changed=0 on every host (molecule's `check` action only
runs it; this asserts it). The run is the session's `check_mode_run`
(conftest.py): in the lab pass it went side by side with the no-op re-run
(tests/00_rerun); in a stage's scenario it starts here."""

from __future__ import annotations

import re

RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def test_check_diff_on_the_converged_lab_changes_nothing(check_mode_run):
    rc, out, err = check_mode_run.result()
    assert rc == 0, (out + err)[-3000:]
    recap = {m.group(1): (int(m.group(2)), int(m.group(3)), int(m.group(4))) for m in RECAP.finditer(out)}
    assert {"lab-master", "lab-worker1"} <= set(recap)
    changed = {h: c for h, (c, _u, _f) in recap.items() if c}
    assert changed == {}, f"check mode would change: {changed}\n{out[-3000:]}"
