"""The `network="grader"` setting: a private docker network from which only the grading server is reachable.

An `internal` bridge network (no route out, no inter-container traffic), a TCP relay on the host bound to that
network's gateway address and forwarding to the grader, and a firewall chain that drops every other connection
from the bridge to the host. The trial sees the grader at `http://<gateway>:<relay port>` (RLLOOP_GRADER_URL).

Names fail at once: Docker's resolver on an internal network leaves a lookup of an outside name unanswered, so
every update check and telemetry call of an agent would hang for the resolver's whole timeout (10 s, measured),
and the container gets `resolv_conf` instead, naming a server on its own loopback where nothing listens. Nothing
inside needs a name: the relay's address is an IP, and `localhost` is in /etc/hosts.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sandbox import firewall
from sandbox.relay import TcpRelay

MANAGED = {"rlloop.managed": "true", "rlloop.kind": "grader-network"}
RESOLV_CONF = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"  # refused at once: nothing listens there


class GraderNetwork:
    """One internal network + relay + firewall chain, for one grader URL."""

    def __init__(self, client: Any, grader_url: str, labels: dict[str, str] | None = None) -> None:
        parts = urlsplit(grader_url)
        if not parts.hostname or not parts.port:
            raise ValueError(f"grader_url {grader_url!r} needs a host and a port, e.g. http://127.0.0.1:8000")
        self.grader_url = grader_url
        short = uuid.uuid4().hex[:8]
        self.name = f"rlloop-grader-{short}"
        self.bridge = f"rlg{short}"
        self.network = client.networks.create(
            self.name,
            driver="bridge",
            internal=True,
            options={
                "com.docker.network.bridge.name": self.bridge,
                "com.docker.network.bridge.enable_icc": "false",
            },
            labels={**MANAGED, **(labels or {})},
        )
        self.relay: TcpRelay | None = None
        # the host's own folder, mounted read-only over /etc/resolv.conf (never a path a trial could have made)
        self._dns_dir = Path(tempfile.mkdtemp(prefix="rlloop-dns-"))
        self.resolv_conf = self._dns_dir / "resolv.conf"
        self.resolv_conf.write_text(RESOLV_CONF)
        self.resolv_conf.chmod(0o644)
        self._dns_dir.chmod(0o755)
        try:
            self.network.reload()
            gateway = self.network.attrs["IPAM"]["Config"][0]["Gateway"]
            self.relay = TcpRelay(gateway, (parts.hostname, parts.port))
            firewall.allow_only(self.bridge, self.relay.address[1])
        except BaseException:
            self.close()
            raise
        host, port = self.relay.address
        self.url = urlunsplit((parts.scheme, f"{host}:{port}", parts.path, parts.query, parts.fragment))

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()
        shutil.rmtree(self._dns_dir, ignore_errors=True)
        firewall.remove(self.bridge)
        with contextlib.suppress(Exception):
            self.network.remove()


def remove_leftovers(client: Any, keep: set[str]) -> int:
    """Remove grader networks (and their firewall chains) left by dead processes; `keep` names live ones."""
    removed = 0
    for network in client.networks.list(filters={"label": [f"{k}={v}" for k, v in MANAGED.items()]}):
        if network.name in keep:
            continue
        bridge = network.attrs.get("Options", {}).get("com.docker.network.bridge.name")
        if bridge:
            firewall.remove(bridge)
        with contextlib.suppress(Exception):
            network.remove()
            removed += 1
    return removed
