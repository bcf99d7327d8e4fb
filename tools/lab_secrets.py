"""The lab's secrets and trust, kept in the lab's state on the controller
(never in the repository; a site uses ansible-vault): the operator's SSH
key, the service proxy's password, the OpenAI clients' API keys, and the
known hosts read from the nodes' own host keys."""

from __future__ import annotations

import secrets
from pathlib import Path

from lab_topology import STATE_DIR, Topology, container_name, out, run

def ssh_key() -> Path:
    key = STATE_DIR / "ssh" / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "twinrail-lab",
             "-f", str(key)])
    auth = STATE_DIR / "ssh" / "authorized_keys"
    pub = (key.parent / "id_ed25519.pub").read_text()
    if not auth.exists() or auth.read_text() != pub:
        auth.write_text(pub)
        auth.chmod(0o644)
    return key


def service_password() -> Path:
    """The lab's password for the service proxy (user `operator`): made once,
    kept in the lab's state, never in the repository (a site uses ansible-vault)."""
    path = STATE_DIR / "service-password"
    if not path.exists():
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(24) + "\n")
        path.chmod(0o600)
    return path


LAB_API_KEYS = ("lab-client", "lab-spare")


def api_keys() -> Path:
    """The lab's API keys for OpenAI clients (inventory/lab names them): made
    once, kept in the lab's state like the password."""
    folder = STATE_DIR / "api-keys"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name in LAB_API_KEYS:
        path = folder / name
        if not path.exists():
            path.write_text(secrets.token_hex(24) + "\n")
            path.chmod(0o600)
    return folder


def write_known_hosts(topo: Topology) -> None:
    lines = []
    for node in topo.nodes:
        key = out(["docker", "exec", container_name(topo, node.name), "cat",
                   "/etc/ssh/ssh_host_ed25519_key.pub"]).split()
        lines.append(f"{node.address} {key[0]} {key[1]}\n")
    path = STATE_DIR / "known_hosts"
    text = "".join(lines)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
