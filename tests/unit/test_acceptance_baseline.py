"""A first site's acceptance without floors: the acceptance_report module
on a real report of the lab's acceptance stage
(tests/fixtures/lab/acceptance_lab_ramp_soak.json: 25.4 / 39.5 / 84.0
tokens/s) as a site with no floors would run it: the first passing run
becomes the baseline with a notice naming the figures, the floors they
would make and the field reports' targets; a later run holds; a figure
fallen past the bound fails naming it; floors set leave the baseline out."""

from __future__ import annotations

import copy
import json

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import FIXTURES

import acceptance_report

REPORT = json.loads((FIXTURES / "lab" / "acceptance_lab_ramp_soak.json").read_text())
NO_FLOORS = {"single_decode_tps": 0, "aggregate_decode_tps": 0, "prefill_tps": 0, "max_memory_growth_pct": 10}


def run(tmp_path, results, thresholds, run_id, capsys):
    context = dict(REPORT["context"], thresholds=thresholds, run=run_id)
    args = {"host": "localhost", "dest": str(tmp_path / run_id), "results": results, "context": context,
            "baseline": str(tmp_path / "acceptance-baseline.json"), "baseline_max_drop_pct": 20}
    with patch_module_args(args), pytest.raises(SystemExit):
        acceptance_report.main()
    return json.loads(capsys.readouterr().out)


def results_of(report: dict) -> dict:
    return {k: v for k, v in copy.deepcopy(report).items() if k != "context"}


def test_a_first_site_keeps_its_figures_and_is_held_to_them(tmp_path, capsys):
    first = run(tmp_path, results_of(REPORT), NO_FLOORS, "20261204T100000Z", capsys)
    assert first["baseline_failures"] == []
    baseline = json.loads((tmp_path / "acceptance-baseline.json").read_text())
    assert baseline == {"run": "20261204T100000Z",
                        "figures": {"single_decode_tps": 25.43, "aggregate_decode_tps": 39.49, "prefill_tps": 83.98}}
    assert "no floors are set: this site's first figures (single-stream decode 25.4, aggregate decode 39.5, " \
           "prefill 84.0 tokens/s) are kept as its baseline" in first["notice"]
    assert "acceptance_min_single_decode_tps: 22.9" in first["notice"] and "75 / 130 / 2000 tokens/s" in first["notice"]
    # the same figures again: the baseline holds, nothing new is kept
    again = run(tmp_path, results_of(REPORT), NO_FLOORS, "20261204T110000Z", capsys)
    assert again["baseline_failures"] == [] and again["notice"] == ""
    # the same run with its single-stream decode fallen by a third
    slower = results_of(REPORT)
    slower["performance"]["single_decode_tps"] = 16.9
    failed = run(tmp_path, slower, NO_FLOORS, "20261204T120000Z", capsys)
    assert failed["baseline_failures"] == [
        "single-stream decode: 16.9 tokens/s measured, 34 % below this site's baseline 25.4 (run 20261204T100000Z); "
        "at most 20 % allowed"]
    written = json.loads((tmp_path / "20261204T120000Z" / "acceptance.json").read_text())
    assert written["failures"] == failed["baseline_failures"]  # the report and twinrail status see it
    assert json.loads((tmp_path / "acceptance-baseline.json").read_text()) == baseline


def test_a_failed_first_run_is_no_baseline_and_floors_leave_it_out(tmp_path, capsys):
    failing = results_of(REPORT)
    failing["failures"] = ["writing: empty answer"]
    out = run(tmp_path, failing, NO_FLOORS, "20261204T100000Z", capsys)
    assert out["notice"] == "" and not (tmp_path / "acceptance-baseline.json").exists()
    floors = dict(NO_FLOORS, single_decode_tps=5, aggregate_decode_tps=5, prefill_tps=20)
    out = run(tmp_path, results_of(REPORT), floors, "20261204T110000Z", capsys)
    assert out["notice"] == "" and out["baseline_failures"] == []
    assert not (tmp_path / "acceptance-baseline.json").exists()
