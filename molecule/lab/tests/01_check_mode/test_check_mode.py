"""Check mode on the converged lab: `--check --diff` with the scenario's own
tags must report changed=0 on every host (molecule's `check` action only
runs it; this asserts it). The run is the session's `check_mode_run`
(conftest.py): in the lab pass it went side by side with the no-op re-run
(tests/00_rerun); in a stage's scenario it starts here."""

from __future__ import annotations

from lab_client import changed_by_host


def test_check_diff_on_the_converged_lab_changes_nothing(check_mode_run):
    rc, out, err = check_mode_run.result()
    assert rc == 0, (out + err)[-3000:]
    recap = changed_by_host(out)
    assert {"lab-master", "lab-worker1"} <= set(recap)
    changed = {h: c for h, c in recap.items() if c}
    assert changed == {}, f"check mode would change: {changed}\n{out[-3000:]}"
