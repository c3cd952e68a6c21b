"""Relays: listen on one address, forward every connection to one upstream (the grading server).

The docker backend binds a `TcpRelay` on the gateway address of a trial's internal network, so a container can
reach the grader (which listens on the host's 127.0.0.1) through exactly this one port and nothing else. The local
sandbox's trials have a network namespace of their own, which no TCP address of the host reaches: there a
`UnixRelay` on the host listens on a socket file mounted into the sandbox, and `sandbox.gate` inside the sandbox
listens on the grader's own loopback address and forwards to that file.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import threading
from collections.abc import Callable
from pathlib import Path


class Relay:
    """Forwards every connection accepted on `server` to a fresh `connect()`, both ways, until either side ends."""

    def __init__(self, server: socket.socket, connect: Callable[[], socket.socket]) -> None:
        self._connect = connect
        self._server = server
        self._server.settimeout(0.5)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept_loop, name="rlloop-relay", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = self._connect()
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        client.settimeout(None)
        peers = {client: upstream, upstream: client}
        with selectors.DefaultSelector() as sel, client, upstream:
            for sock in peers:
                sel.register(sock, selectors.EVENT_READ)
            open_sides = 2
            while open_sides and not self._stopped.is_set():
                for key, _ in sel.select(timeout=0.5):
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = src.recv(65536)
                    except OSError:
                        data = b""
                    if data:
                        try:
                            peers[src].sendall(data)
                        except OSError:
                            return
                    else:
                        sel.unregister(src)
                        open_sides -= 1
                        with contextlib.suppress(OSError):
                            peers[src].shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._server.close()
        self._thread.join(timeout=2)


class TcpRelay(Relay):
    """Forwards connections from `listen_host:port` (port chosen by the OS) to the TCP address `upstream`."""

    def __init__(self, listen_host: str, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        server = socket.create_server((listen_host, 0))
        self.address: tuple[str, int] = server.getsockname()[:2]
        super().__init__(server, lambda: socket.create_connection(upstream, timeout=10))


class UnixRelay(Relay):
    """Forwards connections to the socket file `path` (made here, mode 0777: the sandbox's uid connects) to the TCP
    address `upstream`."""

    def __init__(self, path: Path, upstream: tuple[str, int]) -> None:
        self.path = path
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(path))
        os.chmod(path, 0o777)
        server.listen(64)
        super().__init__(server, lambda: socket.create_connection(upstream, timeout=10))


def unix_connector(path: str) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(path)
        return sock

    return connect
