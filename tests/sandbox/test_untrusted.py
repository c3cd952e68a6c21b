"""The host's reads of trial-written paths: no link is followed at any depth, no FIFO or device is opened (so no
read ever blocks), sizes are capped, and a snapshot holds exactly the bytes it digested."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from sandbox import untrusted
from sandbox.untrusted import UntrustedPathError

SECRET = "hidden test item 37+58=95"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    """A file outside the trial's folder, as the grader's test.jsonl is."""
    path = tmp_path / "grader" / "test.jsonl"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


@pytest.fixture
def trial(tmp_path: Path) -> Path:
    folder = tmp_path / "trial"
    (folder / "output" / "sub").mkdir(parents=True)
    (folder / "output" / "config.json").write_text('{"a": 1}')
    (folder / "output" / "sub" / "w.bin").write_bytes(b"\x00" * 10)
    (folder / "log.txt").write_text("line 1\nline 2\n")
    return folder


def test_regular_files_are_read(trial: Path) -> None:
    assert untrusted.read_json(trial, "output/config.json") == {"a": 1}
    assert untrusted.read_text(trial, "log.txt") == "line 1\nline 2\n"
    assert untrusted.tail_text(trial, "log.txt", max_bytes=7) == "line 2\n"
    assert untrusted.is_file(trial, "log.txt") and not untrusted.is_file(trial, "output")


@pytest.mark.parametrize("relative", [True, False])
def test_a_link_to_a_file_is_never_followed(trial: Path, secret: Path, relative: bool) -> None:
    link = trial / "output" / "metrics.json"
    link.symlink_to(os.path.relpath(secret, link.parent) if relative else secret)
    with pytest.raises(UntrustedPathError, match="symlink"):
        untrusted.read_text(trial, "output/metrics.json")
    with pytest.raises(UntrustedPathError):
        untrusted.tail_text(trial, "output/metrics.json")
    assert not untrusted.is_file(trial, "output/metrics.json")


def test_a_link_to_a_folder_on_the_way_is_never_followed(trial: Path, secret: Path) -> None:
    (trial / "output" / "t02").symlink_to(secret.parent, target_is_directory=True)
    with pytest.raises(UntrustedPathError, match="not followed"):
        untrusted.read_text(trial, "output/t02/test.jsonl")
    assert not untrusted.is_file(trial, "output/t02/test.jsonl")


def test_the_root_itself_may_not_be_a_link(tmp_path: Path, secret: Path) -> None:
    (tmp_path / "root").symlink_to(secret.parent, target_is_directory=True)
    with pytest.raises(UntrustedPathError):
        untrusted.read_text(tmp_path / "root", "test.jsonl")


def test_paths_may_not_climb_out(trial: Path, secret: Path) -> None:
    for bad in ("../grader/test.jsonl", str(secret), "output/../../grader/test.jsonl"):
        with pytest.raises(UntrustedPathError):
            untrusted.read_text(trial, bad)


def test_a_fifo_is_refused_without_blocking(trial: Path) -> None:
    os.mkfifo(trial / "output" / "log.txt")
    done = threading.Event()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            untrusted.read_text(trial, "output/log.txt")
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(5), "reading a FIFO blocked"
    assert isinstance(errors[0], UntrustedPathError) and "FIFO" in str(errors[0])
    with pytest.raises(UntrustedPathError):
        untrusted.tail_text(trial, "output/log.txt")


def test_a_device_is_refused(trial: Path) -> None:
    with pytest.raises(UntrustedPathError, match="device"):
        untrusted.read_bytes(Path("/dev"), "zero")


def test_an_oversized_file_is_refused_but_its_tail_is_read(trial: Path) -> None:
    big = trial / "output" / "big.txt"
    with big.open("wb") as handle:
        handle.truncate(10 * 1024 * 1024)  # sparse: cheap to make, large to read
        handle.seek(10 * 1024 * 1024 - 4)
        handle.write(b"end\n")
    with pytest.raises(UntrustedPathError, match="cap"):
        untrusted.read_text(trial, "output/big.txt", max_bytes=1024)
    assert untrusted.tail_text(trial, "output/big.txt", max_bytes=4) == "end\n"


def test_walk_lists_real_files_and_refuses_a_tree_with_a_link(trial: Path, secret: Path) -> None:
    assert [f.rel for f in untrusted.walk(trial, "output")] == ["config.json", "sub/w.bin"]
    (trial / "output" / "sub" / "leak").symlink_to(secret)
    with pytest.raises(UntrustedPathError, match="symlink"):
        untrusted.walk(trial, "output")


def test_walk_refuses_special_files_and_limits(trial: Path) -> None:
    with pytest.raises(UntrustedPathError, match="more than 1 files"):
        untrusted.walk(trial, "output", limits=untrusted.TreeLimits(max_files=1))
    with pytest.raises(UntrustedPathError, match="bytes"):
        untrusted.walk(trial, "output", limits=untrusted.TreeLimits(max_total_bytes=5))
    os.mkfifo(trial / "output" / "pipe")
    with pytest.raises(UntrustedPathError, match="FIFO"):
        untrusted.walk(trial, "output")


def test_snapshot_copies_exactly_what_it_digests(trial: Path, tmp_path: Path) -> None:
    digest = untrusted.snapshot(trial, "output", tmp_path / "copy")
    assert digest == untrusted.tree_digest(trial, "output") == untrusted.tree_digest(tmp_path / "copy")
    assert (tmp_path / "copy" / "sub" / "w.bin").read_bytes() == b"\x00" * 10
    (trial / "output" / "config.json").write_text('{"a": 2}')  # the trial changes its folder afterwards
    assert untrusted.tree_digest(trial, "output") != digest
    assert untrusted.tree_digest(tmp_path / "copy") == digest  # the copy did not change
    with pytest.raises(FileExistsError):  # never into a folder that exists
        untrusted.snapshot(trial, "output", tmp_path / "copy")


def test_host_dir_refuses_a_planted_link(tmp_path: Path, secret: Path) -> None:
    run = tmp_path / "run"
    (run / "trials").mkdir(parents=True)
    made = untrusted.host_dir(run / "trials" / "t01", anchor=run)
    assert made.is_dir() and not made.is_symlink()
    (run / "trials" / "t02").symlink_to(secret.parent, target_is_directory=True)
    with pytest.raises(UntrustedPathError, match="symlink"):
        untrusted.host_dir(run / "trials" / "t02", anchor=run)
    with pytest.raises(UntrustedPathError):
        untrusted.host_dir(run / "trials" / "t02" / "deeper", anchor=run)
    assert sorted(p.name for p in secret.parent.iterdir()) == ["test.jsonl"]  # nothing written there
