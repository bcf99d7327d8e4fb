#!/usr/bin/env python3
"""Benchmark (not a test): the weights stage's hashing and transfers.

Prints figures, each as a ratio against a baseline measured in the same run:

  1. verification throughput: the weights_sums module hashing in parallel
     threads vs `sha256sum` run sequentially on the same files (the lab's
     bundle: both models and the synthetic sharded set), page cache warm;
  2. cached re-verification vs a full one (same files);
  3. master to worker: the weights_transfer streams (4 rsync streams to the
     worker's rsync daemons on both rails) vs one `rsync -e ssh` stream over
     one rail; and one daemon stream over one rail, to tell the cipher's
     cost from the parallelism's gain.

Parts 1-2 run on the controller; part 3 needs the lab up with the weights
stage converged (the synthetic set on the master), and leaves the nodes as
it found them.

    make bench-weights        (tools/bench_weights.py)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.stages import catalogue as stages
from ansible.module_utils.weights.rsync_streams import parse_stats, plan_streams, rsync_argv
from ansible.module_utils.weights.sums import parse_sha256sums, verify

REPO = Path(__file__).resolve().parent.parent

BUNDLE = Path.home() / ".cache" / "twinrail" / "bundle" / "models"
SETS = ("smollm2-135m-instruct", "gemma3-270m-q4-k-m", "synthetic-shards")
MASTER, WORKER = "twinrail-lab-master", "twinrail-lab-worker1"
SYNTHETIC = "/srv/twinrail/models/synthetic-shards/seed-20261129"
PORT = stages.role_default(Path(__file__).resolve().parent.parent, "weights_sync_rsync_port")
AUTHORIZED = "/home/twinrail/.ssh/authorized_keys"


def median_time(action, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.monotonic()
        action()
        times.append(time.monotonic() - started)
    return statistics.median(times)


def hashing(runs: int, names: tuple[str, ...]) -> None:
    sets = {name: parse_sha256sums((BUNDLE / name / "SHA256SUMS").read_text()) for name in names}
    paths = [str(BUNDLE / name / rel) for name, manifest in sets.items() for rel in manifest]
    total = sum(os.path.getsize(p) for p in paths)
    for path in paths:  # warm the page cache: both sides read from memory
        with open(path, "rb") as handle:
            while handle.read(8 << 20):
                pass
    caches = {}

    def parallel():
        for name, manifest in sets.items():
            result = verify(str(BUNDLE / name), manifest, force=True)
            assert result["ok"], result["bad"]
            caches[name] = result["cache"]

    def one_thread():
        for name, manifest in sets.items():
            assert verify(str(BUNDLE / name), manifest, force=True, workers=1)["ok"]

    def sequential():
        subprocess.run(["sha256sum", *paths], check=True, stdout=subprocess.DEVNULL)

    def cached():
        for name, manifest in sets.items():
            assert verify(str(BUNDLE / name), manifest, cache=caches[name])["hashed"] == []

    base = median_time(sequential, runs)
    single = median_time(one_thread, runs)
    ours = median_time(parallel, runs)
    again = median_time(cached, runs)
    mib = total / (1 << 20)
    print(f"{', '.join(names)}: {len(paths)} files ({mib:.0f} MiB) on {os.cpu_count()} CPUs, "
          f"median of {runs}")
    print(f"  sha256sum, sequential        {base:7.3f} s  {mib / base:7.0f} MiB/s  (baseline)")
    print(f"  weights_sums, 1 thread        {single:7.3f} s  {mib / single:7.0f} MiB/s  "
          f"{base / single:6.2f}x")
    print(f"  weights_sums, {os.cpu_count()} threads     {ours:7.3f} s  {mib / ours:7.0f} MiB/s  "
          f"{base / ours:6.2f}x  ({single / ours:.2f}x from the threads)")
    print(f"  re-verification from cache   {again:7.4f} s  "
          f"{'':>13}  {ours / again:6.0f}x faster than a full one")


def sh(container: str, script: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", "exec", container, "bash", "-c", script], capture_output=True,
                          text=True, check=False)
    if check and proc.returncode:
        sys.exit(f"bench: {container}: {script[:200]}: exit {proc.returncode}: {proc.stderr[-1500:]}")
    return proc.stdout


def transfers(runs: int) -> None:
    sizes_out = sh(MASTER, f"cd {SYNTHETIC} && find . -type f ! -name '.twinrail*' -printf '%P %s\\n'")
    sizes = {line.split()[0]: int(line.split()[1]) for line in sizes_out.splitlines()}
    if len(sizes) < 10:
        sys.exit(f"bench: {MASTER}:{SYNTHETIC} holds {len(sizes)} files: converge the weights stage "
                 f"with molecule/lab/vars/weights-sets.yml first")
    total = sum(sizes.values())
    sh(MASTER, f"cat {SYNTHETIC}/*/* > /dev/null")
    rail = {r: sh(WORKER, f"ip -4 -o addr show dev {i} | awk '{{print $4}}' | cut -d/ -f1").strip()
            for r, i in (("rail0", "ens1f0np0"), ("rail1", "ens1f1np1"))}
    master_rail0 = sh(MASTER, "ip -4 -o addr show dev ens1f0np0 | awk '{print $4}' | cut -d/ -f1").strip()
    if not all(rail.values()) or not master_rail0:
        sys.exit("bench: the rails have no address: converge the rdma stage first")
    secret = os.urandom(16).hex()
    key = "/root/.ssh/twinrail-bench"
    # the master's streams: the same rsync command as the weights_transfer module
    sh(MASTER, f"mkdir -p /var/tmp/twinrail-bench && cd /var/tmp/twinrail-bench && rm -f *.list")
    for index, files in enumerate(plan_streams(sizes, 4)):
        listing = "\n".join(files) + "\n"
        subprocess.run(["docker", "exec", "-i", MASTER, "dd", f"of=/var/tmp/twinrail-bench/{index}.list",
                        "status=none"], input=listing.encode(), check=True)
    subprocess.run(["docker", "exec", "-i", MASTER, "dd", "of=/var/tmp/twinrail-bench/all.list",
                    "status=none"], input=("\n".join(sorted(sizes)) + "\n").encode(), check=True)
    base_argv = " ".join(a for a in rsync_argv("rsync")[1:] if a != "--info=progress2")
    try:
        # one ssh stream over rail0, as the operator account (root may not log in):
        # a key of the bench's own, allowed from the master's rail0 address only
        sh(MASTER, f"rm -f {key} {key}.pub && ssh-keygen -q -t ed25519 -N '' -f {key}")
        pub = sh(MASTER, f"cat {key}.pub").strip()
        sh(WORKER, f"install -d -m 700 -o twinrail -g twinrail /home/twinrail/.ssh && "
                   f"echo 'from=\"{master_rail0}\" {pub} twinrail-bench' >> {AUTHORIZED} && "
                   f"chown twinrail:twinrail {AUTHORIZED} && chmod 600 {AUTHORIZED}")
        sh(WORKER, f"echo 'twinrail-weights:{secret}' > /etc/twinrail/weights-rsyncd.secrets && "
                   f"chmod 600 /etc/twinrail/weights-rsyncd.secrets && "
                   f"systemctl start twinrail-weights-rsyncd@{rail['rail0']} twinrail-weights-rsyncd@{rail['rail1']}")
        time.sleep(1)
        dest = "/srv/twinrail/models/.twinrail-bench"
        clean = f"rm -rf {dest} && mkdir -p {dest}"
        ssh = (f"ssh -i {key} -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no "
               f"-o LogLevel=ERROR")
        cases = {
            "rsync -e ssh, 1 stream, rail0": [
                f"rsync {base_argv} -e '{ssh}' --files-from=/var/tmp/twinrail-bench/all.list "
                f"--rsync-path='sudo rsync' {SYNTHETIC}/ twinrail@{rail['rail0']}:{dest}/"],
            "rsync daemon, 1 stream, rail0": [
                f"rsync {base_argv} --files-from=/var/tmp/twinrail-bench/all.list {SYNTHETIC}/ "
                f"rsync://twinrail-weights@{rail['rail0']}:{PORT}/weights/.twinrail-bench/"],
            "weights_transfer, 4 streams, rail0+rail1": [
                f"rsync {base_argv} --files-from=/var/tmp/twinrail-bench/{i}.list {SYNTHETIC}/ "
                f"rsync://twinrail-weights@{rail['rail0' if i % 2 == 0 else 'rail1']}:{PORT}"
                f"/weights/.twinrail-bench/" for i in range(4)],
        }
        figures = {}
        for name, commands in cases.items():
            def once(commands=commands):
                sh(WORKER, clean)
                script = " & ".join(f"RSYNC_PASSWORD={secret} {c} > /var/tmp/twinrail-bench/out.$$.{i} "
                                    for i, c in enumerate(commands)) + " & wait"
                # each stream's exit code is checked through its stats
                out = sh(MASTER, f"{script}; cat /var/tmp/twinrail-bench/out.*; "
                                 f"rm -f /var/tmp/twinrail-bench/out.*")
                literal = sum(v or 0 for v in [parse_stats(part)["literal"] for part in
                                               out.split("Number of files:")[1:]])
                if literal < total:
                    sys.exit(f"bench: {name}: moved {literal} bytes of {total}: {out[-1500:]}")
            figures[name] = median_time(once, runs)
        mib = total / (1 << 20)
        print(f"master -> worker: {len(sizes)} files ({mib:.0f} MiB), median of {runs}")
        baseline = figures["rsync -e ssh, 1 stream, rail0"]
        for name, seconds in figures.items():
            ratio = "(baseline)" if seconds == baseline else f"{baseline / seconds:6.2f}x"
            print(f"  {name:42s} {seconds:7.2f} s  {mib / seconds:6.0f} MiB/s  {ratio}")
    finally:
        sh(WORKER, f"systemctl stop 'twinrail-weights-rsyncd@*'; rm -f /etc/twinrail/weights-rsyncd.secrets; "
                   f"rm -rf /srv/twinrail/models/.twinrail-bench; "
                   f"sed -i '/ twinrail-bench$/d' {AUTHORIZED}", check=False)
        sh(MASTER, f"rm -rf {key} {key}.pub /var/tmp/twinrail-bench", check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-transfer", action="store_true", help="hashing figures only")
    args = parser.parse_args()
    if not shutil.which("sha256sum"):
        sys.exit("bench: sha256sum (coreutils) is missing")
    # every lab set (two single-file models: a file is hashed by one thread),
    # then the sharded set alone (many files: the threads share them)
    hashing(args.runs, SETS)
    hashing(args.runs, ("synthetic-shards",))
    if not args.skip_transfer:
        transfers(args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
