"""The `twinrail` console script as an operator runs it after `make venv`:
`.venv/bin/twinrail` without the virtualenv on PATH, global options before
or after the subcommand, a vault-encrypted inventory, and a site whose
nodes cannot be reached, which status shows as unknown, never as None or
as agreeing. The nodes here are 127.0.0.1 on a port nothing listens on
(loopback only)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from twinrail.ctl import inventory, main

SCRIPT = Path(sys.executable).parent / "twinrail"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def site(tmp_path: Path, name: str = "site-a") -> Path:
    """An inventory of two nodes at a loopback port nothing answers."""
    root = tmp_path / "inventory" / name
    (root / "group_vars" / "cluster").mkdir(parents=True)
    (root / "hosts.yml").write_text(
        "all:\n  children:\n    cluster:\n      children:\n"
        f"        master:\n          hosts:\n            spark-a: {{ansible_host: 127.0.0.1, ansible_port: {closed_port()}}}\n"
        f"        workers:\n          hosts:\n            spark-b: {{ansible_host: 127.0.0.1, ansible_port: {closed_port()}}}\n")
    return root


def run(argv: list[str], cwd: Path, **env) -> subprocess.CompletedProcess:
    """The installed script with PATH holding only the system's directories:
    the virtualenv is not activated."""
    clean = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "ANSIBLE_VAULT_PASSWORD_FILE")}
    clean.update(PATH="/usr/sbin:/usr/bin:/sbin:/bin", ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), **env)
    return subprocess.run([str(SCRIPT), *argv], cwd=cwd, env=clean, capture_output=True, text=True, timeout=240,
                          check=False)


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is installed by make venv")
def test_the_installed_script_reads_an_unreachable_site_as_unknown_with_i_after_the_subcommand(tmp_path):
    inv = site(tmp_path)
    proc = run(["status", "-i", str(inv), "--timeout", "2"], cwd=tmp_path)
    assert "ansible-inventory not found" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    screen = proc.stdout
    assert screen.startswith("HEALTH_ERR: spark-a (127.0.0.1) unreachable"), screen
    assert "spark-b (127.0.0.1) unreachable" in screen
    # paramiko's own words say "[Errno None]"; nothing twinrail prints does
    assert "None" not in screen.replace("[Errno None]", ""), screen
    assert "every node agrees" not in screen and "agreement unknown: spark-a, spark-b not read" in screen, screen
    assert "slots unknown/unknown busy, unknown queued (cap unknown); proxy HTTP unknown (not read)" in screen, screen
    # the same command with -i first: the same screen
    again = run(["-i", str(inv), "--timeout", "2", "status", "--json"], cwd=tmp_path)
    data = json.loads(again.stdout)
    assert again.returncode == 2 and data["deployment"]["unread"] == ["spark-a", "spark-b"]
    assert data["deployment"]["runtime_agree"] is None and not any(n["reachable"] for n in data["nodes"])


def test_reports_are_the_sites_own(tmp_path, monkeypatch):
    """Two sites in one checkout: each status reads reports/<site>/ only
    (or the inventory's twinrail_site), never the other's baseline."""
    for name, passed in (("site-a", True), ("site-b", False)):
        latest = tmp_path / "reports" / name / "latest"
        latest.mkdir(parents=True)
        (latest / "bandwidth.json").write_text(json.dumps({"run": f"run-{name}", "passed": passed, "failures": []}))
    monkeypatch.setattr(main.status_mod, "REPO", tmp_path)
    cluster = inventory.Cluster(nodes=[], settings={"twinrail_site": None})
    args = main.argparse.Namespace(reports=None, inventory=str(site(tmp_path, "site-b")))
    assert main.reports_dir(args, cluster) == tmp_path / "reports" / "site-b"
    assert main.status_mod.reports_of(main.reports_dir(args, cluster))["bandwidth"]["run"] == "run-site-b"
    args.inventory = str(site(tmp_path, "site-a") / "hosts.yml")  # an inventory file: its directory names the site
    assert main.reports_dir(args, cluster) == tmp_path / "reports" / "site-a"
    cluster.settings["twinrail_site"] = "site-b"  # a grown inventory that is the same site
    assert main.reports_dir(args, cluster) == tmp_path / "reports" / "site-b"


def test_a_vault_encrypted_inventory_needs_its_password_and_opens_with_the_file(tmp_path, capsys):
    from ansible.parsing.vault import VaultLib, VaultSecret  # pylint: disable=import-outside-toplevel

    inv = site(tmp_path)
    secret = VaultLib([("default", VaultSecret(b"correct horse"))]).encrypt("inference_service_api_keys: [k]\n")
    (inv / "group_vars" / "cluster" / "vault.yml").write_bytes(secret)
    password = tmp_path / "vault-pass"
    password.write_text("correct horse\n")
    with pytest.raises(inventory.InventoryError, match="give --vault-password-file FILE, --ask-vault-pass or "
                                                       r"\$ANSIBLE_VAULT_PASSWORD_FILE"):
        inventory.load(str(inv))
    cluster = inventory.load(str(inv), inventory.vault_args(str(password)))
    assert [n.name for n in cluster.nodes] == ["spark-a", "spark-b"]
    # the CLI takes the same option after the subcommand; the bad figure is refused before any node is read
    assert main.main(["bench", "--streams", "0", "--vault-password-file", str(password), "-i", str(inv)]) == 2
    assert "bench: expected --streams >= 1" in capsys.readouterr().err


def test_bench_collectives_runs_the_service_stage_measured_then_shows_its_report(tmp_path, monkeypatch, capsys):
    """`twinrail bench --collectives`: the service stage alone with its
    measurement forced (the vault's password passed on), then the report
    it wrote (the lab's real one); a run that wrote none is an error, a
    failed report exits 1."""
    lab = json.loads((REPO / "tests" / "fixtures" / "lab" / "collectives_lab.json").read_text())
    reports = tmp_path / "reports"
    reports.mkdir()
    seen = []

    def playbook(argv, **kwargs):
        seen.append((argv, kwargs["cwd"]))
        if written is not None:
            (reports / "collectives.json").write_text(json.dumps(written))
        return subprocess.CompletedProcess(argv, 2 if written and not written["passed"] else 0)

    monkeypatch.setattr(main.subprocess, "run", playbook)
    monkeypatch.setattr(main, "load", lambda args: inventory.Cluster(nodes=[], settings={}))
    password = tmp_path / "vault-pass"
    password.write_text("x\n")
    argv = ["bench", "--collectives", "-i", str(site(tmp_path)), "--reports", str(reports),
            "--vault-password-file", str(password)]
    written = lab
    assert main.main(argv) == 0
    out = capsys.readouterr().out
    assert "gloo over rail0, run 20261207T191416Z: PASS" in out
    assert "lab-master     all_gather          32     67504.6      0.497      0.249" in out
    [(command, cwd)] = seen
    assert command[1:] == [str(REPO / "site.yml"), "-i", argv[3], "--tags", "service", "-e", "twinrail_measure=service",
                           "--vault-password-file", str(password)]
    assert command[0].endswith("ansible-playbook") and cwd == REPO
    written = dict(lab, passed=False, problems=["collectives: lab-master: all_gather reached 0.249 GB/s"])
    assert main.main(argv) == 1
    assert "FAILED: collectives: lab-master: all_gather reached 0.249 GB/s" in capsys.readouterr().out
    written = None  # a run that passed without measuring (an engine with no collectives): the report is the one before
    assert main.main(argv) == 1
    assert "wrote no report" in capsys.readouterr().err
