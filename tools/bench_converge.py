#!/usr/bin/env python3
"""Benchmark (not a test): how long the lab takes to converge, per stage.

On a freshly made lab it runs each stage of site.yml once (cold), then each
stage again (no-op), then the whole site again (no-op), and prints the
times, the `changed` counts of each run, and each figure as a ratio of the
baseline measured in the same run: `ansible -m ping` on every node, the
cost of reaching the hosts at all.

    make bench-converge           (tools/bench_converge.py -i inventory/lab)

With --noop it only times re-runs of the converged, serving lab (make lab
first): the whole site.yml and `--check --diff`, each three times (median),
with their changed counts, whether the bandwidth and acceptance stages
measured, and the bytes the rails carried meanwhile.

    make bench-noop               (tools/bench_converge.py --noop)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
# targets for re-runs of the converged 2-node lab in which every stage's
# tasks run, in seconds
NOOP_TARGET_S, CHECK_TARGET_S = 60, 60
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)",
                   re.M)


def stages() -> list[str]:
    site = yaml.safe_load((REPO / "site.yml").read_text())
    return [Path(entry["ansible.builtin.import_playbook"]).stem for entry in site]


def timed(argv: list[str]) -> tuple[float, int, str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                          check=False)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"bench: {' '.join(argv)} failed ({proc.returncode}):\n"
                 f"{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    changed = sum(int(m.group(3)) for m in RECAP.finditer(proc.stdout))
    return elapsed, changed, proc.stdout


def rail_bytes(inventory: str) -> int:
    """rx + tx bytes of every rail interface of every node, read over Ansible."""
    proc = subprocess.run(["ansible", "-i", inventory, "cluster", "-o", "-m", "ansible.builtin.shell", "-a",
                           "cat /sys/class/net/ens1f*/statistics/[rt]x_bytes | tr '\\n' ' '"], cwd=REPO, capture_output=True,
                          text=True, check=True)
    return sum(int(v) for line in proc.stdout.splitlines() for v in line.split("(stdout)", 1)[-1].split()
               if v.isdigit())


def noop(inventory: str) -> int:
    playbook = ["ansible-playbook", "-i", inventory, "site.yml"]
    baseline, _, _ = timed(["ansible", "-i", inventory, "cluster", "-m", "ansible.builtin.ping"])
    print(f"baseline: ansible -m ping on the cluster: {baseline:.2f} s")
    for label, argv in (("site.yml (no-op)", playbook), ("--check --diff", playbook + ["--check", "--diff"])):
        runs = []
        for _ in range(3):
            before = rail_bytes(inventory)
            elapsed, changed, out = timed(argv)
            moved = rail_bytes(inventory) - before
            measured = [stage for stage in ("bandwidth", "acceptance") if f'"msg": "{stage}: measuring' in out]
            runs.append(elapsed)
            tasks = sum(int(m.group(2)) for m in RECAP.finditer(out))
            print(f"{label:<18} {elapsed:7.1f} s  x base {elapsed / baseline:6.1f}  changed={changed}  ok={tasks}  "
                  f"measured: {', '.join(measured) or 'nothing'}  rail bytes {moved}")
        target = NOOP_TARGET_S if label.startswith("site") else CHECK_TARGET_S
        print(f"{label:<18} median {sorted(runs)[1]:.1f} s  (target: {target} s)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-i", "--inventory", default="inventory/lab")
    parser.add_argument("--keep", action="store_true",
                        help="reuse the running lab instead of making it anew")
    parser.add_argument("--noop", action="store_true",
                        help="only time re-runs of the converged lab (site.yml and --check --diff)")
    args = parser.parse_args()
    # the ansible commands of the venv this script runs from
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    if args.noop:
        return noop(args.inventory)
    lab = [sys.executable, str(REPO / "tools" / "lab.py"), "-i", args.inventory]
    if not args.keep:
        subprocess.run(lab + ["down"], check=True, capture_output=True)
    started = time.monotonic()
    subprocess.run(lab + ["up"], check=True, capture_output=True)
    lab_up = time.monotonic() - started
    # fact cache off: a cold run must not start from cached facts
    playbook = ["ansible-playbook", "-i", args.inventory, "site.yml"]
    os.environ["ANSIBLE_CACHE_PLUGIN"] = "ansible.builtin.memory"

    baseline, _, _ = timed(["ansible", "-i", args.inventory, "cluster", "-m",
                            "ansible.builtin.ping"])
    rows = []
    for stage in stages():
        cold, cold_changed, _ = timed(playbook + ["--tags", stage])
        again, again_changed, _ = timed(playbook + ["--tags", stage])
        rows.append((stage, cold, cold_changed, again, again_changed))
    site_noop, site_changed, _ = timed(playbook)

    listing = subprocess.run(["ansible", "-i", args.inventory, "cluster", "--list-hosts"],
                             capture_output=True, text=True, check=True, cwd=REPO).stdout
    nodes = len(listing.strip().splitlines()) - 1  # the first line is "hosts (N):"
    how = "on the running lab (no-op)" if args.keep else "from no container (image cached)"
    print(f"lab: {nodes} nodes, `tools/lab.py up` {how}: {lab_up:.1f} s")
    print(f"baseline: ansible -m ping on the cluster: {baseline:.2f} s")
    print(f"{'stage':<12} {'cold s':>8} {'changed':>8} {'x base':>7} "
          f"{'no-op s':>8} {'changed':>8} {'x base':>7}")
    for stage, cold, cch, again, nch in rows:
        print(f"{stage:<12} {cold:8.2f} {cch:8d} {cold / baseline:7.2f} "
              f"{again:8.2f} {nch:8d} {again / baseline:7.2f}")
    print(f"{'site (no-op)':<12} {'':8} {'':8} {'':7} {site_noop:8.2f} {site_changed:8d} "
          f"{site_noop / baseline:7.2f}")
    print(f"no-op re-run of the whole site: {site_noop:.1f} s "
          f"({'under' if site_noop <= NOOP_TARGET_S else 'OVER'} the {NOOP_TARGET_S} s target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
