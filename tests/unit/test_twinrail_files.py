"""library/twinrail_files.py, run as Ansible runs it on a node: a stage's
files compared and written in one module run, drift repaired, check mode
and diff, a validation command, bad input refused before anything is
written."""

from __future__ import annotations

import os
import stat

from conftest import REPO, module_process

MODULE = REPO / "library" / "twinrail_files.py"


def run(tmp_path, files, check=False, diff=False, directories=None) -> dict:
    args = {"files": files, "directories": directories or []}
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    return module_process(MODULE, args, tmp_path)


def mode_of(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_files_are_written_with_their_mode_then_a_rerun_changes_nothing(tmp_path):
    a, b = tmp_path / "etc" / "a.conf", tmp_path / "etc" / "drop-in.d" / "b.conf"
    files = [{"dest": str(a), "content": "one\n"}, {"dest": str(b), "content": "two\n", "mode": "0640"}]
    first = run(tmp_path, files)
    assert first["changed"] and first["changed_files"] == [str(a), str(b)], first
    assert a.read_text() == "one\n" and b.read_text() == "two\n"
    assert (mode_of(a), mode_of(b), mode_of(b.parent)) == (0o644, 0o640, 0o755)
    again = run(tmp_path, files)
    assert not again["changed"] and again["changed_files"] == []


def test_drift_is_repaired_and_only_the_drifted_file_is_named(tmp_path):
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    files = [{"dest": str(a), "content": "one\n"}, {"dest": str(b), "content": "two\n"}]
    run(tmp_path, files)
    b.write_text("edited by hand\n")
    a.chmod(0o666)
    fixed = run(tmp_path, files)
    assert fixed["changed_files"] == [str(a), str(b)]
    assert b.read_text() == "two\n" and mode_of(a) == 0o644
    assert not list(tmp_path.glob(".twinrail.*"))  # no temporary file left behind


def test_check_mode_says_what_would_change_and_shows_the_diff_without_writing(tmp_path):
    a = tmp_path / "a.conf"
    a.write_text("old\n")
    before = a.stat().st_mtime_ns
    seen = run(tmp_path, [{"dest": str(a), "content": "new\n"}, {"dest": str(tmp_path / "b.conf"), "content": "b\n"}],
               check=True, diff=True)
    assert seen["changed"] and seen["changed_files"] == [str(a), str(tmp_path / "b.conf")]
    assert seen["diff"][0] == {"before_header": str(a), "after_header": str(a), "before": "old\n", "after": "new\n"}
    assert a.read_text() == "old\n" and a.stat().st_mtime_ns == before and not (tmp_path / "b.conf").exists()


def test_content_its_validation_refuses_is_not_installed(tmp_path):
    """python3 -m json.tool as the validation command: its own refusal is the message."""
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    bad.write_text('{"kept": true}\n')
    check = "python3 -m json.tool %s"
    failed = run(tmp_path, [{"dest": str(good), "content": '{"a": 1}\n', "validate": check},
                            {"dest": str(bad), "content": '{"a": }\n', "validate": check}])
    assert failed["failed"] and failed["msg"].startswith(f"{bad}: its new content fails `{check}` (exit 1): ")
    assert "Expecting value" in failed["msg"] and failed["msg"].endswith("the file was left as it was")
    assert failed["changed_files"] == [str(good)] and good.read_text() == '{"a": 1}\n'
    assert bad.read_text() == '{"kept": true}\n' and not list(tmp_path.glob(".twinrail.*"))


def test_bad_input_is_refused_before_any_file_is_written(tmp_path):
    first = tmp_path / "first.conf"
    cases = [
        ({"dest": "relative/x.conf", "content": "x"}, "files: dest 'relative/x.conf' is not an absolute path"),
        ({"dest": str(first), "content": "again"}, f"files: {first} is given twice"),
        ({"dest": str(tmp_path / "u.conf"), "content": "x", "owner": "no-such-user"},
         f"{tmp_path / 'u.conf'}: mode '0644', owner 'no-such-user', group 'root': "),
        ({"dest": str(tmp_path / "m.conf"), "content": "x", "mode": "rw-r--r--"},
         f"{tmp_path / 'm.conf'}: mode 'rw-r--r--'"),
        ({"dest": str(tmp_path / "v.conf"), "content": "x", "validate": "true"},
         f"{tmp_path / 'v.conf'}: validate must name the file to check as %s: 'true'"),
    ]
    for bad, said in cases:
        result = run(tmp_path, [{"dest": str(first), "content": "first\n"}, bad])
        assert result["failed"] and result["msg"].startswith(said), (bad, result["msg"])
        assert result["msg"].endswith("nothing was written") and not first.exists(), bad


def test_directories_are_made_and_put_back_to_0755(tmp_path):
    kept, made = tmp_path / "textfile", tmp_path / "rules"
    kept.mkdir(mode=0o700)
    os.chmod(kept, 0o700)
    result = run(tmp_path, [{"dest": str(made / "a.yml"), "content": "a\n"}], directories=[str(kept), str(made)])
    assert result["changed_files"] == [str(kept), str(made), str(made / "a.yml")]
    assert (mode_of(kept), mode_of(made)) == (0o755, 0o755)
    again = run(tmp_path, [{"dest": str(made / "a.yml"), "content": "a\n"}], directories=[str(kept), str(made)])
    assert again["changed_files"] == []
