"""The weights_manifest module: the gate's message, check mode, the cache,
promotion from staging and a manifest made from a trusted first copy."""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

import weights_manifest as module
from ansible.module_utils.weights.sums import parse_sha256sums, sha256_file


def run(args, capsys, check_mode=False):
    args = dict(args, host="lab-worker1")
    if check_mode:
        args["_ansible_check_mode"] = True
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        module.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture(name="release")
def fixture_release(tmp_path):
    rev = tmp_path / "rev"
    rev.mkdir()
    for name in ("a.gguf", "b.gguf"):
        (rev / name).write_bytes(os.urandom(1 << 16))
    manifest = tmp_path / "rev.sha256"
    manifest.write_text("".join(f"{sha256_file(str(rev / n))}  {n}\n" for n in ("a.gguf", "b.gguf")))
    return rev, manifest


def test_the_gate_names_host_file_and_both_hashes(release, capsys):
    rev, manifest = release
    data = bytearray((rev / "b.gguf").read_bytes())
    data[100] ^= 0xFF
    (rev / "b.gguf").write_bytes(bytes(data))
    want = parse_sha256sums(manifest.read_text())["b.gguf"]
    code, out = run({"path": str(rev), "manifest": str(manifest), "fail_on_mismatch": True},
                    capsys)
    assert code == 1 and out["failed"]
    assert out["msg"] == (f"weights: lab-worker1: {rev}: 1 of 2 files wrong: b.gguf: sha256 "
                          f"{sha256_file(str(rev / 'b.gguf'))}, expected {want}")


def test_changed_only_when_the_cache_is_written(release, capsys):
    rev, manifest = release
    args = {"path": str(rev), "manifest": str(manifest)}
    code, dry = run(args, capsys, check_mode=True)
    assert code == 0 and not dry["changed"] and not (rev / ".twinrail-verify.json").exists()
    _, first = run(args, capsys)
    assert first["changed"] and sorted(first["hashed"]) == ["a.gguf", "b.gguf"]
    _, second = run(args, capsys)
    assert not second["changed"] and second["hashed"] == [] and second["hashed_bytes"] == 0
    _, forced = run(dict(args, force=True), capsys)
    assert not forced["changed"] and len(forced["hashed"]) == 2


def test_a_bad_manifest_is_an_error_naming_it(release, capsys):
    rev, manifest = release
    manifest.write_text(manifest.read_text() + manifest.read_text().splitlines()[0] + "\n")
    code, out = run({"path": str(rev), "manifest": str(manifest)}, capsys)
    assert code == 1 and out["msg"] == (f"weights: lab-worker1: manifest {manifest}: line 3: "
                                        f"'a.gguf' is listed twice (first on line 1)")


def test_staged_files_are_promoted_and_a_first_copy_makes_the_manifest(tmp_path, capsys):
    staging, final = tmp_path / "staging", tmp_path / "final"
    staging.mkdir()
    (staging / "x.bin").write_bytes(b"first copy")
    manifest = tmp_path / "made.sha256"
    code, out = run({"path": str(staging), "manifest": str(manifest), "create": True,
                     "promote_to": str(final)}, capsys)
    assert code == 0 and out["changed"] and out["manifest_created"]
    assert out["moved"] == ["x.bin"] and (final / "x.bin").read_bytes() == b"first copy"
    assert parse_sha256sums(manifest.read_text()) == {"x.bin": sha256_file(str(final / "x.bin"))}
    # the promoted file joined the final directory's cache: verifying reads nothing
    _, again = run({"path": str(final), "manifest": str(manifest)}, capsys)
    assert again["files"] == {"x.bin": "ok"} and again["hashed"] == [] and not again["changed"]


def test_diff_mode_shows_a_manifest_made_from_a_first_copy(tmp_path, capsys):
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "x.bin").write_bytes(b"first copy")
    manifest = tmp_path / "made.sha256"
    args = {"path": str(staging), "manifest": str(manifest), "create": True, "_ansible_diff": True}
    code, out = run(args, capsys, check_mode=True)
    assert code == 0 and not manifest.exists()
    assert out["diff"] == {"before": "", "after": f"{sha256_file(str(staging / 'x.bin'))}  x.bin\n",
                           "before_header": f"{manifest} (absent)", "after_header": str(manifest)}
    run(dict(args), capsys)
    # the manifest is there: read, not made, nothing to show
    code, again = run(args, capsys)
    assert code == 0 and "diff" not in again and not again["manifest_created"]
