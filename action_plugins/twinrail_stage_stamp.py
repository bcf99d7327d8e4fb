# -*- coding: utf-8 -*-
"""The controller's half of twinrail_stage_stamp: the digest of a stage's inputs.

The inputs of a stage, all of which run it again when they change:
- the role's files, the modules, module utilities and plugins, the shared
  templates, the hardware profiles, the guard's and the command line's
  package (src/twinrail) and the stage's play file;
- every setting the role's argument spec (meta/argument_specs.yml, entry
  point main) names and every cluster setting (twinrail_*) its files
  mention, as each node of the play resolves it (inventory, extra vars; the
  role's defaults are among its files), and each node's groups;
- the nodes of the play, in a stable order;
- what the role passes in `extra` (facts it reads, files on the controller).

Settings the role names in `applied_every_run` are not inputs: the role
applies them on every run whatever the stamp says (the service's API keys:
one file the guard reads again by itself), so changing one re-runs only
the task that applies it, not the whole stage.

Each input is kept as a digest of its own (`parts`), so a run whose inputs
changed names which: "setting kernel_tuning_swap_off of lab-worker1", "the
stage's code"; the settings the role's spec marks `no_log` go into one
digest per node ("a secret setting of ..."), never one by one.

Then the module runs on the node with that digest. A `record` after a run
that left some of the stage's tasks out (a `--tags` of one part, or
`--skip-tags` naming the stage or one of its parts) writes nothing: the
stamp vouches for a whole stage.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import yaml
from ansible.plugins.action import ActionBase

# the same helpers the module ships to the nodes, read by path: the
# controller does not import the project's module_utils by name
_spec = importlib.util.spec_from_file_location(
    "_stage_stamp", Path(__file__).resolve().parents[1] / "module_utils" / "stage_stamp.py")
_stamp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_stamp)
digest, tree_digest = _stamp.digest, _stamp.tree_digest

REPO = Path(__file__).resolve().parents[1]
SHARED = ("library", "module_utils", "action_plugins", "filter_plugins", "lookup_plugins",
          "templates", "profiles", "src/twinrail")
UNRESOLVED = "<unresolved>"
# the cluster's own settings (group_vars/cluster) a role reads by name; the
# hardware profile's lookup reads twinrail_profile itself
GLOBAL = re.compile(r"\btwinrail_[a-z0-9_]+\b")
ALWAYS = ("twinrail_profile",)


def _main_options(role_path: str) -> dict:
    path = Path(role_path) / "meta" / "argument_specs.yml"
    specs = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return ((specs.get("argument_specs") or {}).get("main") or {}).get("options") or {}


def spec_options(role_path: str) -> list[str]:
    """The options of the role's main entry point, sorted."""
    return sorted(_main_options(role_path))


def secret_options(role_path: str) -> set[str]:
    """The options the spec marks no_log (passwords, keys, tokens): never named one by one."""
    return {name for name, spec in _main_options(role_path).items() if (spec or {}).get("no_log")}


def role_globals(role_path: str) -> list[str]:
    """The twinrail_* names the role's files (and the shared templates) mention, sorted."""
    names = set(ALWAYS)
    for root in (Path(role_path), REPO / "templates"):
        for path in root.rglob("*"):
            if path.is_file():
                names.update(GLOBAL.findall(path.read_text(encoding="utf-8", errors="replace")))
    return sorted(names)


def content_roots(role_path: str, stage: str) -> list[str]:
    roots = [str(role_path)] + [str(REPO / name) for name in SHARED if (REPO / name).is_dir()]
    play = REPO / "playbooks" / f"{stage}.yml"
    if play.is_file():
        roots.append(str(play))
    return roots


def settings_of(hostvars, hosts: list[str], options: list[str]) -> dict:
    """Each host's resolved value of each option (UNRESOLVED where it is not set or cannot be)."""
    out = {}
    for host in hosts:
        view = hostvars[host]
        values = {}
        for option in options + ["group_names"]:
            try:
                values[option] = view[option] if option in view else UNRESOLVED
            except Exception:  # pylint: disable=broad-except  (a template of another scope)
                values[option] = UNRESOLVED
        out[host] = values
    return out


