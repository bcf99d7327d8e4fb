"""Verify the service stage on each lab node: units running as the service
account with their hardening and memory limits, bound where they must be
(RPC servers on the rail addresses only, llama-server on loopback), the same
versioned configuration on every node, the guard from its versioned release."""

from __future__ import annotations

import json
import re

from lab_client import AGENT_PORT, GUARD_PORT, LLAMA_PORT, RPC_PORT

CONFIG = "/etc/twinrail/service"
RAILS = {"lab-master": ["198.19.0.1", "198.19.1.1"], "lab-worker1": ["198.19.0.2", "198.19.1.2"]}


def units(host) -> dict[str, str]:
    """Unit: its Restart= (every one comes back whatever ended it but a stop:
    ggml-rpc-server exits with status 0 when it cannot bind its address)."""
    if host.backend.get_hostname() == "lab-master":
        return {"twinrail-llama.service": "always", "twinrail-guard.service": "always"}
    return {**{f"twinrail-rpc@{address}.service": "always" for address in RAILS["lab-worker1"]},
            "twinrail-agent.service": "always"}


def test_units_run_as_the_service_account_with_hardening(host):
    # the node's memory is its container's cgroup limit (4 GiB in the lab), not the host's
    memory = json.loads(host.check_output("python3 /opt/twinrail/guard/current/twinrail-guard.pyz memory"))["total"]
    assert memory == 4096 * 2**20
    for unit, restart in units(host).items():
        show = dict(line.split("=", 1) for line in
                    host.check_output(f"systemctl show {unit} -p ActiveState -p User -p "
                                      f"NoNewPrivileges -p ProtectSystem -p ProtectHome -p "
                                      f"PrivateTmp -p LimitMEMLOCK -p MemoryMax -p MemoryHigh "
                                      f"-p Restart -p UnitFileState").splitlines())
        assert show["ActiveState"] == "active" and show["UnitFileState"] == "enabled", show
        assert show["User"] == "twinrail-llm" and show["NoNewPrivileges"] == "yes"
        assert show["ProtectSystem"] == "strict" and show["ProtectHome"] == "yes"
        assert show["PrivateTmp"] == "yes" and show["Restart"] == restart
        if not unit.startswith(("twinrail-guard", "twinrail-agent")):  # the runtime's, for RDMA
            assert show["LimitMEMLOCK"] == "infinity"
        assert abs(int(show["MemoryMax"]) - memory * 0.92) < 1 << 20
        assert abs(int(show["MemoryHigh"]) - memory * 0.85) < 1 << 20
    assert host.user("twinrail-llm").shell == "/usr/sbin/nologin"


def test_each_process_listens_only_where_it_must(host):
    listening = host.check_output("ss -Hltn")
    if host.backend.get_hostname() == "lab-master":
        assert re.findall(rf"(\S+):{LLAMA_PORT}\s", listening) == ["127.0.0.1"], listening
        assert re.findall(rf"(\S+):{GUARD_PORT}\s", listening) == ["127.0.0.1"], listening  # the guard
    else:
        for port in (RPC_PORT, AGENT_PORT):  # RPC servers, the guard's agent
            bound = sorted(re.findall(rf"(\S+):{port}\s", listening))
            assert bound == RAILS["lab-worker1"], listening  # never 0.0.0.0


def test_the_configuration_is_versioned_and_the_same_everywhere(host):
    current = host.file(f"{CONFIG}/current")
    assert current.is_symlink
    env = host.file(f"{CONFIG}/current/service.env").content_string
    assert f"TWINRAIL_RPC_SERVERS=198.19.0.2:{RPC_PORT},198.19.1.2:{RPC_PORT}" in env
    assert "TWINRAIL_MODEL=/srv/twinrail/models/smollm2-135m-instruct/current/" \
           "SmolLM2-135M-Instruct.Q4_1.gguf" in env
    # the version is the hash of the content: the same name on every node
    assert host.check_output(f"sha256sum {CONFIG}/current/service.env | cut -c1-16") == \
        current.linked_to.rsplit("/", 1)[-1]


def test_the_guard_runs_from_the_release_the_configuration_names(host):
    """The guard is a zipapp named by its sha256 under /opt/twinrail/guard/,
    the configuration names that release, and the unit runs it."""
    release = host.file("/opt/twinrail/guard/current").linked_to.rsplit("/", 1)[-1]
    version, _, digest = release.partition("-")
    assert re.fullmatch(r"\d+\.\d+\.\d+", version) and re.fullmatch(r"[0-9a-f]{12}", digest), release
    pyz = f"/opt/twinrail/guard/{release}/twinrail-guard.pyz"
    assert host.check_output(f"sha256sum {pyz}").startswith(digest)
    env = host.file(f"{CONFIG}/current/service.env").content_string
    assert f"TWINRAIL_GUARD_RELEASE={release}\n" in env and f"TWINRAIL_GUARD={pyz}\n" in env
    unit = "twinrail-guard.service" if host.backend.get_hostname() == "lab-master" else "twinrail-agent.service"
    pid = host.check_output(f"systemctl show -p MainPID --value {unit}")
    argv = host.check_output(f"tr '\\000' '\\n' < /proc/{pid}/cmdline").split("\n")
    assert argv[:2] == ["/usr/bin/python3", pyz], argv
