"""The host's one way to touch what a trial wrote: never follow a link it made, never block on a file it made.

A trial controls every name under its writable folder: any of them may be a symlink (to the grader's folder, the
token, /etc), a FIFO that blocks whoever opens it, a device, a socket, or a file of many gigabytes. Every host read
of a trial-written path goes through here (the LLM's tools, validation, train metrics, outcome files, the grader's
submission snapshot and contamination scan, MLflow artifacts, log tails, external agents' outputs):

- a path is walked from a trusted `root` one component at a time with `O_NOFOLLOW` (`openat`), so no link is ever
  followed, whether it is the last component or a folder on the way, and `..` is refused;
- the last component is opened `O_NONBLOCK` and must be a regular file (FIFOs, sockets and devices are refused
  before a byte is read) no larger than the caller's cap;
- a tree is listed the same way (`walk`), and copied into a folder the host owns (`snapshot`) with a digest of
  every file's bytes, so what is scored afterwards can no longer change under the scorer.

Host writes never go where a trial can write: `host_dir` makes a host-owned folder and refuses one whose path holds
a link. Everything refused raises `UntrustedPathError` with a sentence that names the path (never its contents).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

MAX_TEXT_BYTES = 4 * 1024 * 1024  # a log tail, a metrics file, a validation.json: what a host read may take
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20


class UntrustedPathError(OSError):
    """A trial-written path the host refuses to read (a link, a special file, too large, outside its root)."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _parts(rel: str | os.PathLike[str]) -> list[str]:
    """The components of a relative path; absolute paths and `..` are refused (a path may not leave its root)."""
    text = os.fspath(rel)
    if "\x00" in text:
        raise UntrustedPathError(f"{text!r} holds a NUL byte")
    pure = PurePosixPath(text)
    if pure.is_absolute():
        raise UntrustedPathError(f"{text} must be relative to the folder it is read from")
    parts = [p for p in pure.parts if p not in ("", ".")]
    if ".." in parts:
        raise UntrustedPathError(f"{text} climbs out of the folder it is read from ('..')")
    return parts


def _open_root(root: Path) -> int:
    try:
        return os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        raise
    except OSError:
        raise UntrustedPathError(
            f"{root} is not a folder that can be opened without following a link"
        ) from None


@contextmanager
def _dir_fd(root: Path, parts: list[str]) -> Iterator[int]:
    """A descriptor of root/parts..., every component opened with O_NOFOLLOW below the previous one."""
    fd = _open_root(root)
    try:
        for i, part in enumerate(parts):
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                raise
            except OSError:
                where = root.joinpath(*parts[: i + 1])
                raise UntrustedPathError(
                    f"{where} is not a folder (a link or a file); it is not followed"
                ) from None
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


@contextmanager
def open_file(
    root: Path, rel: str | os.PathLike[str], *, max_bytes: int | None = MAX_TEXT_BYTES
) -> Iterator[int]:
    """A read descriptor of the regular file root/rel, reached without following any link, never blocking."""
    parts = _parts(rel)
    if not parts:
        raise UntrustedPathError(f"no file named under {root}")
    where = root.joinpath(*parts)
    with _dir_fd(root, parts[:-1]) as parent:
        mode = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode  # FileNotFoundError as is
        if not stat.S_ISREG(mode):  # refused before it is opened: a FIFO or a device is never touched
            raise UntrustedPathError(
                f"{where} is {_kind(mode)}, not a regular file; it is not followed or read"
            )
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
        except OSError:  # swapped for a link since the check (ELOOP), or gone
            raise UntrustedPathError(f"{where} changed while it was opened; it is not followed") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise UntrustedPathError(
                    f"{where} is {_kind(info.st_mode)}, not a regular file; it is not read"
                )
            if max_bytes is not None and info.st_size > max_bytes:
                raise UntrustedPathError(
                    f"{where} is {info.st_size} bytes, over the {max_bytes}-byte cap for this read"
                )
            os.set_blocking(fd, True)
            yield fd
        finally:
            os.close(fd)


