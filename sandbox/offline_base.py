"""The offline base image: with no registry, `debootstrap --variant=minbase bookworm` with python3, venv and pip,
imported as `rlloop/base:bookworm` (bookworm's python3 is 3.11, like the host, so the host's wheels fit). Online the
Dockerfile's own `FROM python:3.11-slim` is used instead."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.dockerlib import docker_sdk
from sandbox.images import OFFLINE_BASE

DEBIAN_MIRROR = "http://deb.debian.org/debian"

Say = Callable[[str], None]


def registry_reachable(host: str = "registry-1.docker.io", timeout_s: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def build_offline_base(docker_client: object, say: Say = print, rebuild: bool = False) -> str:
    """Make `rlloop/base:bookworm` from Debian packages with debootstrap (no registry needed)."""
    docker = docker_sdk()

    client: Any = docker_client
    if not rebuild:
        try:
            client.images.get(OFFLINE_BASE)
            say(f"base image {OFFLINE_BASE} present")
            return OFFLINE_BASE
        except docker.errors.ImageNotFound:
            pass
    if os.geteuid() != 0:
        raise RuntimeError("building the offline base needs root (debootstrap): run as root or use --online")
    if shutil.which("debootstrap") is None:
        say("installing debootstrap with apt-get")
        subprocess.run(["apt-get", "install", "-y", "-qq", "debootstrap"], check=True)
    with tempfile.TemporaryDirectory(prefix="rlloop-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        say(f"debootstrap bookworm into {rootfs} (a few minutes)")
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,python3-pip,ca-certificates,passwd",
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (rootfs / junk).glob("*"):
                if item.is_file():
                    item.unlink()
        say(f"importing {rootfs} as {OFFLINE_BASE}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "import", "-c", 'CMD ["/bin/bash"]', "-", OFFLINE_BASE], stdin=tar.stdout, check=True
        )
        if tar.wait() != 0:
            raise RuntimeError("tar of the debootstrap root failed")
    return OFFLINE_BASE
