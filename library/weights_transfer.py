#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Send a list of weight files in parallel rsync streams over several paths."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: weights_transfer
short_description: Send weight files in parallel rsync streams, spread over destinations
description:
  - Splits the files into streams of about equal bytes and runs one rsync
    per stream, round-robin over the destinations (one per rail), so big
    sets use every rail and every core.
  - rsync runs with --partial and --append-verify, so a transfer cut midway
    continues where it stopped on the next run, and each file is checked
    whole when it ends (the weights_manifest module verifies it again).
  - Appends a progress line (bytes done, rate, ETA) to progress_file at
    every interval, for the play to show while it waits.
  - Fails naming the host, the stream's destination, its exit code and the
    last lines rsync printed.
version_added: "0.1.0"
author: twinrail developers
extends_documentation_fragment:
  - twinrail_host
options:
  src:
    description: Directory the relative paths start from.
    type: path
    required: true
  files:
    description: Relative path to size in bytes, for every file to send.
    type: dict
    required: true
  dests:
    description: rsync destinations (rsync daemon URLs, host:path or local paths), one per path to use.
    type: list
    elements: str
    required: true
  streams:
    description: How many rsync processes at once; at least one per destination is sensible.
    type: int
    default: 4
  password:
    description: Password for an rsync daemon (passed in the environment, never on the command line).
    type: str
  rsh:
    description: Remote shell command for host:path destinations (rsync -e).
    type: str
  rsync_path:
    description: The rsync command on the remote side, for example "sudo rsync".
    type: str
  bwlimit:
    description: Limit per stream, in KiB/s (0 for none).
    type: int
    default: 0
  timeout:
    description: Seconds without any data before a stream gives up.
    type: int
    default: 60
  extra_opts:
    description: More rsync options.
    type: list
    elements: str
    default: []
  progress_file:
    description: File that progress lines (JSON) are appended to.
    type: path
  interval:
    description: Seconds between progress lines.
    type: float
    default: 5
"""

EXAMPLES = r"""
- name: Send the worker's missing files over both rails
  weights_transfer:
    src: /srv/twinrail/models/smollm2/q4_1
    files: {"SmolLM2-135M-Instruct.Q4_1.gguf": 98362432}
    dests:
      - "rsync://twinrail-weights@198.19.0.11:{{ weights_sync_rsync_port }}/weights/smollm2/.twinrail-staging/q4_1/"
      - "rsync://twinrail-weights@198.19.1.11:{{ weights_sync_rsync_port }}/weights/smollm2/.twinrail-staging/q4_1/"
    streams: 4
    password: "{{ secret }}"
    host: "{{ inventory_hostname }}"
  no_log: true
"""

RETURN = r"""
streams:
  description: Per stream, its destination, files, bytes, exit code, seconds, bytes sent and literal data.
  returned: always
  type: list
  elements: dict
bytes:
  description: Size of the files sent.
  returned: always
  type: int
literal:
  description: File data rsync actually moved (less than bytes when a partial file continued).
  returned: always
  type: int
seconds:
  description: Wall time of the whole transfer.
  returned: always
  type: float
rate_bps:
  description: bytes / seconds.
  returned: always
  type: int
"""

import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.weights.rsync_streams import plan_streams, rsync_argv, run_streams


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "files": {"type": "dict", "required": True},
            "dests": {"type": "list", "elements": "str", "required": True},
            "streams": {"type": "int", "default": 4},
            "password": {"type": "str", "no_log": True},
            "rsh": {"type": "str"},
            "rsync_path": {"type": "str"},
            "bwlimit": {"type": "int", "default": 0},
            "timeout": {"type": "int", "default": 60},
            "extra_opts": {"type": "list", "elements": "str", "default": []},
            "progress_file": {"type": "path"},
            "interval": {"type": "float", "default": 5},
            "host": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    sizes = {rel: int(size) for rel, size in params["files"].items()}
    if not params["dests"]:
        module.fail_json(msg=f"weights: {params['host']}: no destination to send to")
    if params["streams"] < 1:
        module.fail_json(msg=f"weights: {params['host']}: streams must be 1 or more, "
                             f"got {params['streams']}")
    if not sizes:
        module.exit_json(changed=False, streams=[], bytes=0, literal=0, seconds=0.0, rate_bps=0)
    if module.check_mode:
        plan = plan_streams(sizes, params["streams"])
        module.exit_json(changed=True, bytes=sum(sizes.values()), literal=0, seconds=0.0,
                         rate_bps=0, streams=[{"stream": i, "dest": params["dests"][i % len(params["dests"])],
                                               "files": len(f)} for i, f in enumerate(plan)])
    rsync = shutil.which("rsync")
    if not rsync:
        module.fail_json(msg=f"weights: {params['host']}: rsync is not installed")
    argv = rsync_argv(rsync, timeout=params["timeout"], bwlimit=params["bwlimit"],
                      rsh=params["rsh"], rsync_path=params["rsync_path"],
                      daemon=any(d.startswith("rsync://") for d in params["dests"]),
                      extra=params["extra_opts"])
    env = {"RSYNC_PASSWORD": params["password"]} if params["password"] else {}
    result = run_streams(params["src"], params["dests"], sizes, params["streams"], argv,
                         progress_file=params["progress_file"], interval=params["interval"],
                         env=env)
    if not result["ok"]:
        failed = [f"stream {s['stream']} to {s['dest']} exit {s['rc']}: {' | '.join(s['log_tail'])}"
                  for s in result["streams"] if s["rc"] != 0]
        module.fail_json(msg=f"weights: {params['host']}: transfer failed: " + "; ".join(failed),
                         changed=True, **{k: v for k, v in result.items() if k != "ok"})
    module.exit_json(changed=True, **{k: v for k, v in result.items() if k != "ok"})


if __name__ == "__main__":
    main()
