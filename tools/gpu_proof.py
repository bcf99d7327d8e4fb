#!/usr/bin/env python3
"""make gpu-proof: the CUDA path of the runtime proven on a machine with an
NVIDIA GPU, the CUDA toolkit (nvcc, CMake, Ninja) and no network.

Two steps, because that machine receives at most 64 MiB a call:

  prepare  (here, on the controller: needs the venv and `make bundle`)
           writes build/gpu-proof/: the bundled llama.cpp source trimmed to
           what the build needs (tar.xz), a small model derived from the
           lab's SmolLM2-135M (its first layers, written with gguf-py), the
           runtime stage's own build script rendered by Ansible from
           roles/runtime_build/templates/build.sh.j2 with the stage's CMake
           definitions (module_utils/runtime/build.py) for a CPU and a CUDA
           build, and a manifest with every file's sha256.
  run      (there, from a copy of the tree with build/gpu-proof carried; or
           here, where without a GPU it takes the CPU path)
           builds with that script (CUDA for the architecture of the GPU it
           finds, else CPU), checks the link with the runtime stage's
           allowlist, runs llama-bench with no offload and every layer
           offloaded, starts ggml-rpc-server and llama-server --rpc on
           loopback with the split the plan gives (tensor_split.plan_split)
           and completes one request, runs the project's gates on what the
           machine printed (gpu_facts on nvidia-smi and -q, the split gate
           on llama-server's log, the link check, the transport facts on
           the RPC server's log), and writes gpu-proof.json, gpu-proof.md
           and the raw outputs (captures/) under --out.

The first step lives in gpu_proof_prepare.py; this file runs the second.
`run --dry-run` checks the prepared directory (sizes, sha256, the model's
header, the scripts) and prints what it would run; `make unit` runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tools"))
# pylint: disable=wrong-import-position
from bundle import sha256_file as sha256  # noqa: E402
from gpu_proof_prepare import CARRY_LIMIT, LAYERS, PLACEHOLDERS, PREPARED, WORK, ProofError, prepare  # noqa: E402
import twinrail.loader  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position  (first: module_utils/ joins ansible.module_utils)
from ansible.module_utils.runtime import elf_link  # noqa: E402
from ansible.module_utils.gpu import facts as gpu_facts  # noqa: E402
from ansible.module_utils.engines.llamacpp import rpc_transport  # noqa: E402
from ansible.module_utils.runtime import build as runtime_build  # noqa: E402
from ansible.module_utils.engines.llamacpp import tensor_split  # noqa: E402

# --- run ------------------------------------------------------------------------------

def check_prepared(prepared: Path) -> dict:
    path = prepared / "manifest.json"
    if not path.is_file():
        raise ProofError(f"run: {path} is absent: run `tools/gpu_proof.py prepare` first (it needs the bundle)")
    manifest = json.loads(path.read_text())
    for name, want in manifest["files"].items():
        got = prepared / name
        if not got.is_file() or sha256(got) != want["sha256"]:
            raise ProofError(f"run: {got}: missing or not the prepared file (sha256 {want['sha256']})")
    return manifest


def find_gpu() -> dict | None:
    """The GPU nvidia-smi lists first, with its CUDA architecture, or None."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    proc = subprocess.run([smi, "--query-gpu=index,name,compute_cap", "--format=csv,noheader"],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise ProofError(f"run: nvidia-smi is installed but lists no GPU: {(proc.stdout + proc.stderr).strip()[-300:]}")
    index, name, cap = [c.strip() for c in proc.stdout.splitlines()[0].split(",")]
    return {"index": int(index), "name": name, "compute_cap": cap, "arch": cap.replace(".", "")}


def cuda_root() -> str:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).is_file():
        raise ProofError("run: a GPU is present but nvcc is not (install the CUDA toolkit, or --cpu)")
    return str(Path(nvcc).resolve().parents[1])


def isa_flags() -> str:
    """The instruction set named for this machine's CPU, as the profiles
    name it (the build never guesses: GGML_NATIVE=OFF)."""
    machine = os.uname().machine
    if machine == "aarch64":
        return "-march=armv8.2-a"
    cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace") if Path("/proc/cpuinfo").exists() else ""
    return "-march=x86-64-v3 -mtune=generic" if " avx2" in cpuinfo and " fma" in cpuinfo else "-march=x86-64"