def partial_run(stage: str, own_tags: list[str], run_tags, skip_tags) -> bool:
    """True when the run leaves some of the stage's tasks out."""
    run, skip = set(run_tags or ["all"]), set(skip_tags or [])
    ours = {stage, *own_tags}
    if skip & ours:
        return True
    return not ({"all", stage} & run)


def inputs_parts(stage: str, role_path: str, hostvars, hosts: list[str], extra,
                 applied_every_run: tuple = ()) -> dict:
    """The inputs, each as a digest under the name a run would give its change:
    "the stage's code", "the nodes of the play", "setting NAME of HOST" (the
    no_log ones of a host together, as "a secret setting of HOST"), "EXTRA".
    The settings in applied_every_run are left out."""
    hosts = sorted(hosts)
    parts = {"the stage's code": tree_digest(content_roots(role_path, stage)),
             "the nodes of the play": digest([stage, hosts])}
    secret = secret_options(role_path)
    options = [name for name in spec_options(role_path) + role_globals(role_path) if name not in applied_every_run]
    for host, values in settings_of(hostvars, hosts, options).items():
        hidden = {}
        for name, value in values.items():
            if name in secret:
                hidden[name] = value
            else:
                parts[f"setting {name} of {host}"] = digest(value)
        if hidden:
            parts[f"a secret setting of {host}"] = digest(hidden)
    parts.update(extra_parts(extra))
    return parts


def extra_parts(extra) -> dict:
    """The role's own values, each under its key ("extra" when not a dict)."""
    items = extra.items() if isinstance(extra, dict) else [("extra", extra)]
    return {f"{key}": digest(value) for key, value in items}


def recorded_parts(checked_parts: dict, extra) -> dict:
    """The check's parts with the role's extra values replaced by these (the
    state the run left): what the next run's check computes when nothing
    else changed."""
    return {**checked_parts, **extra_parts(extra)}


def inputs_digest(stage: str, role_path: str, hostvars, hosts: list[str], extra) -> str:
    return digest(inputs_parts(stage, role_path, hostvars, hosts, extra))


class ActionModule(ActionBase):
    """Compute the inputs digest here, then run the module on the node."""

    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        stage = args.get("stage")
        role = self._task._role
        if not stage or role is None:
            result.update(failed=True, msg="twinrail_stage_stamp: `stage` is required, and the task "
                                           "must be in a stage's role")
            return result
        own_tags = list(args.get("tags") or [])
        applied_every_run = tuple(args.pop("applied_every_run", None) or ())
        if args.get("mode", "check") == "record" and partial_run(
                stage, own_tags, task_vars.get("ansible_run_tags"), task_vars.get("ansible_skip_tags")):
            result.update(changed=False, skipped=True, current=False, recorded=False, since=None,
                          reason="a run of part of the stage: no stamp written")
            return result
        checked = args.pop("checked", None)
        if checked:  # a record: what its check computed and snapshotted the spec of
            args.update(inputs=checked["inputs"], parts=checked["parts"], state=checked["spec"])
            if "extra" in args:  # the role's own values as the run left them
                args["parts"] = recorded_parts(checked["parts"], args["extra"])
                args["inputs"] = digest(args["parts"])
        else:
            hosts = list(task_vars.get("ansible_play_hosts_all") or [task_vars.get("inventory_hostname")])
            args["parts"] = inputs_parts(stage, role._role_path, task_vars["hostvars"], hosts, args.get("extra"),
                                         applied_every_run)
            args["inputs"] = digest(args["parts"])
        args.pop("extra", None)
        result.update(self._execute_module(module_name="twinrail_stage_stamp", module_args=args,
                                           task_vars=task_vars))
        result["inputs"] = args["inputs"]
        result["parts"] = args.get("parts") or {}
        result["spec"] = args.get("state") or {}
        return result

