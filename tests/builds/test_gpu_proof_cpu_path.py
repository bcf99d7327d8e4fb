"""make gpu-proof's CPU path end to end (tools/gpu_proof.py run --cpu): a
static build of llama.cpp, about seven minutes on two cores from nothing,
so it runs in `make test-builds` (and every `make gpu-proof` on a machine
without a GPU runs the same path), not in `make test`: the proof's other
parts (the preparation that fits one call, the dry run, its readers on the
proof's real captures) are tests/unit/test_gpu_proof.py's."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "tools"))
import gpu_proof  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(name="prepared")
def fixture_prepared(gpu_proof_prepared):
    return gpu_proof_prepared


def test_the_cpu_path_builds_benches_serves_and_passes_the_gates(prepared, tmp_path):
    """make gpu-proof's CPU path, end to end, as it runs where no GPU is:
    the stage's build script on the trimmed source (fully static), llama-bench
    without and with offload, ggml-rpc-server and llama-server --rpc on
    loopback with the plan's split and one completion, then the gates on
    what they printed. About five minutes on two cores."""
    out, _ = prepared
    code = gpu_proof.main(["run", "--dir", str(out), "--out", str(tmp_path), "--cpu"])
    report = json.loads((tmp_path / "gpu-proof.json").read_text())
    assert code == 0, (tmp_path / "gpu-proof.md").read_text()
    assert report["variant"] == "cpu" and report["link"]["allowlist"] == []
    assert report["link"]["passed"] and all(b["static"] for b in report["link"]["binaries"])
    for run in report["bench"].values():
        assert run["pp"]["tokens_per_s"] > 0 and run["tg"]["tokens_per_s"] > 0 and run["tg"]["tokens"] == 64
    assert report["rpc"]["completion"]["tokens"] > 0 and report["rpc"]["completion"]["decode_tokens_per_s"] > 0
    assert report["rpc"]["split"]["problems"] == [] and report["rpc"]["transport"]["problems"] == []
    assert set(report["rpc"]["split"]["nodes"]) == {"master", "worker"}
    assert (tmp_path / "captures" / "rpc-server.log").read_text().startswith("Starting RPC server")
    assert "| tensor_split_gate | passed |" in (tmp_path / "gpu-proof.md").read_text()