def read_bytes(root: Path, rel: str | os.PathLike[str], *, max_bytes: int = MAX_TEXT_BYTES) -> bytes:
    """The whole regular file root/rel (at most `max_bytes`, else refused)."""
    with open_file(root, rel, max_bytes=max_bytes) as fd:
        return _read_all(fd, max_bytes)


def read_text(root: Path, rel: str | os.PathLike[str], *, max_bytes: int = MAX_TEXT_BYTES) -> str:
    return read_bytes(root, rel, max_bytes=max_bytes).decode("utf-8", errors="replace")


def read_json(root: Path, rel: str | os.PathLike[str], *, max_bytes: int = MAX_TEXT_BYTES) -> Any:
    """root/rel parsed as JSON; a file that is not JSON raises ValueError (never quoting its contents)."""
    raw = read_bytes(root, rel, max_bytes=max_bytes)
    try:
        return json.loads(raw)
    except ValueError:
        raise ValueError(f"{root.joinpath(*_parts(rel))} is not valid JSON") from None


def tail_text(root: Path, rel: str | os.PathLike[str], *, max_bytes: int = 64 * 1024) -> str:
    """The last `max_bytes` of a regular file of any size (a log), as text."""
    with open_file(root, rel, max_bytes=None) as fd:
        size = os.fstat(fd).st_size
        os.lseek(fd, max(0, size - max_bytes), os.SEEK_SET)
        return _read_all(fd, max_bytes).decode("utf-8", errors="replace")


@contextmanager
def open_dir(root: Path, rel: str | os.PathLike[str] = "") -> Iterator[int]:
    """A descriptor of the folder root/rel, reached without following any link (for `os.scandir(fd)`)."""
    with _dir_fd(root, _parts(rel)) as fd:
        yield fd


def is_dir(path: Path) -> bool:
    """Whether `path` is a folder itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def is_file(root: Path, rel: str | os.PathLike[str]) -> bool:
    """Whether root/rel is a regular file reached without any link (False for links, FIFOs, folders, nothing)."""
    try:
        parts = _parts(rel)
        with _dir_fd(root, parts[:-1]) as parent:
            return stat.S_ISREG(os.stat(parts[-1], dir_fd=parent, follow_symlinks=False).st_mode)
    except (OSError, IndexError):
        return False


def _read_all(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(_CHUNK, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


@dataclass(frozen=True)
class TreeFile:
    rel: str  # path relative to the walked folder, '/'-separated
    size: int


@dataclass(frozen=True)
class TreeLimits:
    max_files: int = 10_000
    max_total_bytes: int = 64 * 1024**3


def walk(
    root: Path, rel: str | os.PathLike[str] = "", *, limits: TreeLimits = TreeLimits()
) -> list[TreeFile]:
    """Every regular file under root/rel, sorted; refuses the whole tree if it holds a link or a special file, or
    passes the limits (a checkpoint must be made of real files the trial wrote)."""
    top = _parts(rel)
    base = root.joinpath(*top)
    found: list[TreeFile] = []
    total = 0

    def visit(fd: int, prefix: str) -> None:
        nonlocal total
        for name in sorted(os.listdir(fd)):
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            rel_name = f"{prefix}{name}"
            if stat.S_ISDIR(info.st_mode):
                sub = os.open(name, _DIR_FLAGS, dir_fd=fd)
                try:
                    visit(sub, rel_name + "/")
                finally:
                    os.close(sub)
            elif stat.S_ISREG(info.st_mode):
                found.append(TreeFile(rel_name, info.st_size))
                total += info.st_size
                if len(found) > limits.max_files:
                    raise UntrustedPathError(f"{base} holds more than {limits.max_files} files")
                if total > limits.max_total_bytes:
                    raise UntrustedPathError(f"{base} holds more than {limits.max_total_bytes} bytes")
            else:
                raise UntrustedPathError(
                    f"{base / rel_name} is {_kind(info.st_mode)}: a checkpoint must hold only regular files "
                    "(save real files, not links)"
                )

    with _dir_fd(root, top) as fd:
        visit(fd, "")
    return found


def _file_digest(digest: Any, rel: str, fd: int, out: int | None = None) -> None:
    digest.update(f"{rel}\0".encode())
    while chunk := os.read(fd, _CHUNK):
        digest.update(chunk)
        if out is not None:
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
    digest.update(b"\0")


def tree_digest(root: Path, rel: str | os.PathLike[str] = "", *, limits: TreeLimits = TreeLimits()) -> str:
    """SHA-256 over every file's relative path and bytes under root/rel (refused like `walk`)."""
    digest = hashlib.sha256()
    base = _parts(rel)
    for item in walk(root, rel, limits=limits):
        with open_file(root, "/".join([*base, item.rel]), max_bytes=None) as fd:
            _file_digest(digest, item.rel, fd)
    return digest.hexdigest()


