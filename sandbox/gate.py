"""Inside a local sandbox with `network="grader"`: the grader's loopback address, relayed to a socket file.

    python -m sandbox.gate SOCKET HOST PORT -- COMMAND...

listens on HOST:PORT in the sandbox's own network namespace (the address in RLLOOP_GRADER_URL, so agents use it
unchanged), forwards each connection to SOCKET (the host's `UnixRelay`, which forwards to the real grader), runs
COMMAND, and exits with its exit code. Nothing else of the network is there to reach.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

from sandbox.relay import Relay, unix_connector


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[3] != "--":
        print("usage: python -m sandbox.gate SOCKET HOST PORT -- COMMAND...", file=sys.stderr)
        return 2
    path, host, port, command = argv[0], argv[1], int(argv[2]), argv[4:]
    relay = Relay(socket.create_server((host, port)), unix_connector(path))
    try:
        child = subprocess.Popen(command)
    except OSError as exc:
        print(f"could not start {command[0]!r}: {exc}", file=sys.stderr)
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    code = child.wait()
    relay.close()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
