"""The preflight stage as an operator runs it: ansible-playbook on a bad inventory.

The inventories are copies of inventory/example with one defect, and every
host is pinned to `ansible_connection: local`: the validation must stop the
run on the controller, and if it ever let a bad inventory through, the
following play would gather facts locally rather than reach for an address
outside this machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def make_inventory(tmp_path: Path, host: str, change: dict) -> Path:
    inv = tmp_path / "inventory"
    shutil.copytree(REPO / "inventory" / "example", inv)
    for name in ("spark-a", "spark-b"):
        path = inv / "host_vars" / f"{name}.yml"
        data = yaml.safe_load(path.read_text())
        data["ansible_connection"] = "local"
        # what the site's vault holds (inventory/example names it)
        data["vault_inference_service_operator_password"] = "test-only-not-a-secret"
        data["vault_inference_service_api_key"] = "test-only-not-a-secret-key-of-32-chars"
        if name == host:
            data.update(change)
        path.write_text(yaml.safe_dump(data))
    return inv


def run_site(inv: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return subprocess.run(["ansible-playbook", "-i", str(inv), "site.yml", *args],
                          cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.mark.parametrize("tags", [[], ["--tags", "preflight"], ["--tags", "rdma"]])
def test_bad_inventory_stops_the_run_before_any_host(tmp_path, tags):
    rails = [{"name": "rail0", "interface": "enp1s0f0np0", "rdma_device": "mlx5_0",
              "address": "10.100.0.2"},
             {"name": "rail1", "interface": "enp1s0f1np1", "rdma_device": "mlx5_1",
              "address": "10.100.1.2/30"}]
    inv = make_inventory(tmp_path, "spark-b", {"twinrail_rails": rails})
    proc = run_site(inv, *tags)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert ("spark-b: twinrail_rails[0].address: expected an IPv4 address with its "
            "prefix, such as 10.10.0.1/30, got '10.100.0.2' (str)") in out
    assert "nothing was changed on any host" in out
    assert "Gathering Facts" not in out, "a host was contacted after a failed validation"
    assert "spark-a" not in out.split("PLAY RECAP")[1]


def test_several_defects_are_listed_together(tmp_path):
    inv = make_inventory(tmp_path, "spark-a", {"twinrail_mgmt_address": "10.20.0.11",
                                               "twinrail_lab": "no"})
    proc = run_site(inv)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "the inventory has 3 defect(s)" in out, out
    assert "spark-a: twinrail_mgmt_address: expected an IPv4 address with its prefix" in out
    # twinrail_lab is cluster-wide: a host_vars override is both wrong and different
    assert "spark-a: twinrail_lab: expected a boolean (true or false), got 'no' (str)" in out
    assert "spark-b: twinrail_lab: expected the same value as on spark-a ('no')" in out


@pytest.mark.parametrize(("change", "expected"), [
    ({"system_backup_retention": 0},
     "backup: spark-a: system_backup_retention: expected at least 1 (a retention of 0 would delete every backup), "
     "got 0; nothing was changed"),
    ({"system_backup_backend": "tape"},
     "value of system_backup_backend must be one of: tar, rear, got: tape"),
    ({"inference_service_users": [{"name": "operator", "password": ""}]},
     "service: spark-a: expected inference_service_users as a list of {name, password}"),
    ({"inference_service_client_networks": ["10.20.0.0/33"]},
     "inference_service_client_networks / inference_service_admin_networks as lists of networks"),
    ({"acceptance_min_prefill_tps": -1},
     "acceptance: spark-a: acceptance_min_prefill_tps: expected 0 or more tokens/s (0: measured, not gated), got -1; "
     "nothing was measured"),
    ({"bandwidth_gate_min_ratio": 1.5},
     "bandwidth: spark-a: bandwidth_gate_min_ratio: expected a fraction of the negotiated rate in (0, 1], got 1.5; "
     "nothing was measured"),
    ({"inference_service_api_keys": [{"name": "tools", "key": "s3cr3t-but-short"}]},
     "service: spark-a: inference_service_api_keys: entry 0 (tools): the key must be a string of at least 24"),
    ({"inference_service_queue_max": -2},
     "service: spark-a: inference_service_queue_max: expected -1 (no cap) or more, got -2; nothing was changed"),
    ({"acceptance_soak_seconds": 15},
     "acceptance_soak_seconds: expected 0 (no soak) or at least 3 windows of acceptance_soak_window s, got 15, "
     "acceptance_soak_window 10"),
    ({"acceptance_ramp_levels": [1, 0, 4]},
     "acceptance_ramp_levels: expected a list of concurrencies of 1 or more, got [1, 0, 4]"),
    ({"kernel_tuning_cmdline": ["iommu=pt", "bad word"]},
     "kernel: spark-a: kernel_tuning_cmdline: expected a list of name or name=value words without spaces, got "
     "['iommu=pt', 'bad word']; nothing was changed"),
    ({"weights_sync_transfer_timeout": 5, "weights_sync_io_timeout": 10},
     "weights: spark-a: weights_sync_transfer_timeout: expected a timeout above the I/O timeout, got 5, "
     "weights_sync_io_timeout 10; nothing was changed"),
    ({"rdma_network_roce_priority": 9}, "rdma: spark-a: rdma_network_roce_priority: expected 0 to 7, got 9"),
    # an engine that is no engine folder: named with the engines there are, before any role reads it
    ({"inference_service_engine": "sglang"},
     "service: inference_service_engine: spark-a: expected one of llamacpp, vllm (an engine is a folder "
     "roles/inference_service/tasks/engines/<name>/ with its table roles/inference_service/engines/<name>.yml), "
     "got 'sglang'; nothing was changed"),
])
def test_a_bad_stage_setting_stops_the_run_on_the_controller(tmp_path, change, expected):
    inv = make_inventory(tmp_path, "spark-a", change)
    proc = run_site(inv, "--tags", "kernel")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert expected in out, out[-4000:]
    assert "s3cr3t-but-short" not in out, "a key in the output"
    assert "PLAY [Preflight | every stage's settings, on the controller]" in out
    assert "Gathering Facts" not in out, "a host was contacted after a failed validation"
    assert "Kernel |" not in out


def test_a_refusal_names_only_the_wrong_setting(tmp_path):
    """One bad value among a stage's many: the message is that setting,
    its value and its form; the good ones are not listed."""
    inv = make_inventory(tmp_path, "spark-a", {"inference_service_queue_max": 16, "inference_service_rate_burst": -3})
    proc = run_site(inv, "--tags", "kernel")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    line = next(line for line in out.splitlines() if "service: spark-a: " in line and "expected" in line)
    assert "inference_service_rate_burst: expected 0 or more, got -3; nothing was changed" in line, line
    assert "inference_service_queue_max" not in line and "inference_service_rate_per_second" not in line, line


def test_a_missing_runtime_source_is_refused_at_preflight_naming_the_command(tmp_path):
    """Preflight (alone or in a whole run) checks the source the runtime
    stage will need, before any host is contacted."""
    inv = make_inventory(tmp_path, "spark-a", {})
    missing = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    proc = run_site(inv, "--tags", "preflight", "-e", f"runtime_build_archive={missing}")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert f"runtime: runtime_build_archive: {missing} is absent on the controller: fetch it with " \
           "`.venv/bin/python tools/bundle.py runtime`" in out, out[-3000:]
    assert "Gathering Facts" not in out and "Kernel |" not in out
    missing.write_bytes(b"not the sdist")
    proc = run_site(inv, "--tags", "preflight", "-e", f"runtime_build_archive={missing}")
    assert "has sha256 " in proc.stdout and ", expected the pinned 832db0699007" in proc.stdout, proc.stdout[-3000:]
    assert "Gathering Facts" not in proc.stdout


def test_a_typo_in_a_variable_name_is_refused_with_the_closest_name(tmp_path):
    inv = make_inventory(tmp_path, "spark-b", {"twinrail_weight": [], "inference_service_client_network": ["10.20.0.0/24"]})
    proc = run_site(inv)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "spark-b: inference_service_client_network: expected a name twinrail reads" in out, out[-4000:]
    assert "did you mean inference_service_client_networks?" in out
    assert "spark-b: twinrail_weight: expected a name twinrail reads" in out and "did you mean twinrail_weights?" in out
    assert "Gathering Facts" not in out


def commented_vllm_block(example: str) -> dict:
    """The settings an example inventory gives, commented out, for serving
    with vLLM instead (from `# inference_service_engine: vllm` to the end of
    the comment, its parenthesised notes left out): what its reader would
    uncomment."""
    lines = (REPO / "inventory" / example / "group_vars" / "cluster" / "main.yml").read_text().splitlines()
    block, note = [], False
    for line in lines[lines.index("# inference_service_engine: vllm"):]:
        if not line.startswith("#"):
            break
        text = line[2:]
        note = note or text.startswith("(")
        if not note:
            block.append(text)
        note = note and not text.rstrip().endswith(")")
    return yaml.safe_load("\n".join(block))


# the vLLM engine on the Sparks (one GPU a node: pipeline over the two), and
# on the 8-GPU servers as that example's comment sets it (tensor inside a
# server, pipeline across them, a model whose heads divide by 8)
VLLM_SPARKS = {"inference_service_engine": "vllm"}
VLLM_8GPU = commented_vllm_block("example-8gpu")


# with vLLM on the Sparks, the run's measure switch as docs/cli.md gives it (-e twinrail_measure=...)
@pytest.mark.parametrize("example, engine", [("example", {}), ("example-8gpu", {}), ("example-consumer", {}),
                                             ("example", dict(VLLM_SPARKS, twinrail_measure="bandwidth,service")),
                                             ("example-8gpu", VLLM_8GPU)])
def test_a_copy_of_the_example_with_its_vault_passes_the_controller_side(tmp_path, monkeypatch, example, engine):
    """As an operator starts: copy inventory/example (or the 8-GPU servers'
    or the consumer pair's), make its vault with `twinrail secrets`
    (ansible-vault's library, a password file made 0600), run site.yml
    with --vault-password-file: every secret the example names is defined
    and the controller's checks pass, with llama.cpp and with vLLM. Without
    the password the run stops saying so."""
    from twinrail.ctl import main  # pylint: disable=import-outside-toplevel

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    inv = tmp_path / "inventory" / "spark-site"
    shutil.copytree(REPO / "inventory" / example, inv)
    for path in sorted((inv / "host_vars").glob("*.yml")):
        data = yaml.safe_load(path.read_text())
        data["ansible_connection"] = "local"  # never an address outside this machine
        path.write_text(yaml.safe_dump(data))
    assert main.main(["secrets", "-i", str(inv)]) == 0
    password = tmp_path / "config" / "twinrail" / "spark-site" / "vault-pass"
    assert oct(password.stat().st_mode & 0o777) == "0o600"
    vault = (inv / "group_vars" / "cluster" / "vault.yml").read_text()
    assert vault.startswith("$ANSIBLE_VAULT;1.1;AES256")
    key = (tmp_path / "config" / "twinrail" / "spark-site" / "api-key").read_text().strip()
    assert len(key) >= 24 and key not in vault
    # the controller's plays only (tagged always): nothing reaches a host
    proc = run_site(inv, "--tags", "always", "--vault-password-file", str(password),
                    *(["-e", json.dumps(engine)] if engine else []))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Preflight | every stage's settings, on the controller" in out and "failed=0" in out
    assert key not in out
    proc = run_site(inv, "--tags", "always")
    assert proc.returncode != 0 and "no vault secrets" in (proc.stdout + proc.stderr).lower()
    # a second `secrets` changes nothing without --force
    assert main.main(["secrets", "-i", str(inv)]) == 2
    assert (inv / "group_vars" / "cluster" / "vault.yml").read_text() == vault


def test_the_kv_cache_the_plan_counts_is_the_engines_fixed_one_by_profile_and_device(tmp_path):
    """roles/preflight/vars/main.yml's __preflight_kvcache_gib as the memory
    plan gets it, evaluated by Ansible for each profile, engine and device:
    the dgx-spark profile's fixed vLLM cache on its GPUs, none on discrete
    GPUs (vLLM sizes it), the CPU engine's cache without GPUs, none for
    llama.cpp; an inventory's own value wins over the profile's."""
    play = tmp_path / "kv.yml"
    play.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [{"ansible.builtin.include_vars": {"file": str(REPO / "roles" / "preflight" / "vars" / "main.yml")}},
                  {"ansible.builtin.debug": {"msg": "kv={{ __preflight_kvcache_gib }}"}}]}]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    cases = [("dgx-spark", "vllm", True, {}, 8), ("gpu-server", "vllm", True, {}, 0),
             ("lab", "vllm", False, {}, 4), ("lab", "llamacpp", False, {}, 0), ("dgx-spark", "llamacpp", True, {}, 0),
             ("dgx-spark", "vllm", True, {"inference_service_vllm_gpu_kvcache_gib": 12}, 12)]
    for profile, engine, gpu, extra, want in cases:
        extra_vars = {"twinrail_profile": profile, "inference_service_engine": engine, "preflight_gpu_required": gpu,
                      **extra}
        out = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(play),
                              "-e", json.dumps(extra_vars)], cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=120, check=False)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert f'"msg": "kv={want}"' in out.stdout, (profile, engine, gpu, extra, out.stdout[-1500:])
