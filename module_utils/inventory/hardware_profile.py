# -*- coding: utf-8 -*-
"""Whether the hosts are what their hardware profile (profiles/<name>.yml)
says: architecture, an NVIDIA GPU, an RDMA device or a ConnectX function.
Pure functions; library/hardware_facts.py reads a host, preflight judges
every host on the controller (library/profile_gate.py)."""

from __future__ import annotations

import os
import platform
import re

from ansible.module_utils.engines.vllm.env import CPU_KERNELS_NEED, cpu_kernels, node_problems, read_cpu_flags
from ansible.module_utils.gpu import cuda_code
from ansible.module_utils.rails.nccl_log import conf_settings

MELLANOX_VENDOR = "0x15b3"  # NVIDIA networking (Mellanox) PCI vendor id
# "mlx5_0 port 1 ==> ens1f0np0 (Up)"; `| column -t` pads the words, and a
# reader's note may follow as a comment
IBDEV2NETDEV = re.compile(r"^(?P<device>\S+)\s+port\s+(?P<port>\d+)\s+==>\s+(?P<netdev>\S+)\s+\((?P<state>\w+)\)\s*(?:#.*)?$")


def parse_uname_machine(text: str) -> str | None:
    """The machine field of `uname -a` (what `uname -m` and Ansible's
    `architecture` fact give): the third word from the end."""
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 6 and words[0] == "Linux" and words[-1] == "GNU/Linux":
            return words[-4]
    return None


class ParseError(ValueError):
    """The output is not the tool's, or shows it failing."""


def parse_ibdev2netdev(text: str) -> list[dict]:
    """`ibdev2netdev` rows: RDMA device, port, netdev, state; prompts and
    other lines skipped, sorted by device (the tool's row order varies).
    An output with no row (no RDMA device, the driver not loaded, the tool
    failing) is an error quoting what it printed, never an empty list."""
    rows = []
    for line in text.splitlines():
        m = IBDEV2NETDEV.match(line.strip())
        if m:
            rows.append({"device": m["device"], "port": int(m["port"]), "netdev": m["netdev"],
                         "state": m["state"]})
    if not rows:
        said = " / ".join(line.strip() for line in text.splitlines() if line.strip())[-300:]
        raise ParseError(f"ibdev2netdev lists no 'DEVICE port N ==> NETDEV (State)' row: "
                         f"{said or 'it printed nothing (no RDMA device, or its driver is not loaded)'}")
    return sorted(rows, key=lambda r: (r["device"], r["port"]))


# where NCCL or every process's environment takes NCCL_* settings from
NCCL_FILES = ("/etc/nccl.conf", "/etc/environment")


def glibc_version(confstr=os.confstr) -> str | None:
    """The C library's version ("2.36"), None where it is not glibc."""
    try:
        said = confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        return None
    name, _, version = said.partition(" ")
    return version if name == "glibc" and version else None


def read_host(sys_root: str = "/sys", cpuinfo: str = "/proc/cpuinfo", nccl_files: tuple = NCCL_FILES) -> dict:
    """RDMA devices (/sys/class/infiniband) and ConnectX PCI functions (vendor
    0x15b3; present before any RDMA driver is loaded), sorted; the CPU's
    flags (/proc/cpuinfo), which the vLLM engine's CPU kernels need; the
    python3 and glibc a lock's wheels must fit (the Python this runs under
    is the node's python3, which builds the engine's environment); the
    NCCL_* settings of /etc/nccl.conf and /etc/environment (file ->
    settings), which NCCL takes where the engine's unit sets nothing."""
    ib = os.path.join(sys_root, "class", "infiniband")
    devices = sorted(os.listdir(ib)) if os.path.isdir(ib) else []
    functions = []
    pci = os.path.join(sys_root, "bus", "pci", "devices")
    if os.path.isdir(pci):
        for address in sorted(os.listdir(pci)):
            try:
                with open(os.path.join(pci, address, "vendor"), encoding="ascii") as handle:
                    if handle.read().strip().lower() == MELLANOX_VENDOR:
                        functions.append(address)
            except OSError:
                continue
    flags = read_cpu_flags(cpuinfo) or []
    nccl = {}
    for path in nccl_files:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                settings = conf_settings(handle.read())
        except OSError:
            continue
        if settings:
            nccl[path] = settings
    return {"rdma_devices": devices, "connectx_functions": functions, "cpu_flags": flags, "nccl_settings": nccl,
            "python": platform.python_version(), "glibc": glibc_version()}


