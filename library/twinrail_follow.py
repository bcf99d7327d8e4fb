#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Documentation of the twinrail_follow action (action_plugins/twinrail_follow.py does the work)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: twinrail_follow
short_description: Follow a background job to its end, printing its progress at every interval
description:
  - Polls the async status of a job started with C(async) and C(poll 0) on
    the task's host, and at every interval prints the time since it began
    following and the last line of the job's progress file (a build log, a
    transfer's progress lines), so a long build or transfer is seen moving.
  - One task in place of a task file that includes itself until the job
    ends. The work is done by the action plugin of the same name, on the
    controller; delegate_to and become apply as for any task.
  - Returns the job's own result (for example rc and msg) and never fails
    because the job failed (job_failed says so; the tasks that follow
    decide); it fails when the job outlives timeout.
version_added: "0.1.0"
author: twinrail developers
options:
  jid:
    description: The job id (the ansible_job_id a task with async and poll 0 registered).
    type: str
    required: true
  label:
    description: What the job is, first in every line printed (for example "weights lab-worker1 set attempt 1").
    type: str
    required: true
  progress:
    description: File on the host whose last line is shown at every interval (a build log, a progress file).
    type: str
  progress_format:
    description: C(json) for progress lines that are JSON objects with a C(text) key, C(text) for plain lines.
    type: str
    choices: [text, json]
    default: text
  interval:
    description: Seconds between two progress lines.
    type: int
    default: 10
  poll:
    description: Seconds between two reads of the job's status.
    type: float
    default: 2.0
  timeout:
    description: Seconds to follow before failing (0 for as long as the job's own async limit).
    type: int
    default: 0
attributes:
  check_mode:
    support: none
"""

EXAMPLES = r"""
- name: Start the build in the background
  ansible.builtin.command:
    argv: ["{{ runtime_build_root }}/0123/build.sh"]
  async: 7200
  poll: 0
  register: job

- name: Follow the build
  twinrail_follow:
    jid: "{{ job.ansible_job_id }}"
    label: build 0123
    progress: "{{ runtime_build_root }}/0123/build.log"
    interval: 30
  register: build

- name: Stop when the build failed
  ansible.builtin.fail:
    msg: "build failed (exit {{ build.rc }}): {{ build.last_line }}"
  when: build.job_failed
"""

RETURN = r"""
finished:
  description: Whether the job ended (always true unless the task failed).
  returned: always
  type: bool
job_failed:
  description: Whether the job failed (its module failed or its command exited non-zero).
  returned: always
  type: bool
rc:
  description: The job's exit code, for a command job.
  returned: when the job returns one
  type: int
last_line:
  description: The last line of the progress file when the job ended.
  returned: always
  type: str
elapsed:
  description: Seconds the action followed the job.
  returned: always
  type: float
shown:
  description: The progress lines printed, in order.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

# the one statement of the options: the action plugin validates with it too
ARGUMENT_SPEC = {
    "jid": {"type": "str", "required": True},
    "label": {"type": "str", "required": True},
    "progress": {"type": "str"},
    "progress_format": {"type": "str", "choices": ["text", "json"], "default": "text"},
    "interval": {"type": "int", "default": 10},
    "poll": {"type": "float", "default": 2.0},
    "timeout": {"type": "int", "default": 0},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC)
    module.fail_json(msg="twinrail_follow runs as an action plugin on the controller "
                         "(action_plugins/twinrail_follow.py); is action_plugins set in ansible.cfg?")


if __name__ == "__main__":
    main()
