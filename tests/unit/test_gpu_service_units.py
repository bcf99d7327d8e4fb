"""The service's units for a worker with several GPUs, rendered by Ansible
from the role's own templates with the split the role computes: every
rail's RPC server exposes all of the worker's GPUs in nvidia-smi's order,
the guard is told how many devices each server and the master hold; and a
node without (the lab's, a Spark's) renders as before, with no device
list, so nothing restarts there."""

from __future__ import annotations

import os
import subprocess

import yaml
from conftest import REPO

TEMPLATES = REPO / "roles" / "inference_service" / "templates"


def render(tmp_path, counts: dict, master_gpu: bool) -> dict:
    """The rpc and llama units on this machine playing the worker (the
    split names it by inventory_hostname, localhost) and the master."""
    play = [{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": {
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "__service_bin": "/opt/twinrail/runtime/current/bin", "twinrail_runtime_root": "/opt/twinrail",
            "inference_service_user": "twinrail", "__service_memory_bytes": 1 << 40,
            "twinrail_memory_soft_watermark_pct": 85, "twinrail_memory_hard_watermark_pct": 92,
            "__inference_service_systemd_sandbox": "# sandbox", "__inference_service_rails_override": "/run/x.env",
            "inference_service_worker_timeout": 120, "inference_service_stop_timeout": 20,
            "twinrail_model": {"name": "m"},
            "rails": {"localhost": [{"name": "rail0", "address": "10.110.0.2/30"},
                                    {"name": "rail1", "address": "10.110.1.2/30"}]},
        },
        "tasks": [
            {"name": "Split", "ansible.builtin.set_fact": {
                "__service_split": "{{ 'gpu-a' | twinrail_tensor_split(['localhost'], rails, 50052, 61, "
                                   f"{str(master_gpu).lower()}, "
                                   "['gpu-a', 'localhost'] | twinrail_host_values(hostvars, 'twinrail_gpu_count')) }}"}},
            {"name": "RPC unit", "ansible.builtin.template": {
                "src": str(TEMPLATES / "twinrail-rpc@.service.j2"), "dest": str(tmp_path / "rpc.service")}},
            {"name": "llama unit", "ansible.builtin.template": {
                "src": str(TEMPLATES / "twinrail-llama.service.j2"), "dest": str(tmp_path / "llama.service")},
             "vars": {"inventory_hostname": "gpu-a"}},
            {"name": "Split out", "ansible.builtin.copy": {
                "content": "{{ __service_split | to_nice_yaml }}", "dest": str(tmp_path / "split.yml")}},
        ],
    }]
    book = tmp_path / "render.yml"
    book.write_text(yaml.safe_dump(play))
    # the inventory sets twinrail_gpu_count per host, as inventory/example-8gpu does
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        host: ({"twinrail_gpu_count": counts[host]} if host in counts else {}) for host in ("localhost", "gpu-a")}}}))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(["ansible-playbook", "-i", str(inventory), str(book)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return {name: (tmp_path / name).read_text() for name in ("rpc.service", "llama.service", "split.yml")}


def exec_start(unit: str) -> str:
    (line,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return line


def test_an_8_gpu_worker_exposes_every_gpu_on_each_rail_server(tmp_path):
    out = render(tmp_path, {"gpu-a": 8, "localhost": 8}, True)
    assert exec_start(out["rpc.service"]).endswith(
        " -c --device CUDA0,CUDA1,CUDA2,CUDA3,CUDA4,CUDA5,CUDA6,CUDA7")
    assert "Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID" in out["rpc.service"]
    assert "Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID" in out["llama.service"]
    split = yaml.safe_load(out["split.yml"])
    assert split["server_devices"] == [8, 8] and split["master_devices"] == 8
    assert len(split["tensor_split"]) == 24


def test_a_node_without_several_gpus_renders_as_before(tmp_path):
    out = render(tmp_path, {}, False)
    assert exec_start(out["rpc.service"]) == (
        "ExecStart=/opt/twinrail/runtime/current/bin/ggml-rpc-server -H %i -p ${TWINRAIL_RPC_PORT} "
        "-t ${TWINRAIL_RPC_THREADS} -c")
    assert "CUDA_DEVICE_ORDER" not in out["rpc.service"] + out["llama.service"]
    assert yaml.safe_load(out["split.yml"])["gpu_devices"] == {}