def host_facts(architecture: dict, hardware: dict, gpu: dict) -> dict:
    """{host: {architecture, gpus, rdma_devices, connectx_functions}} from
    Ansible's architecture fact, hardware_facts and gpu_facts (None where
    nvidia-smi is absent) per host."""
    out = {}
    for host in sorted(architecture):
        seen = gpu.get(host)
        out[host] = {"architecture": architecture[host], "gpus": len(seen["gpus"]) if seen else None,
                     "gpu_list": [{k: g.get(k) for k in ("index", "name", "compute_cap")} for g in seen["gpus"]]
                     if seen else [],
                     **(hardware.get(host) or {"rdma_devices": [], "connectx_functions": []})}
    return out


def gpu_code_problems(host: str, gpus: list[dict], lock: dict) -> list[str]:
    """Each GPU of a node against the device code of the lock's libraries
    (lock["code"]: {library: [sm_XY, compute_XY, ...]}, as make
    vllm-gpu-check listed it): a GPU that runs none of a library's code, or
    whose compute capability nvidia-smi did not say, is named."""
    out = []
    for gpu in gpus:
        label = f"GPU {gpu.get('index')} ({gpu.get('name')})"
        cc = gpu.get("compute_cap")
        if not cc:
            out.append(f"{host}: {label}: nvidia-smi did not say its compute capability (--query-gpu=compute_cap, "
                       f"drivers from 510 on), so whether {lock['name']}'s CUDA code runs on it cannot be judged")
            continue
        for library, names in sorted(lock["code"].items()):
            codes = cuda_code.from_names(names)
            found = cuda_code.coverage(codes, cc)
            if not found["runs"]:
                out.append(f"{host}: {label}, compute capability {cc[:-1]}.{cc[-1]}: "
                           f"{cuda_code.said(cc, library, found, codes)}; {lock['name']} cannot serve on it: "
                           "pin a lock built for this GPU (make vllm-locks, make vllm-gpu-check) or run llama.cpp "
                           "(inference_service_engine: llamacpp)")
    return out


def judge(profile: str, expect: dict, hosts: dict, cuda: bool, rdma: bool, engine_device: str | None = None,
          lock: dict | None = None) -> list[str]:
    """One sentence per host that does not match: hosts is {host:
    {architecture, gpus (count, None without nvidia-smi), rdma_devices,
    connectx_functions, cpu_flags, python, glibc}}; cuda and rdma are the
    build's switches; engine_device "cpu" when the vLLM engine's lock is a
    CPU build (its x86-64 kernels need the CPU's AVX2); lock, when the
    engine installs a lock of wheels, {"needs": env.lock_needs(...), "name"}:
    each node must fit its wheels' architecture, Python and glibc, and,
    with lock["code"] (a CUDA lock's device code), each GPU must run it."""
    failures = []
    for host in sorted(hosts):
        facts = hosts[host]
        arch = facts.get("architecture")
        if arch != expect["architecture"]:
            failures.append(f"{host}: twinrail_profile {profile} is for {expect['architecture']} hosts, this one is "
                            f"{arch}; name the profile of this hardware (profiles/<name>.yml)")
        gpus = facts.get("gpus")
        if (cuda or expect["gpu"]) and not gpus:
            why = "runtime_build_cuda is true" if cuda else f"twinrail_profile {profile} expects one"
            failures.append(f"{host}: no NVIDIA GPU ({'nvidia-smi lists none' if gpus == 0 else 'no nvidia-smi'}) "
                            f"while {why}")
        if (rdma or expect["rdma"]) and not facts.get("rdma_devices") and not facts.get("connectx_functions"):
            why = "runtime_build_rdma is true" if rdma else f"twinrail_profile {profile} expects one"
            failures.append(f"{host}: no RDMA device (/sys/class/infiniband is empty) and no ConnectX PCI function "
                            f"(vendor {MELLANOX_VENDOR}) while {why}")
        if lock:
            failures.extend(node_problems(host, lock["needs"], facts, lock["name"]))
            if lock.get("code") is not None:
                failures.extend(gpu_code_problems(host, facts.get("gpu_list") or [], lock))
        if engine_device == "cuda" and facts.get("gpus"):
            for path, settings in sorted((facts.get("nccl_settings") or {}).items()):
                failures.append(f"{host}: {path} sets {', '.join(settings)}: NCCL takes these under the vLLM "
                                "group's own settings (a stale NCCL_IB_DISABLE, NCCL_P2P_DISABLE or NCCL_IB_USE_INLINE "
                                "breaks or hangs the group's first collective); remove them, twinrail sets what NCCL "
                                "needs in the engine's unit")
        if engine_device == "cpu" and arch == "x86_64":
            kernels = cpu_kernels(facts.get("cpu_flags") or [])
            if kernels["library"] is None:
                failures.append(f"{host}: the vLLM engine's lock is a CPU build whose x86-64 kernels need "
                                f"{' and '.join(CPU_KERNELS_NEED)}; this CPU lacks {', '.join(kernels['missing'])} "
                                "(/proc/cpuinfo flags) and would die of SIGILL; run llama.cpp on this node "
                                "(inference_service_engine: llamacpp)")
    return failures
