"""The stages' stamps: the snapshot of what a stage manages, what moved since
the stamp, the verdict, the controller's inputs digest, and the module's
check -> record -> check cycle on real files."""

from __future__ import annotations

import importlib.util
import json
import os
import time

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from conftest import FIXTURES, REPO

import stage_stamp

# by path: the action plugin of the same name may be on sys.path too
_mod = importlib.util.spec_from_file_location("stamp_module", REPO / "library" / "twinrail_stage_stamp.py")
twinrail_stage_stamp = importlib.util.module_from_spec(_mod)
_mod.loader.exec_module(twinrail_stage_stamp)

_spec = importlib.util.spec_from_file_location("stamp_action", REPO / "action_plugins" / "twinrail_stage_stamp.py")
action = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(action)

SHOW = (FIXTURES / "lab" / "systemctl_show_stamp_units_lab_master.txt").read_text()
UNITS = ["nginx.service", "prometheus.service", "swap.target", "unattended-upgrades.service"]


def fake_systemctl(argv):
    assert argv[:2] == ["systemctl", "show"] and argv[-4:] == UNITS
    return 0, SHOW, ""


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "a.conf").write_text("a = 1\n")
    (tmp_path / "etc" / "b.conf").write_text("b = 2\n")
    (tmp_path / "share").mkdir()
    (tmp_path / "share" / "index.html").write_text("<p>hi</p>\n")
    os.symlink("etc/a.conf", tmp_path / "current")
    return tmp_path


def spec_of(tree):
    return {"files": [str(tree / "etc" / "*.conf"), str(tree / "share"), str(tree / "current"),
                      str(tree / "absent.conf")],
            "sysctls": ["net.ipv4.ip_forward"], "units": UNITS}


def test_the_units_are_read_in_the_order_asked_from_a_real_systemctl_show():
    units = stage_stamp.parse_systemctl_show(SHOW, UNITS)
    assert units["nginx.service"] == {"LoadState": "loaded", "ActiveState": "active", "UnitFileState": "enabled"}
    assert units["swap.target"]["UnitFileState"] == "static"
    assert units["unattended-upgrades.service"] == {"LoadState": "not-found", "ActiveState": "inactive",
                                                    "UnitFileState": ""}


def test_a_snapshot_names_every_file_link_sysctl_and_unit(tree):
    state = stage_stamp.snapshot(spec_of(tree), run_command=fake_systemctl)
    files = state["files"]
    assert sorted(files) == sorted(str(tree / p) for p in (
        "etc/a.conf", "etc/b.conf", "share", "share/index.html", "current", "absent.conf"))
    assert files[str(tree / "absent.conf")] is None
    assert files[str(tree / "current")] == {"link": "etc/a.conf"}
    assert files[str(tree / "share")]["dir"] is True
    assert len(files[str(tree / "etc" / "a.conf")]["sha256"]) == 64
    assert state["sysctls"]["net.ipv4.ip_forward"] in {"0", "1"}
    assert state["units"]["prometheus.service"]["ActiveState"] == "active"


def test_units_without_a_way_to_run_systemctl_are_an_error(tree):
    with pytest.raises(ValueError):
        stage_stamp.snapshot({"units": ["nginx.service"]})


ADDRESSES = (FIXTURES / "lab" / "ip_j_address_show_converged_lab_master.json").read_text()


def test_a_commands_output_is_state_and_a_change_in_it_is_named():
    outputs = {("ip", "-j", "address", "show"): ADDRESSES}

    def run(argv):
        return 0, outputs[tuple(argv)], ""

    spec = {"commands": [["ip", "-j", "address", "show"]]}
    before = stage_stamp.snapshot(spec, run_command=run)
    assert before["commands"]["ip -j address show"]["rc"] == 0
    assert stage_stamp.differences(before, stage_stamp.snapshot(spec, run_command=run)) == []
    # the rail's address gone, as after `ip address flush dev ens1f0np0`
    outputs[("ip", "-j", "address", "show")] = ADDRESSES.replace('"198.19.0.1"', '"198.19.0.9"')
    assert ADDRESSES != outputs[("ip", "-j", "address", "show")]
    moved = stage_stamp.differences(before, stage_stamp.snapshot(spec, run_command=run))
    assert moved == ["the output of ip -j address show changed (sha256)"]


