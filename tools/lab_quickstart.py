#!/usr/bin/env python3
"""README's quick start on the lab's fresh containers: the block of
docs/development.md marked `<!-- lab-quickstart -->`, run as written.

It is README's `twinrail init` with the lab's two containers as the boxes
(the lab's SSH key, known hosts and rail subnets), then the lab's settings
(model, weights, floors, the lab's secrets) copied beside what init wrote.
`make molecule` runs it between bringing the lab up and the lab pass, whose
check, preflight and converge then use the site it writes,
`inventory/labsite/`, with the vault init made (molecule/lab/molecule.yml).

The site and its secrets (~/.config/twinrail/labsite/) are the lab pass's
own: a run starts them afresh.

    tools/lab_quickstart.py            write inventory/labsite/ on the lab
    tools/lab_quickstart.py --print    show the block, run nothing
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from twinrail.ctl.site import config_dir

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "development.md"
MARK = "<!-- lab-quickstart -->"
SITE = "labsite"


def block(text: str) -> str:
    """The shell block after the marker."""
    if MARK not in text:
        raise SystemExit(f"lab_quickstart: {DOC}: no {MARK} block")
    after = text.split(MARK, 1)[1]
    if not after.lstrip().startswith("```sh\n"):
        raise SystemExit(f"lab_quickstart: {DOC}: {MARK} must be followed by a ```sh block")
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


def run(timeout: float = 300) -> subprocess.CompletedProcess:
    """The block, in the project's root, after removing the site a previous
    run left (inventory/labsite/ and its secrets, where `twinrail init`
    keeps them: config_dir)."""
    env = dict(os.environ)
    env.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    shutil.rmtree(REPO / "inventory" / SITE, ignore_errors=True)
    shutil.rmtree(config_dir(SITE), ignore_errors=True)
    return subprocess.run(["bash", "-euo", "pipefail", "-c", block(DOC.read_text())], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--print", action="store_true", help="show the block, run nothing")
    args = parser.parse_args(argv)
    if args.print:
        print(block(DOC.read_text()), end="")
        return 0
    proc = run()
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode:
        print(f"lab_quickstart: the quick start failed (exit {proc.returncode})", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
