"""rsync streams for weight sets: the plan, the parsers (on output rsync
prints here, not typed in), and real local transfers: parallel streams,
progress lines, and a transfer killed midway that continues."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from ansible.module_utils.weights.sums import sha256_file
from ansible.module_utils.weights.rsync_streams import (last_progress, parse_stats, plan_streams, progress_line, rsync_argv,
                           run_streams)

RSYNC = shutil.which("rsync")
needs_rsync = pytest.mark.skipif(RSYNC is None, reason="rsync is not installed (tools/prereqs.sh)")
# what the weights_transfer module runs, minus the rsync path
OPTS = rsync_argv("rsync")[1:]


def test_streams_are_balanced_by_bytes():
    sizes = {"a": 100, "b": 60, "c": 50, "d": 40, "e": 10}
    plan = plan_streams(sizes, 2)
    loads = sorted(sum(sizes[f] for f in stream) for stream in plan)
    assert loads == [120, 140] and sorted(sum(plan, [])) == sorted(sizes)
    # never more streams than files, never an empty one
    assert len(plan_streams({"only": 5}, 8)) == 1
    assert plan_streams(sizes, 0) == [sorted(sizes)]


def test_progress_line_has_rate_and_eta():
    line = progress_line(50 << 20, 200 << 20, 5.0)
    assert line["rate_bps"] == 10 << 20 and line["eta_s"] == 15
    assert line["text"] == "50.0 MiB of 200.0 MiB (25 %), 10.0 MiB/s, ETA 15 s"
    assert progress_line(0, 10, 0.0)["text"].endswith("ETA unknown")


@pytest.fixture(name="tree")
def fixture_tree(tmp_path):
    src = tmp_path / "src"
    sizes = {}
    for index in range(6):
        rel = f"layers-{index % 2}/shard-{index}.bin"
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(os.urandom((index + 1) << 18))
        sizes[rel] = (index + 1) << 18
    return src, sizes


@needs_rsync
def test_parsers_read_what_rsync_prints(tree, tmp_path):
    src, sizes = tree
    dest = tmp_path / "dest"
    run = subprocess.run([RSYNC, *OPTS, f"{src}/", f"{dest}/"], capture_output=True, text=True,
                         check=True)
    stats = parse_stats(run.stdout)
    assert stats["literal"] == sum(sizes.values())
    assert stats["sent"] > stats["literal"] and stats["received"] > 0
    assert last_progress(run.stdout) == sum(sizes.values())
    assert parse_stats("no stats here") == {"sent": None, "received": None, "literal": None}


@needs_rsync
def test_parallel_streams_over_two_destinations(tree, tmp_path):
    src, sizes = tree
    rails = [tmp_path / "rail0", tmp_path / "rail1"]
    progress = tmp_path / "progress" / "p.jsonl"
    result = run_streams(str(src), [f"{r}/" for r in rails], sizes, 4, [RSYNC, *OPTS],
                         progress_file=str(progress), interval=0.1)
    assert result["ok"] and result["bytes"] == sum(sizes.values())
    assert [s["dest"] for s in result["streams"]] == [f"{rails[0]}/", f"{rails[1]}/"] * 2
    assert result["literal"] == sum(sizes.values())
    arrived = {}
    for rail in rails:
        for dirpath, _dirs, names in os.walk(rail):
            for name in names:
                path = os.path.join(dirpath, name)
                arrived[os.path.relpath(path, rail)] = sha256_file(path)
    assert arrived == {rel: sha256_file(str(src / rel)) for rel in sizes}
    lines = [json.loads(line) for line in progress.read_text().splitlines()]
    assert lines[-1]["done"] == lines[-1]["total"] == sum(sizes.values())
    assert lines[-1]["streams_running"] == 0


@needs_rsync
def test_a_failed_stream_is_reported_with_its_destination(tree, tmp_path):
    src, sizes = tree
    result = run_streams(str(src), [f"{tmp_path}/ok/", "/proc/1/no-such-dir/x/"], sizes, 2,
                         [RSYNC, *OPTS])
    assert not result["ok"]
    failed = [s for s in result["streams"] if s["rc"] != 0]
    assert [s["dest"] for s in failed] == ["/proc/1/no-such-dir/x/"] and failed[0]["log_tail"]


@needs_rsync
def test_a_transfer_killed_midway_continues_where_it_stopped(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    data = os.urandom(8 << 20)
    (src / "big.gguf").write_bytes(data)
    sizes = {"big.gguf": len(data)}
    slow = [RSYNC, *OPTS, "--bwlimit=2048"]  # 2 MiB/s: about 4 s for the file
    transfer = f"rsync.*{dest}"  # the rsync processes of this transfer (pkill, pgrep)

    def kill_when_half_there():
        partial = dest / "big.gguf"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if partial.exists() and partial.stat().st_size >= len(data) // 4:
                subprocess.run(["pkill", "-f", transfer], check=False)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_when_half_there)
    killer.start()
    first = run_streams(str(src), [f"{dest}/"], sizes, 1, slow)
    killer.join()
    assert not first["ok"]
    # the killed receiver may still be writing its last block after the
    # parent rsync has been reaped: read what it kept once none is left
    deadline = time.monotonic() + 10
    while subprocess.run(["pgrep", "-f", transfer], capture_output=True, check=False).returncode == 0:
        assert time.monotonic() < deadline, "a killed rsync is still running after 10 s"
        time.sleep(0.05)
    kept = (dest / "big.gguf").stat().st_size
    assert 0 < kept < len(data)  # --partial kept what had arrived
    second = run_streams(str(src), [f"{dest}/"], sizes, 1, [RSYNC, *OPTS])
    assert second["ok"] and (dest / "big.gguf").read_bytes() == data
    # only the rest was sent again
    assert second["literal"] == len(data) - kept