@pytest.mark.parametrize("change, phrase", [
    (lambda t: (t / "etc" / "a.conf").write_text("a = 2\n"), "a.conf changed (sha256)"),
    (lambda t: os.chmod(t / "etc" / "b.conf", 0o600), "b.conf changed (mode)"),
    (lambda t: os.unlink(t / "share" / "index.html"), "index.html is gone"),
    (lambda t: (t / "share" / "new.js").write_text("x"), "new.js appeared"),
    (lambda t: (t / "absent.conf").write_text("x"), "absent.conf appeared"),
    (lambda t: (os.unlink(t / "current"), os.symlink("etc/b.conf", t / "current")), "current changed (link)"),
])
def test_what_moved_is_named(tree, change, phrase):
    before = stage_stamp.snapshot(spec_of(tree), run_command=fake_systemctl)
    change(tree)
    now = stage_stamp.snapshot(spec_of(tree), run_command=fake_systemctl)
    moved = stage_stamp.differences(before, now)
    assert len(moved) == 1 and phrase in moved[0], moved


def test_a_large_file_written_in_place_with_its_old_mtime_is_seen(tmp_path, monkeypatch):
    big = tmp_path / "llama-server"
    big.write_bytes(bytes(64 * 1024))
    monkeypatch.setattr(stage_stamp, "CONTENT_LIMIT", 1024)
    before = stage_stamp.snapshot({"files": [str(big)]})
    assert "sha256" not in before["files"][str(big)]
    info = big.stat()
    time.sleep(0.05)  # past the file system's coarse clock tick
    with open(big, "r+b") as handle:
        handle.seek(1000)
        handle.write(b"\x01")
    os.utime(big, ns=(info.st_atime_ns, info.st_mtime_ns))
    moved = stage_stamp.differences(before, stage_stamp.snapshot({"files": [str(big)]}))
    assert moved == [f"file {big} changed (ctime_ns)"]


def test_a_stopped_unit_is_named():
    before = {"units": stage_stamp.parse_systemctl_show(SHOW, UNITS)}
    now = json.loads(json.dumps(before))
    now["units"]["nginx.service"]["ActiveState"] = "inactive"
    assert stage_stamp.differences(before, now) == ["unit nginx.service changed (ActiveState)"]


def test_more_moves_than_the_limit_are_counted():
    before = {"sysctls": {f"k{i}": "0" for i in range(8)}}
    now = {"sysctls": {f"k{i}": "1" for i in range(8)}}
    moved = stage_stamp.differences(before, now, limit=3)
    assert len(moved) == 4 and moved[-1] == "and 5 more"


def test_the_verdict_holds_only_for_the_same_inputs_and_state(tree):
    now = stage_stamp.snapshot(spec_of(tree), run_command=fake_systemctl)
    stamp = {"version": stage_stamp.STAMP_VERSION, "inputs": "abc", "state": now, "time": "2026-12-03T14:00:00Z"}
    assert stage_stamp.verdict(stamp, "abc", now) == (True, "nothing changed since 2026-12-03T14:00:00Z")
    assert stage_stamp.verdict(None, "abc", now) == (False, "no stamp of a finished run")
    assert stage_stamp.verdict(stamp, "abd", now)[1].startswith("its inputs changed")
    assert stage_stamp.verdict(dict(stamp, version=0), "abc", now)[1] == "the stamp is of another version"
    (tree / "etc" / "b.conf").write_text("b = 3\n")
    moved = stage_stamp.snapshot(spec_of(tree), run_command=fake_systemctl)
    current, why = stage_stamp.verdict(stamp, "abc", moved)
    assert not current and why.startswith("its state moved: file ") and "b.conf changed" in why


def run_module(args, capsys, monkeypatch, check_mode=False):
    monkeypatch.setattr(twinrail_stage_stamp.AnsibleModule, "run_command",
                        lambda self, argv, **_kw: fake_systemctl(argv))
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), pytest.raises(SystemExit):
        twinrail_stage_stamp.main()
    return json.loads(capsys.readouterr().out)


def test_the_module_records_then_holds_then_sees_a_change_and_forgets(tree, tmp_path, capsys, monkeypatch):
    stamps = tmp_path / "stamps"
    args = {"stage": "kernel", "inputs": "d1", "state": spec_of(tree), "directory": str(stamps), "host": "n1"}
    first = run_module(args, capsys, monkeypatch)
    assert first["current"] is False and first["reason"] == "no stamp of a finished run" and not first["changed"]
    dry = run_module(dict(args, mode="record"), capsys, monkeypatch, check_mode=True)
    assert dry["recorded"] is False and not stamps.exists()
    recorded = run_module(dict(args, mode="record"), capsys, monkeypatch)
    assert recorded["recorded"] and (stamps / "kernel.json").is_file() and not recorded["changed"]
    again = run_module(args, capsys, monkeypatch)
    assert again["current"] is True and again["since"] == recorded["since"]
    (tree / "share" / "index.html").write_text("<p>edited</p>\n")
    # check mode says so and leaves the stamp; a real run removes it
    dry = run_module(args, capsys, monkeypatch, check_mode=True)
    assert dry["current"] is False and "index.html changed" in dry["reason"] and (stamps / "kernel.json").exists()
    moved = run_module(args, capsys, monkeypatch)
    assert moved["current"] is False and not (stamps / "kernel.json").exists()