def script_for(prepared: Path, variant: str, arch: str, root: str, jobs: int) -> Path:
    text = (prepared / f"build-{variant}.sh").read_text()
    text = (text.replace(PLACEHOLDERS[0], arch).replace(PLACEHOLDERS[1], root)
            .replace(PLACEHOLDERS[2], shlex.quote(isa_flags())).replace("@JOBS@", str(jobs)))
    path = WORK / f"build-{variant}.sh"
    path.write_text(text)
    path.chmod(0o755)
    return path


def build(prepared: Path, variant: str, arch: str, root: str, jobs: int, log) -> Path:
    top = WORK / f"build-{variant}"
    top.mkdir(parents=True, exist_ok=True)
    # the source of this preparation, unpacked again when it changed (a
    # build directory from another source is not reused)
    stamp, source = top / "source.sha256", prepared / "llama.cpp.tar.xz"
    want = sha256(source)
    if not stamp.is_file() or stamp.read_text().strip() != want:
        shutil.rmtree(top)
        top.mkdir(parents=True)
        with tarfile.open(source) as archive:
            archive.extractall(top)  # noqa: S202  (our own archive, made by prepare)
        stamp.write_text(want + "\n")
    script = script_for(prepared, variant, arch, root, jobs)
    started = time.monotonic()
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    log["build_seconds"] = round(time.monotonic() - started, 1)
    build_log = top / "build.log"
    if proc.returncode != 0:
        tail = build_log.read_text(errors="replace")[-3000:] if build_log.is_file() else proc.stderr[-3000:]
        raise ProofError(f"run: the {variant} build failed (exit {proc.returncode}): {tail}")
    return top / "build" / "bin"


def link_check(bindir: Path, cuda: bool) -> dict:
    allow = runtime_build.link_allowlist([], [], cuda, False)
    results = []
    for name in ("llama-server", "ggml-rpc-server", "llama-bench"):
        path = bindir / name
        dyn = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=False).stdout
        kind = subprocess.run(["file", "-b", str(path)], capture_output=True, text=True, check=False).stdout
        results.append(elf_link.verdict(name, dyn, kind, allow))
    return {"allowlist": allow, "binaries": results, "passed": all(r["passed"] for r in results)}


