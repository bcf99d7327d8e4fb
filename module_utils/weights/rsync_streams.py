# -*- coding: utf-8 -*-
"""Parallel rsync streams for weight sets, with progress.

The files are split into streams of about equal bytes (largest first, each
to the lightest stream), streams go round-robin over the destinations (one
per rail), and every stream is one rsync process. rsync does the moving
(--partial and --append-verify, so an interrupted file continues where it
stopped and is checked whole at the end); this module only plans, starts,
watches and sums up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time

_PROGRESS = re.compile(r"^\s*([\d,]+)\s+\d+%")
_SENT = re.compile(r"^Total bytes sent:\s*([\d,]+)", re.M)
_RECEIVED = re.compile(r"^Total bytes received:\s*([\d,]+)", re.M)
_LITERAL = re.compile(r"^Literal data:\s*([\d,]+)", re.M)


def rsync_argv(rsync: str, timeout: int = 60, bwlimit: int = 0, rsh: str | None = None,
               rsync_path: str | None = None, daemon: bool = False,
               extra: list[str] | None = None) -> list[str]:
    """The rsync command every stream runs (before --files-from, source, destination)."""
    argv = [rsync, "--recursive", "--times", "--partial", "--append-verify",
            "--chmod=D0755,F0644", "--info=progress2", "--no-inc-recursive", "--stats",
            f"--timeout={timeout}"]
    if bwlimit:
        argv.append(f"--bwlimit={bwlimit}")
    if rsh:
        argv += ["--rsh", rsh]
    if rsync_path:
        argv += ["--rsync-path", rsync_path]
    if daemon:
        argv.append("--contimeout=10")
    return argv + list(extra or [])


def plan_streams(sizes: dict[str, int], streams: int) -> list[list[str]]:
    """Split files into at most `streams` lists of about equal total size."""
    streams = max(1, min(streams, len(sizes)))
    buckets: list[list[str]] = [[] for _ in range(streams)]
    loads = [0] * streams
    for rel in sorted(sizes, key=lambda r: (-sizes[r], r)):
        lightest = loads.index(min(loads))
        buckets[lightest].append(rel)
        loads[lightest] += sizes[rel]
    return [sorted(b) for b in buckets if b]


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def parse_stats(text: str) -> dict:
    """Bytes sent/received and literal data from `rsync --stats` output."""
    out = {}
    for key, pattern in (("sent", _SENT), ("received", _RECEIVED), ("literal", _LITERAL)):
        match = pattern.search(text)
        out[key] = _number(match.group(1)) if match else None
    return out


def last_progress(text: str) -> int:
    """Bytes moved so far, from the last `--info=progress2` line."""
    done = 0
    for part in re.split(r"[\r\n]", text):
        match = _PROGRESS.match(part)
        if match:
            done = _number(match.group(1))
    return done


def human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{size:.1f} TiB"


def progress_line(done: int, total: int, elapsed: float) -> dict:
    rate = done / elapsed if elapsed > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else None
    pct = 100.0 * done / total if total else 100.0
    text = (f"{human(done)} of {human(total)} ({pct:.0f} %), {human(rate)}/s, "
            + (f"ETA {int(eta)} s" if eta is not None else "ETA unknown"))
    return {"time": round(time.time(), 1), "done": done, "total": total,
            "rate_bps": round(rate), "eta_s": None if eta is None else round(eta),
            "text": text}


def run_streams(src: str, dests: list[str], sizes: dict[str, int], streams: int,
                rsync: list[str], progress_file: str | None = None,
                interval: float = 5.0, env: dict | None = None) -> dict:
    """Run the rsync streams to completion and sum them up.

    `rsync` is the command prefix (rsync and its options); each stream adds
    --files-from, the source and its destination.
    """
    plan = plan_streams(sizes, streams)
    total = sum(sizes.values())
    started = time.monotonic()
    running = []
    if progress_file:
        os.makedirs(os.path.dirname(progress_file) or ".", exist_ok=True)
        with open(progress_file, "w", encoding="utf-8"):
            pass
    with tempfile.TemporaryDirectory(prefix="twinrail-transfer-") as tmp:
        for index, files in enumerate(plan):
            dest = dests[index % len(dests)]
            listing = os.path.join(tmp, f"stream-{index}.list")
            with open(listing, "w", encoding="utf-8") as handle:
                handle.write("".join(f"{rel}\n" for rel in files))
            log = open(os.path.join(tmp, f"stream-{index}.log"), "w+", encoding="utf-8",
                       errors="replace")
            argv = rsync + [f"--files-from={listing}", src.rstrip("/") + "/", dest]
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                    env=dict(os.environ, **(env or {})))
            running.append({"index": index, "dest": dest, "files": files, "proc": proc,
                            "log": log, "bytes": sum(sizes[r] for r in files),
                            "started": time.monotonic()})
        last_report = 0.0
        while True:
            alive = [s for s in running if s["proc"].poll() is None]
            for stream in running:
                if stream["proc"].returncode is not None and "seconds" not in stream:
                    stream["seconds"] = round(time.monotonic() - stream["started"], 2)
            now = time.monotonic()
            if progress_file and (now - last_report >= interval or not alive):
                done = 0
                for stream in running:
                    stream["log"].flush()
                    with open(stream["log"].name, encoding="utf-8", errors="replace") as handle:
                        done += last_progress(handle.read())
                line = progress_line(min(done, total), total, now - started)
                line["streams_running"] = len(alive)
                with open(progress_file, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(line) + "\n")
                last_report = now
            if not alive:
                break
            time.sleep(0.5)
        results = []
        for stream in running:
            with open(stream["log"].name, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            stream["log"].close()
            stats = parse_stats(text)
            tail = [ln for ln in re.split(r"[\r\n]", text) if ln.strip()
                    and not _PROGRESS.match(ln)][-5:]
            results.append({"stream": stream["index"], "dest": stream["dest"],
                            "files": len(stream["files"]), "bytes": stream["bytes"],
                            "rc": stream["proc"].returncode, "seconds": stream["seconds"],
                            "sent": stats["sent"], "literal": stats["literal"],
                            "log_tail": tail if stream["proc"].returncode else []})
    seconds = time.monotonic() - started
    return {"streams": results, "bytes": total, "seconds": round(seconds, 2),
            "rate_bps": round(total / seconds) if seconds > 0 else 0,
            "literal": sum(s["literal"] or 0 for s in results),
            "ok": all(s["rc"] == 0 for s in results)}