@pytest.mark.parametrize("run_tags, skip_tags, partial", [
    (["all"], [], False),
    (["kernel"], [], False),
    (["kernel", "rdma"], ["molecule-notest", "notest"], False),
    (["kernel_sysctl"], [], True),
    (["all"], ["kernel_cmdline"], True),
    (["all"], ["kernel"], True),
    (["rdma"], [], True),
])
def test_a_stamp_is_written_only_after_the_whole_stage(run_tags, skip_tags, partial):
    assert action.partial_run("kernel", ["kernel_sysctl", "kernel_cmdline"], run_tags, skip_tags) is partial


class Vars(dict):
    """A host's variables as hostvars gives them: templating one may fail."""

    def __getitem__(self, key):
        value = super().__getitem__(key)
        if isinstance(value, Exception):
            raise value
        return value


def test_the_inputs_are_every_spec_setting_of_every_node():
    role = str(REPO / "roles" / "kernel_tuning")
    options = action.spec_options(role) + action.role_globals(role)
    assert "kernel_tuning_sysctl_net" in options
    assert {"twinrail_lab", "twinrail_rails", "twinrail_profile"} <= set(options)
    hostvars = {"m": Vars(kernel_tuning_swap_off=True, group_names=["master"]),
                "w": Vars(kernel_tuning_swap_off=True, group_names=["workers"], twinrail_lab=RuntimeError("x"))}
    base = action.inputs_digest("kernel", role, hostvars, ["w", "m"], {"kernel": "6.1"})
    assert base == action.inputs_digest("kernel", role, hostvars, ["m", "w"], {"kernel": "6.1"})
    assert action.settings_of(hostvars, ["w"], options)["w"]["twinrail_lab"] == action.UNRESOLVED
    hostvars["w"]["kernel_tuning_swap_off"] = False
    assert action.inputs_digest("kernel", role, hostvars, ["m", "w"], {"kernel": "6.1"}) != base
    hostvars["w"]["kernel_tuning_swap_off"] = True
    assert action.inputs_digest("kernel", role, hostvars, ["m", "w"], {"kernel": "6.2"}) != base
    assert action.inputs_digest("kernel", role, hostvars, ["m"], {"kernel": "6.1"}) != base


def test_the_content_is_the_role_the_plugins_and_the_stage_play():
    roots = action.content_roots(str(REPO / "roles" / "kernel_tuning"), "kernel")
    assert str(REPO / "library") in roots and str(REPO / "module_utils") in roots
    assert str(REPO / "playbooks" / "kernel.yml") in roots


def test_the_tree_digest_follows_names_and_bytes(tmp_path):
    (tmp_path / "r" / "tasks").mkdir(parents=True)
    (tmp_path / "r" / "tasks" / "main.yml").write_text("---\n")
    first = stage_stamp.tree_digest([str(tmp_path / "r")])
    (tmp_path / "r" / "tasks" / "main.yml").write_text("--- \n")
    second = stage_stamp.tree_digest([str(tmp_path / "r")])
    (tmp_path / "r" / "tasks" / "main.yml").rename(tmp_path / "r" / "tasks" / "other.yml")
    third = stage_stamp.tree_digest([str(tmp_path / "r")])
    assert len({first, second, third}) == 3


def test_a_changed_setting_is_named_by_name_and_node():
    role = str(REPO / "roles" / "kernel_tuning")
    hostvars = {"m": Vars(kernel_tuning_swap_off=True, group_names=["master"]),
                "w": Vars(kernel_tuning_swap_off=True, group_names=["workers"])}
    before = action.inputs_parts("kernel", role, hostvars, ["m", "w"], {"kernel": "6.1"})
    hostvars["w"]["kernel_tuning_swap_off"] = False
    one = action.inputs_parts("kernel", role, hostvars, ["m", "w"], {"kernel": "6.1"})
    assert stage_stamp.changed_inputs(before, one) == ["setting kernel_tuning_swap_off of w"]
    hostvars["m"]["kernel_tuning_swap_off"] = False
    both = action.inputs_parts("kernel", role, hostvars, ["m", "w"], {"kernel": "6.2"})
    assert stage_stamp.changed_inputs(before, both) == ["kernel", "setting kernel_tuning_swap_off on every node"]
    stamp = {"version": stage_stamp.STAMP_VERSION, "inputs": stage_stamp.digest(before), "parts": before}
    current, why = stage_stamp.verdict(stamp, stage_stamp.digest(one), {}, one)
    assert not current and why == "its inputs changed: setting kernel_tuning_swap_off of w"
    # a stamp written before the parts were kept: the change is still seen, unnamed
    old = {"version": stage_stamp.STAMP_VERSION, "inputs": stage_stamp.digest(before)}
    assert stage_stamp.verdict(old, stage_stamp.digest(one), {}, one)[1] == \
        "its inputs changed (settings, nodes or the stage's code)"


