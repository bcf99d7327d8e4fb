"""Verify the runtime stage on the lab nodes: the release, its static link,
its environment, and the binaries running for real."""

from __future__ import annotations

import json

ROOT = "/opt/twinrail/runtime"


def manifest(host) -> dict:
    return json.loads(host.file(f"{ROOT}/current/manifest.json").content_string)


def test_current_points_at_a_release_with_its_manifest(host):
    current = host.file(f"{ROOT}/current")
    assert current.is_symlink
    build = manifest(host)
    assert current.linked_to == f"{ROOT}/{build['build_id']}"
    assert build["cmake"]["GGML_RPC"] == "ON" and build["cmake"]["GGML_NATIVE"] == "OFF"
    assert build["cmake"]["BUILD_SHARED_LIBS"] == "OFF"
    assert build["isa_flags"] == ["-march=x86-64", "-mtune=generic"]
    assert build["source"]["sha256"] == \
        "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
    assert build["built_on"] == "lab-master"  # built once, shipped to the worker


def test_binaries_match_the_manifest_and_are_static(host):
    build = manifest(host)
    assert build["link"]["static"] is True
    for name, digest in build["binaries"].items():
        path = f"{ROOT}/current/bin/{name}"
        assert host.file(path).sha256sum == digest
        assert "statically linked" in host.check_output(f"file -b {path}")
        assert "There is no dynamic section" in host.check_output(f"readelf -d {path}")
    assert set(build["binaries"]) == {"llama-server", "ggml-rpc-server", "llama-bench"}


def test_the_binaries_run(host):
    version = host.run(f"{ROOT}/current/bin/llama-server --version")
    assert version.rc == 0 and "version:" in (version.stdout + version.stderr)
    rpc = host.run(f"{ROOT}/current/bin/ggml-rpc-server --help")
    assert "usage" in (rpc.stdout + rpc.stderr).lower()


def test_runtime_is_exported_to_shells_and_services(host):
    assert host.check_output("bash -lc 'echo $TWINRAIL_RUNTIME'") == f"{ROOT}/current"
    assert f"TWINRAIL_RUNTIME={ROOT}/current" in host.check_output("systemctl show-environment")


def test_the_canary_loaded_the_small_model_on_the_cpu_and_answered(host):
    """A CPU build's canary (library/runtime_canary.py): its verdict kept
    on the node, for the llama-server that is current, with where the
    layers and buffers went and the answer."""
    verdict = json.loads(host.file("/var/lib/twinrail/runtime-canary.json").content_string)
    assert verdict["passed"] is True and verdict["problems"] == []
    assert verdict["key"]["runtime"] == host.file(f"{ROOT}/current/bin/llama-server").sha256sum
    assert verdict["key"]["gpus"] == "none (CPU build)"
    [run] = verdict["runs"]
    assert run["gpu"] is None and run["offloaded"] == [31, 31]
    assert run["buffers_mib"]["CPU model"] > 50 and run["buffers_mib"]["CPU KV"] > 0
    assert set(run["buffers_mib"]) == {"CPU model", "CPU KV"}
    assert run["answer"].strip()
