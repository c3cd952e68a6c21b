"""A TCP relay: listen on one address, forward every connection to one upstream (the grading server).

The docker backend binds it on the gateway address of a trial's internal network, so a container can reach the
grader (which listens on the host's 127.0.0.1) through exactly this one port and nothing else.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class TcpRelay:
    """Forwards connections from `listen_host:port` (port chosen by the OS) to `upstream`."""

    def __init__(self, listen_host: str, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._server = socket.create_server((listen_host, 0))
        self._server.settimeout(0.5)
        self.address: tuple[str, int] = self._server.getsockname()[:2]
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
            upstream = socket.create_connection(self.upstream, timeout=10)
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