def test_a_record_takes_the_roles_values_as_the_run_left_them():
    # the runtime stage checks with the controller's cache absent, then puts
    # the artifact there itself: recorded as it is now, the next check holds
    role = str(REPO / "roles" / "kernel_tuning")
    hostvars = {"m": Vars(kernel_tuning_swap_off=True, group_names=["master"])}
    checked = action.inputs_parts("runtime", role, hostvars, ["m"], {"build": "b1", "cached": False})
    recorded = action.recorded_parts(checked, {"build": "b1", "cached": True})
    next_check = action.inputs_parts("runtime", role, hostvars, ["m"], {"build": "b1", "cached": True})
    assert recorded == next_check
    assert stage_stamp.changed_inputs(checked, next_check) == ["cached"]
    stamp = {"version": stage_stamp.STAMP_VERSION, "inputs": stage_stamp.digest(recorded), "parts": recorded}
    assert stage_stamp.verdict(stamp, stage_stamp.digest(next_check), {}, next_check)[0]
    # what the role does not pass again is the check's
    assert action.recorded_parts(checked, {"cached": True})["build"] == checked["build"]


def test_secret_settings_are_never_named_one_by_one():
    role = str(REPO / "roles" / "inference_service")
    assert {"inference_service_users", "inference_service_api_keys"} <= action.secret_options(role)
    keys = [{"name": "app", "key": "k" * 32}]
    hostvars = {"m": Vars(inference_service_api_keys=keys, inference_service_parallel=2, group_names=["master"])}
    before = action.inputs_parts("service", role, hostvars, ["m"], None)
    assert {"setting inference_service_api_keys of m", "setting inference_service_users of m"}.isdisjoint(before)
    assert "setting inference_service_parallel of m" in before and "a secret setting of m" in before
    hostvars["m"]["inference_service_api_keys"] = [{"name": "app", "key": "j" * 32}]
    after = action.inputs_parts("service", role, hostvars, ["m"], None)
    assert stage_stamp.changed_inputs(before, after) == ["a secret setting of m"]


def test_a_setting_applied_on_every_run_is_not_an_input():
    # the service applies its API keys on every run (the guard reads the file
    # again by itself): a new key re-runs that task, not the stage
    role = str(REPO / "roles" / "inference_service")
    keys = [{"name": "app", "key": "k" * 32}]
    hostvars = {"m": Vars(inference_service_api_keys=keys, inference_service_users=[{"name": "op"}],
                          group_names=["master"])}
    apart = ("inference_service_api_keys",)
    before = action.inputs_parts("service", role, hostvars, ["m"], None, apart)
    hostvars["m"]["inference_service_api_keys"] = [{"name": "app", "key": "j" * 32}]
    assert action.inputs_parts("service", role, hostvars, ["m"], None, apart) == before
    # the other secrets still are
    hostvars["m"]["inference_service_users"] = [{"name": "op2"}]
    after = action.inputs_parts("service", role, hostvars, ["m"], None, apart)
    assert stage_stamp.changed_inputs(before, after) == ["a secret setting of m"]
    # the role's own stamp task names it
    main = yaml.safe_load((REPO / "roles" / "inference_service" / "tasks" / "main.yml").read_text())
    stamp = next(t for t in main if t.get("register") == "__service_stamp")["twinrail_stage_stamp"]
    assert stamp["applied_every_run"] == ["inference_service_api_keys"]


def test_the_module_names_the_changed_input(tree, tmp_path, capsys, monkeypatch):
    stamps = tmp_path / "stamps"
    parts = {"the stage's code": "c1", "setting x of n1": "v1", "setting x of n2": "v1"}
    args = {"stage": "rdma", "inputs": stage_stamp.digest(parts), "parts": parts, "state": spec_of(tree),
            "directory": str(stamps), "host": "n1"}
    run_module(dict(args, mode="record"), capsys, monkeypatch)
    assert json.loads((stamps / "rdma.json").read_text())["parts"] == parts
    moved = dict(parts, **{"setting x of n1": "v2"})
    result = run_module(dict(args, inputs=stage_stamp.digest(moved), parts=moved), capsys, monkeypatch)
    assert result["reason"] == "its inputs changed: setting x of n1"
