"""Host firewall rules for a trial network: from its bridge, only the relay port on the host answers.

Docker's `internal` networks stop forwarding to the outside, but a container can still open connections to any
service listening on the host (the INPUT chain). One iptables chain per bridge closes that: accept the relay port,
drop the rest. Needs root and the iptables binary that dockerd itself uses.
"""

from __future__ import annotations

import shutil
import subprocess


def chain_name(bridge: str) -> str:
    return f"RLLOOP-{bridge}"[:28]


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("iptables")
    if exe is None:
        raise RuntimeError("iptables not found: the grader network needs it (install the iptables package)")
    return subprocess.run([exe, "-w", *args], capture_output=True, text=True, check=check)


def allow_only(bridge: str, port: int) -> None:
    """Traffic from `bridge` to this host: TCP to `port` accepted, everything else dropped."""
    chain = chain_name(bridge)
    remove(bridge)
    try:
        _iptables("-N", chain)
        _iptables("-A", chain, "-p", "tcp", "--dport", str(port), "-j", "ACCEPT")
        _iptables("-A", chain, "-j", "DROP")
        _iptables("-I", "INPUT", "1", "-i", bridge, "-j", chain)
    except subprocess.CalledProcessError as exc:
        remove(bridge)
        raise RuntimeError(f"could not add firewall rules for {bridge}: {exc.stderr.strip()}") from exc


def remove(bridge: str) -> None:
    chain = chain_name(bridge)
    while _iptables("-D", "INPUT", "-i", bridge, "-j", chain, check=False).returncode == 0:
        pass
    _iptables("-F", chain, check=False)
    _iptables("-X", chain, check=False)
