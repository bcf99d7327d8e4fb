"""Who may call what through the proxy.

nginx checks the operators' accounts (basic authentication against its
htpasswd) and hands the guard, on every request it passes, the account it
checked (``X-Twinrail-User``, empty when it checked none) and its own mark
(``X-Twinrail-Proxy``); it sets both itself, so what a client sends under
those names never arrives. A request with an ``Authorization: Bearer`` key
is not checked by nginx (basic authentication is off for it) but here:
the key's SHA-256 digest against every known digest, each comparison in
constant time and all of them every time, so neither the answer's time nor
its content says which key, or how much of one, was right.

API keys reach the API (``/v1/...`` and ``/health``); the service's
internals (``/slots``, ``/props``, ``/metrics``, the guard's own
``/twinrail/status``) are for the operators' accounts. A client on the
master's loopback that did not come through nginx is the node itself (the
stages' gates, the monitoring): it may ask anything, as it could ask
llama-server on its loopback port directly.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass

API_PREFIXES = ("/v1/",)
API_PATHS = ("/health", "/v1/models")


@dataclass(frozen=True)
class Caller:
    kind: str  # "operator", "key" or "local"
    name: str

    def may(self, path: str) -> bool:
        """Whether this caller may ask for path (query string ignored)."""
        if self.kind != "key":
            return True
        bare = path.split("?", 1)[0]
        return bare in API_PATHS or bare.startswith(API_PREFIXES)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class Keys:
    """The API keys' digests, from a JSON file the service stage writes
    (``{"keys": [{"name": ..., "sha256": ...}]}``), read again whenever the
    file changes: a key revoked by a run stops working without a restart."""

    def __init__(self, path: str | None):
        self.path = path
        self._seen: tuple[int, int, int] | None = None
        self._keys: list[tuple[str, str]] = []

    def _current(self) -> list[tuple[str, str]]:
        if not self.path:
            return []
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            self._seen, self._keys = None, []
            return []
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if seen != self._seen:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
            self._keys = [(str(k["name"]), str(k["sha256"]).lower()) for k in data.get("keys", [])]
            self._seen = seen
        return self._keys

    def names(self) -> list[str]:
        return sorted(name for name, _ in self._current())

    def match(self, key: str) -> str | None:
        """The name of the key, or None; every digest is compared."""
        wanted = digest(key)
        found = None
        for name, known in self._current():
            if hmac.compare_digest(wanted, known):
                found = name
        return found


def caller(headers, keys: Keys) -> Caller | None:
    """Who sent a request with these headers, or None when it must get a 401."""
    if headers.get("X-Twinrail-Proxy") is None:
        return Caller("local", "")
    user = (headers.get("X-Twinrail-User") or "").strip()
    if user:
        return Caller("operator", user)
    scheme, _, token = (headers.get("Authorization") or "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        name = keys.match(token.strip())
        if name is not None:
            return Caller("key", name)
    return None
