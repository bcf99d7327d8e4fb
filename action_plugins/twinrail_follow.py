# -*- coding: utf-8 -*-
"""Follow a background (async) job to its end, showing its progress.

The work of the `twinrail_follow` task (documented in library/): poll the
job's async status every `poll` seconds on the task's host (delegate_to and
become apply as for any task), and every `interval` seconds print the
elapsed time and the last line of the job's progress file, so a long build
or transfer is seen moving. Returns the job's own result (rc, msg, ...)
with `finished`, `job_failed`, `last_line`, `elapsed` and `shown` (the
lines printed); never fails for the job (the task files decide), only when
the job cannot be read or outlives `timeout`.
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import time
from pathlib import Path

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


def _module_spec() -> dict:
    """The options as library/twinrail_follow.py states them (its documentation and its spec live there)."""
    path = Path(__file__).resolve().parents[1] / "library" / "twinrail_follow.py"
    spec = importlib.util.spec_from_file_location("_twinrail_follow_doc", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ARGUMENT_SPEC


SPEC = _module_spec()


def last_line(text: str, form: str) -> str:
    """The last non-empty line of a progress file; for "json" lines (the
    weights transfer writes {"text": ...}) its text."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1].strip()
    if form == "json":
        try:
            return str(json.loads(line).get("text", line))
        except (ValueError, AttributeError):
            return line
    return line


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(SPEC)

    def _tail(self, path: str) -> str:
        res = self._low_level_execute_command(f"tail -n 3 {shlex.quote(path)}", sudoable=True)
        return res.get("stdout", "") if res.get("rc") == 0 else ""

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _, args = self.validate_argument_spec(argument_spec=SPEC)
        async_dir = self._remote_expand_user(self.get_shell_option("async_dir", default="~/.ansible_async"))
        status_args = {"jid": args["jid"], "_async_dir": async_dir}
        host = (task_vars or {}).get("inventory_hostname", "?")
        start = time.monotonic()
        shown_at = start
        shown: list[str] = []
        line = ""
        while True:
            status = self._execute_module(module_name="ansible.legacy.async_status", module_args=status_args,
                                          task_vars=task_vars)
            finished = bool(status.get("finished"))
            now = time.monotonic()
            if finished or now - shown_at >= args["interval"]:
                if args["progress"]:
                    line = last_line(self._tail(args["progress"]), args["progress_format"])
                text = (f"{args['label']} after {int(now - start)} s: {line or 'starting'}"
                        f"{'' if finished else ' ...'}")
                # stderr, like warnings: stdout stays the callback's (the json callback's output stays JSON)
                display.display(f"{host}: {text}", stderr=True)
                shown.append(text)
                shown_at = now
            if finished:
                break
            if args["timeout"] and now - start > args["timeout"]:
                result.update(failed=True, finished=False, shown=shown, last_line=line,
                              msg=f"{args['label']}: still running after {args['timeout']} s (job {args['jid']})")
                return result
            time.sleep(args["poll"])
        job_failed = bool(status.get("failed")) or status.get("rc", 0) not in (0, None)
        for key in ("failed", "changed", "invocation"):
            status.pop(key, None)
        result.update(status)
        # failed set: Ansible reads a result without it and a non-zero rc as failed
        result.update(finished=True, job_failed=job_failed, last_line=line, elapsed=round(time.monotonic() - start, 1),
                      shown=shown, changed=False, failed=False)
        return result
