"""docs/day2.md's samples (tools/day2_samples.py): every day-2 command has
its block, taken from the lab; a fresh output matches its sample when only
figures, times, addresses and hashes differ, and does not when a field,
a play or a host does. The outputs used are the samples themselves (real
outputs of the lab's commands) and this repository's playbooks' real runs
kept in them."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import day2_samples as samples  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(scope="module")
def kept() -> dict:
    return samples.blocks()


def test_every_day2_command_has_a_sample_taken_from_the_lab(kept):
    assert set(kept) == set(samples.SAMPLES)
    assert [name for name, body in kept.items() if not body.strip()] == []
    assert kept["status"].splitlines()[0] == "HEALTH_OK"
    assert json.loads(kept["status-json"])["health"] == "HEALTH_OK"
    assert kept["stop"].startswith("PLAY [") and "PLAY RECAP" in kept["stop"]
    assert (REPO / "docs" / "images" / "twinrail-dashboard.png").stat().st_size > 10_000


def test_a_sample_matches_its_own_output_with_other_figures_and_times(kept):
    status = kept["status"]
    assert samples.differences("status", status, status) == []
    # another run: other times, figures, hashes and addresses
    other = status.translate(str.maketrans("0123456789", "9876543210"))
    assert samples.differences("status", other, status) == []
    data = json.loads(kept["status-json"])
    assert samples.differences("status-json", json.dumps(data), kept["status-json"]) == []
    # after a drill: the RPC servers' restart counts (what twinrail status printed in the lab pass)
    restarted = "\n".join(line + ", 2 restarts" if "twinrail-rpc@" in line and "active since" in line else line
                          for line in status.splitlines())
    assert restarted != status and samples.differences("status", restarted, status) == []


def test_a_changed_field_a_lost_key_or_another_play_is_named(kept):
    status = kept["status"]
    renamed = status.replace("alerts firing", "alerts raised")
    problems = samples.differences("status", renamed, status)
    assert len(problems) == 1 and "the sample has 'alerts firing: none'" in problems[0]
    with pytest.raises(samples.SampleError, match="no longer matches what the command prints"):
        samples.WRITE = False
        original = samples.blocks
        samples.blocks = lambda text=None: {"status": status}
        try:
            samples.check("status", renamed)
        finally:
            samples.blocks = original
    data = json.loads(kept["status-json"])
    del data["service"]
    gone = samples.differences("status-json", json.dumps(data), kept["status-json"])
    assert gone and all(p.startswith("gone: .service") for p in gone)
    stop = kept["stop"]
    moved = stop.replace("PLAY [", "PLAY [Renamed: ", 1)
    assert samples.differences("stop", moved, stop)[0].startswith("line 1: the sample has 'PLAY [")
    fewer = "\n".join(line for line in stop.splitlines() if not line.startswith("lab-worker1 "))
    assert any("the sample has 'lab-worker# : ok=#" in p and "(nothing)" in p
               for p in samples.differences("stop", fewer, stop))


def test_an_unknown_sample_is_refused():
    with pytest.raises(samples.SampleError, match="no sample 'satus'; the samples: status"):
        samples.check("satus", "")