def bench(bindir: Path, model: Path, ngl: int, captures: Path) -> dict:
    """llama-bench's prefill (pp) and decode (tg) tokens/s at -ngl."""
    argv = [str(bindir / "llama-bench"), "-m", str(model), "-ngl", str(ngl), "-p", "128", "-n", "64", "-r", "3",
            "-o", "json"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
    (captures / f"llama-bench_ngl{ngl}.json").write_text(proc.stdout)
    (captures / f"llama-bench_ngl{ngl}.stderr.txt").write_text(proc.stderr)
    if proc.returncode != 0:
        raise ProofError(f"run: llama-bench -ngl {ngl} exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
    return parse_bench(proc.stdout, proc.stderr)


def parse_bench(text: str, stderr: str = "") -> dict:
    """llama-bench -o json: tokens/s of its prefill and decode tests. A
    failed run prints the JSON's opening bracket alone and its error on
    stderr: quoted, never read as figures."""
    try:
        rows = json.loads(text)
    except json.JSONDecodeError:
        said = " / ".join(line.strip() for line in (stderr or text).splitlines() if line.strip())[-400:]
        raise ProofError(f"llama-bench printed no complete JSON: {said or '(nothing)'}") from None
    out = {}
    for row in rows:
        kind = "pp" if row.get("n_prompt") and not row.get("n_gen") else "tg"
        out[kind] = {"tokens_per_s": round(float(row["avg_ts"]), 2), "stddev": round(float(row["stddev_ts"]), 2),
                     "tokens": row.get("n_prompt") or row.get("n_gen"), "backends": row.get("backends"),
                     "n_gpu_layers": row.get("n_gpu_layers")}
    if set(out) != {"pp", "tg"}:
        raise ProofError(f"llama-bench's JSON has no prefill and decode rows: {text.strip()[-300:]}")
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(check, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise ProofError(f"run: {what} did not come up within {seconds:.0f} s")


def served(bindir: Path, model: Path, layers: int, cuda: bool, captures: Path) -> dict:
    """ggml-rpc-server and llama-server --rpc on loopback with the plan's
    split; one completion; the gates on what both printed."""
    rpc_port, http_port = free_port(), free_port()
    plan = tensor_split.plan_split("master", ["worker"], {"worker": [{"name": "loopback", "address": "127.0.0.1/8"}]},
                                rpc_port, layers, cuda)
    rpc_log, server_log = captures / "rpc-server.log", captures / "llama-server.log"
    rpc_argv = [str(bindir / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(rpc_port)]
    server_argv = [str(bindir / "llama-server"), "-m", str(model), "--rpc", ",".join(plan["endpoints"]),
                   "--host", "127.0.0.1", "--port", str(http_port), "-ngl", str(plan["gpu_layers"]),
                   "--tensor-split", ",".join(f"{p:g}" for p in plan["tensor_split"]), "-c", "2048",
                   "--no-webui", "-lv", "4"]
    procs = []
    try:
        with rpc_log.open("w") as rlog:
            procs.append(subprocess.Popen(rpc_argv, stdout=rlog, stderr=subprocess.STDOUT))  # noqa: S603
        wait_for(lambda: _listening(rpc_port), 60, "ggml-rpc-server")
        with server_log.open("w") as slog:
            procs.append(subprocess.Popen(server_argv, stdout=slog, stderr=subprocess.STDOUT))  # noqa: S603
        wait_for(lambda: _health(http_port), 180, "llama-server")
        body = json.dumps({"prompt": "The capital of France is", "n_predict": 64, "temperature": 0}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{http_port}/completion", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as answer:  # noqa: S310 (loopback)
            completion = json.loads(answer.read())
    finally:
        for proc in reversed(procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    (captures / "completion.json").write_text(json.dumps(completion, indent=2))
    buffers = tensor_split.parse_buffers(server_log.read_text(errors="replace"))
    measured = tensor_split.measured_shares(buffers["buffers"], plan["devices"], "master")
    rpc_facts = rpc_transport.parse_log(rpc_log.read_text(errors="replace"))
    timings = completion.get("timings", {})
    return {
        "argv": {"rpc": rpc_argv, "server": server_argv}, "plan": plan["lines"],
        "completion": {"text": completion.get("content", "")[:200], "tokens": timings.get("predicted_n"),
                       "decode_tokens_per_s": round(float(timings.get("predicted_per_second", 0)), 2),
                       "prefill_tokens_per_s": round(float(timings.get("prompt_per_second", 0)), 2)},
        "split": {"buffers": buffers["buffers"], "error": buffers["error"],
                  "nodes": {h: round(n["share"], 4) for h, n in measured["nodes"].items()},
                  "problems": tensor_split.split_problems(plan, measured, 0.1) if buffers["buffers"] else
                  ["llama-server's log has no buffer lines"]},
        # over loopback TCP: the server healthy and the master connected
        "transport": {"facts": rpc_facts, "problems": [p for p in [rpc_transport.server_problem(rpc_facts)] if p]
                      + ([] if rpc_facts["connections"] else ["no client connection in its log"])},
    }


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:  # noqa: S310
            return answer.status == 200
    except OSError:
        return False


def gpu_gates(captures: Path) -> dict:
    table = subprocess.run(["nvidia-smi"], capture_output=True, text=True, check=False).stdout
    detail = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, check=False).stdout
    (captures / "nvidia-smi.txt").write_text(table)
    (captures / "nvidia-smi_q.txt").write_text(detail)
    facts = gpu_facts.parse_table(table)
    facts["detail"] = gpu_facts.parse_detail(detail)
    problems = facts["problems"] + facts["detail"]["problems"]
    problems += gpu_facts.gpu_node_problems("this machine", facts, len(facts["detail"]["gpus"]))
    return {"driver": facts["driver_version"], "cuda": facts["cuda_version"],
            "gpus": facts["detail"]["gpus"], "problems": problems}


def run(prepared: Path, out: Path, force_cpu: bool, dry_run: bool, jobs: int) -> dict:
    manifest = check_prepared(prepared)
    model = prepared / "model.gguf"
    figures = manifest["model"]["figures"]  # read at prepare (gguf-py is the controller's)
    gpu = None if force_cpu else find_gpu()
    variant = "cuda" if gpu else "cpu"
    root = cuda_root() if gpu and not dry_run else "/usr/local/cuda"
    arch = gpu["arch"] if gpu else "none"
    report = {"machine": {"uname": " ".join(os.uname()), "cpus": os.cpu_count(), "gpu": gpu,
                          "isa_flags": isa_flags()},
              "variant": variant, "model": manifest["model"],
              "prepared_bytes": manifest["total_bytes"]}
    if dry_run:
        report["would_run"] = [f"bash {WORK}/build-{variant}.sh (CUDA architecture {arch})",
                               "llama-bench -ngl 0", f"llama-bench -ngl {figures['layers'] + 1}",
                               "ggml-rpc-server -H 127.0.0.1 + llama-server --rpc 127.0.0.1 with the plan's split"]
        return report
    WORK.mkdir(parents=True, exist_ok=True)
    captures = out / "captures"
    captures.mkdir(parents=True, exist_ok=True)
    bindir = build(prepared, variant, arch, root, jobs, report)
    report["link"] = link_check(bindir, bool(gpu))
    report["bench"] = {"no_offload": bench(bindir, model, 0, captures),
                       "all_offloaded": bench(bindir, model, figures["layers"] + 1, captures)}
    report["rpc"] = served(bindir, model, figures["layers"], bool(gpu), captures)
    report["gpu_gates"] = gpu_gates(captures) if gpu else {"skipped": "no NVIDIA GPU (the CPU path)"}
    return report


def markdown(report: dict) -> str:
    bench_ = report["bench"]
    rows = [("llama-bench, no offload (-ngl 0)", bench_["no_offload"]),
            ("llama-bench, every layer offloaded", bench_["all_offloaded"])]
    gpu = report["machine"]["gpu"]
    lines = [f"# make gpu-proof: {'CUDA on ' + gpu['name'] + ' (' + gpu['compute_cap'] + ')' if gpu else 'the CPU path (no NVIDIA GPU)'}",
             "", f"Machine: `{report['machine']['uname']}`, {report['machine']['cpus']} CPUs; build "
             f"{report.get('build_seconds')} s; model {report['model']['source']} cut to "
             f"{report['model']['layers']} layers.", "",
             "| path | prefill tokens/s | decode tokens/s |", "|---|---|---|"]
    lines += [f"| {name} | {b['pp']['tokens_per_s']} | {b['tg']['tokens_per_s']} |" for name, b in rows]
    comp = report["rpc"]["completion"]
    lines.append(f"| llama-server --rpc on loopback (one request) | {comp['prefill_tokens_per_s']} | "
                 f"{comp['decode_tokens_per_s']} |")
    lines += ["", "| gate | verdict |", "|---|---|",
              f"| runtime_link_check (allowlist {', '.join(report['link']['allowlist']) or 'none'}) | "
              f"{'passed' if report['link']['passed'] else 'FAILED: ' + '; '.join(b['binary'] + ' needs ' + ', '.join(b['offending']) for b in report['link']['binaries'] if not b['passed'])} |",
              f"| tensor_split_gate | {'; '.join(report['rpc']['split']['problems']) or 'passed'} |",
              f"| transport facts | {'; '.join(report['rpc']['transport']['problems']) or 'passed'} |",
              f"| gpu_facts | {report['gpu_gates'].get('skipped') or ('; '.join(report['gpu_gates']['problems']) or 'passed')} |"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="trim the source, derive the model, render the build scripts")
    prep.add_argument("--out", type=Path, default=PREPARED)
    prep.add_argument("--layers", type=int, default=LAYERS)
    go = sub.add_parser("run", help="build, bench, serve over RPC, run the gates")
    go.add_argument("--dir", type=Path, default=PREPARED)
    go.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", REPO / "reports" / "gpu-proof")))
    go.add_argument("--cpu", action="store_true", help="the CPU path even where a GPU is found")
    go.add_argument("--dry-run", action="store_true", help="check the prepared directory, print what would run")
    go.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            manifest = prepare(args.out, args.layers)
            print(f"gpu-proof: prepared {args.out}: {manifest['total_bytes'] / (1 << 20):.1f} MiB "
                  f"(limit {CARRY_LIMIT >> 20} MiB): " + ", ".join(
                      f"{name} {f['bytes'] / (1 << 20):.1f} MiB" for name, f in manifest["files"].items()))
            return 0
        report = run(args.dir, args.out, args.cpu, args.dry_run, args.jobs)
    except ProofError as exc:
        print(f"gpu-proof: {exc}", file=sys.stderr)
        return 1
    if args.dry_run:
        print(json.dumps(report, indent=2))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-proof.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "gpu-proof.md").write_text(markdown(report))
    print(markdown(report))
    failed = (not report["link"]["passed"] or report["rpc"]["split"]["problems"]
              or report["rpc"]["transport"]["problems"] or report["gpu_gates"].get("problems"))
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
