#!/usr/bin/env python3
"""Benchmark (not a test): the dgx-spark profile's aarch64 build, for real.

Cross-compiles the static runtime (llama-server, ggml-rpc-server,
llama-bench) for aarch64 with Debian's cross toolchain, from the same
source archive and with the same CMake definitions the runtime stage
computes under `twinrail_profile: dgx-spark` (its ISA flags; CUDA and the
RDMA transport off: this machine has neither nvcc nor an arm64 libibverbs),
then runs it under qemu-aarch64-static: `llama-bench` on a lab model and a
one-token completion from `llama-server`. The same llama-bench on the
controller's native x86-64 build of the lab (the runtime cache) is the
baseline: the figures are printed with their ratio to it, and the time each
step took.

    make bench-aarch64        (tools/bench_aarch64.py; needs the apt packages
                               gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user-static)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CACHE = Path.home() / ".cache" / "twinrail"
WORK = CACHE / "aarch64"
MODEL = CACHE / "bundle" / "models" / "smollm2-135m-instruct" / "SmolLM2-135M-Instruct.Q4_1.gguf"
QEMU = "qemu-aarch64-static"
CROSS = {"CMAKE_SYSTEM_NAME": "Linux", "CMAKE_SYSTEM_PROCESSOR": "aarch64",
         "CMAKE_C_COMPILER": "aarch64-linux-gnu-gcc", "CMAKE_CXX_COMPILER": "aarch64-linux-gnu-g++",
         "CMAKE_FIND_ROOT_PATH": "/usr/aarch64-linux-gnu"}


def step(name: str, started: float) -> float:
    now = time.monotonic()
    print(f"  {name}: {now - started:.1f} s", flush=True)
    return now


def role_cmake(profile: str) -> tuple[dict, dict]:
    """The runtime stage's own CMake definitions and archive settings under
    the profile (its settings tasks, run on the controller)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cmake.json"
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
            {"ansible.builtin.include_role": {"name": "runtime_build", "tasks_from": "settings", "public": True}},
            {"ansible.builtin.copy": {"dest": str(out), "mode": "0644", "content": (
                "{{ {'cmake': __runtime_build_cmake, 'archive': runtime_build_archive, "
                "'sha256': runtime_build_archive_sha256, 'subdir': runtime_build_archive_subdir, "
                "'targets': runtime_build_targets} | to_json }}")}}]}]
        (Path(tmp) / "play.yml").write_text(yaml.safe_dump(play))
        extra = json.dumps({"twinrail_profile": profile, "runtime_build_cuda": False, "runtime_build_rdma": False,
                            "twinrail_runtime_root": "/opt/twinrail", "ansible_python_interpreter": sys.executable})
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
        proc = subprocess.run(["ansible-playbook", "-i", "localhost,", "-c", "local", str(Path(tmp) / "play.yml"),
                               "-e", extra], cwd=REPO, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            sys.exit(f"bench-aarch64: the runtime stage's settings failed:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
        data = json.loads(out.read_text())
    return data["cmake"], data


def native_bench() -> Path | None:
    """llama-bench of the lab's native build, from the controller's runtime cache."""
    for manifest in sorted((CACHE / "runtime").glob("*.json")):
        data = json.loads(manifest.read_text())
        if data.get("cmake", {}).get("CMAKE_C_FLAGS") != "-march=x86-64 -mtune=generic":
            continue
        target = WORK / "native" / manifest.stem
        if not (target / "bin" / "llama-bench").exists():
            target.mkdir(parents=True, exist_ok=True)
            with tarfile.open(manifest.with_suffix(".tar.gz")) as tar:
                tar.extractall(target, filter="data")
        found = list(target.rglob("llama-bench"))
        if found:
            return found[0]
    return None


def bench(argv: list[str], label: str) -> dict:
    started = time.monotonic()
    proc = subprocess.run(argv + ["-m", str(MODEL), "-p", "32", "-n", "16", "-r", "2", "-t", "2", "-o", "json"],
                          capture_output=True, text=True, check=False, timeout=3600)
    if proc.returncode != 0:
        sys.exit(f"bench-aarch64: {label} llama-bench failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    rows = json.loads(proc.stdout)
    out = {"wall_s": round(time.monotonic() - started, 1)}
    for row in rows:
        kind = "pp32" if row["n_prompt"] else "tg16"
        out[kind] = round(row["avg_ts"], 2)
    return out


def one_token(server: Path) -> dict:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(WORK / "llama-server.log", "w")
    proc = subprocess.Popen([QEMU, str(server), "-m", str(MODEL), "--host", "127.0.0.1", "--port", str(port),
                             "-c", "512", "-t", "2", "--no-webui"], stdout=log, stderr=subprocess.STDOUT)
    started = time.monotonic()
    try:
        while time.monotonic() - started < 600:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(1)
        ready = time.monotonic() - started
        body = json.dumps({"prompt": "The capital of France is", "n_predict": 1}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            answer = json.loads(r.read())
        return {"ready_s": round(ready, 1), "content": answer.get("content"),
                "tokens_predicted": answer.get("tokens_predicted")}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="dgx-spark")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    for tool in (QEMU, CROSS["CMAKE_C_COMPILER"], CROSS["CMAKE_CXX_COMPILER"], "cmake", "ninja"):
        if not shutil.which(tool):
            sys.exit(f"bench-aarch64: {tool} not found (apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu "
                     f"qemu-user-static cmake ninja-build)")
    if not MODEL.exists():
        sys.exit(f"bench-aarch64: {MODEL} not found (make bundle)")
    t0 = started = time.monotonic()
    cmake, data = role_cmake(args.profile)
    print(f"bench-aarch64: profile {args.profile}, CMAKE_C_FLAGS {cmake['CMAKE_C_FLAGS']!r}, "
          f"linker {cmake.get('CMAKE_EXE_LINKER_FLAGS')!r}")
    WORK.mkdir(parents=True, exist_ok=True)
    src = WORK / "src"
    if not (src / data["subdir"]).is_dir():
        with tarfile.open(data["archive"]) as tar:
            tar.extractall(src, filter="data")
    build = WORK / "build"
    shutil.rmtree(build, ignore_errors=True)
    defs = [f"-D{k}={v}" for k, v in sorted({**cmake, **CROSS}.items())]
    configure = subprocess.run(["cmake", "-S", str(src / data["subdir"]), "-B", str(build), "-G", "Ninja", *defs],
                               capture_output=True, text=True, check=False)
    if configure.returncode != 0:
        sys.exit(f"bench-aarch64: cmake failed:\n{configure.stdout[-3000:]}{configure.stderr[-3000:]}")
    started = step("configure", started)
    compile_ = subprocess.run(["cmake", "--build", str(build), "--parallel", str(args.jobs), "--target",
                               *data["targets"]], capture_output=True, text=True, check=False)
    if compile_.returncode != 0:
        sys.exit(f"bench-aarch64: the build failed:\n{compile_.stdout[-4000:]}{compile_.stderr[-3000:]}")
    started = step(f"compile ({args.jobs} jobs)", started)
    binaries = {name: build / "bin" / name for name in data["targets"]}
    for name, path in binaries.items():
        kind = subprocess.run(["file", "-b", str(path)], capture_output=True, text=True, check=True).stdout.strip()
        print(f"  {name}: {path.stat().st_size / 1e6:.1f} MB, {kind}")
        if "ARM aarch64" not in kind or "statically linked" not in kind:
            sys.exit(f"bench-aarch64: {name} is not a static aarch64 executable: {kind}")
    version = subprocess.run([QEMU, str(binaries["llama-server"]), "--version"], capture_output=True, text=True,
                             check=False)
    print("  llama-server --version under qemu: " + (version.stdout + version.stderr).strip().splitlines()[-1])
    arm = bench([QEMU, str(binaries["llama-bench"])], "aarch64 (qemu)")
    started = step("llama-bench aarch64 under qemu", started)
    native = native_bench()
    base = bench([str(native)], "native x86-64") if native else None
    started = step("llama-bench native x86-64 (baseline)", started)
    served = one_token(binaries["llama-server"])
    step("llama-server one-token completion under qemu", started)
    print(f"bench-aarch64: model {MODEL.name}, llama-bench -p 32 -n 16 -r 2 -t 2 (tokens/s)")
    print(f"  {'build':24} {'pp32':>8} {'tg16':>8} {'wall s':>8}")
    for label, row in (("aarch64 under qemu", arm), ("x86-64 native (baseline)", base)):
        if row:
            print(f"  {label:24} {row['pp32']:8.2f} {row['tg16']:8.2f} {row['wall_s']:8.1f}")
    if base:
        print(f"  qemu / native: pp32 {arm['pp32'] / base['pp32']:.3f}x, tg16 {arm['tg16'] / base['tg16']:.3f}x")
    print(f"  llama-server under qemu: ready after {served['ready_s']} s, one token: {served['content']!r} "
          f"({served['tokens_predicted']} predicted)")
    print(f"bench-aarch64: {time.monotonic() - t0:.0f} s in all")
    if not served["tokens_predicted"]:
        sys.exit("bench-aarch64: llama-server predicted no token")


if __name__ == "__main__":
    main()