def snapshot(
    root: Path, rel: str | os.PathLike[str], dest: Path, *, limits: TreeLimits = TreeLimits()
) -> str:
    """Copy the tree root/rel into `dest` (a new folder the host owns, made here: it must not exist) without
    following any link, and return its `tree_digest`. What is read afterwards from `dest` is what was digested."""
    base = _parts(rel)
    items = walk(root, rel, limits=limits)
    dest.mkdir(mode=0o700)
    digest = hashlib.sha256()
    for item in items:
        target = dest / item.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open_file(root, "/".join([*base, item.rel]), max_bytes=None) as fd:
            out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                _file_digest(digest, item.rel, fd, out)
            finally:
                os.close(out)
    return digest.hexdigest()


def link_tree(
    root: Path, rel: str | os.PathLike[str], dest: Path, *, limits: TreeLimits = TreeLimits()
) -> None:
    """Make every regular file of root/rel appear under `dest` (an empty folder the host owns) as a hard link to the
    same file, never following a link: each file is opened as `open_file` opens it, linked by name from its folder's
    descriptor without following, and the link is checked to be that very file (a name swapped meanwhile is
    refused). Across file systems, or where linking is not allowed, the bytes are copied. Refused like `walk`."""
    base = _parts(rel)
    for item in walk(root, rel, limits=limits):
        parts = [*base, *_parts(item.rel)]
        target = dest / item.rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with _dir_fd(root, parts[:-1]) as folder, open_file(root, "/".join(parts), max_bytes=None) as fd:
            opened = os.fstat(fd)
            try:
                os.link(parts[-1], target, src_dir_fd=folder, follow_symlinks=False)
            except OSError:  # another file system, or not allowed to link: a copy of the bytes it opened
                out = os.open(
                    target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
                )
                try:
                    _file_digest(hashlib.sha256(), item.rel, fd, out)
                finally:
                    os.close(out)
                continue
            linked = os.lstat(target)
            if (linked.st_dev, linked.st_ino) != (opened.st_dev, opened.st_ino):
                os.unlink(target)
                raise UntrustedPathError(
                    f"{root.joinpath(*parts)} changed while it was linked; it is not used"
                )


def host_dir(path: Path, *, anchor: Path, mode: int = 0o755) -> Path:
    """Make `path` (under the host-owned `anchor`) a folder the host owns, creating what is missing; refuse a path
    any of whose components below `anchor` is a link or not a folder (something a trial could have planted)."""
    parts = _parts(path.relative_to(anchor))
    current = anchor
    for part in parts:
        current = current / part
        with suppress(FileExistsError):
            os.mkdir(current, mode)
        info = os.lstat(current)
        if not stat.S_ISDIR(info.st_mode):
            raise UntrustedPathError(
                f"{current} is {_kind(info.st_mode)}; the host does not write through it"
            )
    return path
