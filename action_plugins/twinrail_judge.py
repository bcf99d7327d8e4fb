# -*- coding: utf-8 -*-
"""Run a judge module's judgement in the controller's own process.

Not a task of its own: the base of the action plugins named after judge
modules (action_plugins/gpu_gate.py and its like are
`ActionModule = action_loader.get("twinrail_judge", class_only=True)`).
A judge only weighs its arguments (module_utils/modules/judge.py), so running it
here gives the same answer as the module, which stays the documentation
and what runs when the module is called anywhere else; what it saves is
the module's build, transfer and Python start, about half a second a task
on the lab (docs/benchmarks.md).

The arguments go through JSON first, as they would on their way to a
module (plain str, int, list and dict: no templating's tagged types, which
would show in a message as `_AnsibleTaggedStr`), then are checked against
the module's own ARGUMENT_SPEC, with the module's types, defaults and
errors; warnings come back as warnings.
"""

from __future__ import annotations

import importlib.util
import json
import sys

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import module_loader

import twinrail.loader  # noqa: F401  pylint: disable=unused-import  (module_utils/ joins ansible.module_utils)


def judge_module(name: str):
    """The library module `name`, imported here with its module_utils as the node would see them."""
    key = f"_twinrail_judge_{name}"
    if key not in sys.modules:
        path = module_loader.find_plugin(name)
        if not path:
            raise AnsibleActionFail(f"twinrail_judge: no module named {name} in the library path")
        spec = importlib.util.spec_from_file_location(key, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not (hasattr(module, "ARGUMENT_SPEC") and hasattr(module, "judge")):
            raise AnsibleActionFail(f"twinrail_judge: {path} is not a judge module (ARGUMENT_SPEC and judge)")
        sys.modules[key] = module
    return sys.modules[key]


class ActionModule(ActionBase):
    """The judgement of the module the task names, without starting it on a host."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        name = self._task.action.rsplit(".", 1)[-1]
        if name == "twinrail_judge":
            raise AnsibleActionFail("twinrail_judge is the base of the judge modules' actions: "
                                    "name the module (gpu_gate, profile_gate, ...) instead")
        module = judge_module(name)
        validation = ArgumentSpecValidator(module.ARGUMENT_SPEC).validate(json.loads(json.dumps(self._task.args)))
        if validation.error_messages:
            unsupported = isinstance(validation.errors[0], UnsupportedError)
            raise AnsibleActionFail(("Unsupported parameters for ({0}) module: {1}" if unsupported else "{1}")
                                    .format(name, validation.errors.msg))
        params = validation.validated_parameters
        warnings: list[str] = []
        result.update(module.judge(params, warnings.append))
        result.setdefault("changed", False)
        if warnings:
            result["warnings"] = result.get("warnings", []) + warnings
        return result
