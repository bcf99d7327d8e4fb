"""Verify the weights stage on each lab node: every set of the scenario is
in place under its revision, byte for byte what its manifest lists, with
`current` switched, and nothing of the transfer left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
BUNDLE = Path.home() / ".cache" / "twinrail" / "bundle" / "models"
ROOT = "/srv/twinrail/models"
SETS = yaml.safe_load((PROJECT / "molecule" / "lab" / "vars" / "weights-sets.yml").read_text())["twinrail_weights"]


def manifest(model: str) -> dict[str, str]:
    lines = (BUNDLE / model / "SHA256SUMS").read_text().splitlines()
    return {line.split(None, 1)[1]: line.split(None, 1)[0] for line in lines if line.strip()}


@pytest.mark.parametrize("weight_set", SETS, ids=[s["model"] for s in SETS])
def test_every_file_of_every_set_matches_its_manifest(host, weight_set):
    model, revision = weight_set["model"], weight_set["revision"]
    want = manifest(model)
    out = host.check_output(f"cd {ROOT}/{model}/{revision} && sha256sum " +
                            " ".join(f"'{rel}'" for rel in sorted(want)))
    got = {line.split(None, 1)[1]: line.split(None, 1)[0] for line in out.splitlines()}
    assert got == want
    listed = host.check_output(f"cd {ROOT}/{model}/{revision} && find . -type f "
                               f"! -name '.twinrail*' -printf '%P\\n'").splitlines()
    assert sorted(listed) == sorted(want)  # nothing extra


@pytest.mark.parametrize("weight_set", SETS, ids=[s["model"] for s in SETS])
def test_current_points_at_the_revision_and_the_manifest_is_kept(host, weight_set):
    model, revision = weight_set["model"], weight_set["revision"]
    current = host.file(f"{ROOT}/{model}/current")
    assert current.is_symlink and current.linked_to == f"{ROOT}/{model}/{revision}"
    kept = host.file(f"{ROOT}/{model}/.twinrail-manifests/{revision}.sha256")
    assert kept.content_string == (BUNDLE / model / "SHA256SUMS").read_text()
    assert host.file(f"{ROOT}/{model}/{revision}/.twinrail-verify.json").exists


def test_nothing_of_the_transfer_is_left(host):
    for weight_set in SETS:
        assert not host.file(f"{ROOT}/{weight_set['model']}/.twinrail-staging/"
                             f"{weight_set['revision']}").exists
    assert not host.file("/etc/twinrail/weights-rsyncd.secrets").exists
    assert host.run("pgrep -x rsync").rc == 1  # no rsync daemon left listening
