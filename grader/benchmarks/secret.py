"""The run's test seed: drawn once by the grader into its private folder, reused on every restart.

Procedural benchmarks draw their hidden test split from it, so a trial that knows every public seed and rule still
cannot regenerate the test set; a resumed run keeps scoring the same one. An explicit seed (the run config's
`test_seed`, kept in run.json outside the workspace) makes separate runs grade on the same set.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SEED_FILE = "test_seed"
# For callers that are not a grading service (tests, benchmark scripts): a fixed, documented seed. The service
# always uses its run's secret, so this set is not the one any run is graded on.
DEFAULT_TEST_SEED = 0


def run_test_seed(private_dir: Path, explicit: int | None = None) -> int:
    """`explicit` if given, else the seed stored in `private_dir`, created there on first use (mode 0600)."""
    if explicit is not None:
        return explicit
    path = private_dir / SEED_FILE
    try:
        return int(path.read_text().strip())
    except FileNotFoundError:
        pass
    except ValueError:
        raise ValueError(
            f"{path} does not hold an integer test seed; restore it (or delete the run's grader folder to start over)"
        ) from None
    seed = secrets.randbits(63)
    tmp = path.with_name(f".{SEED_FILE}.tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f"{seed}\n")
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(tmp, path)  # never replaces a seed another process wrote first
    except FileExistsError:
        return int(path.read_text().strip())
    finally:
        tmp.unlink()
    return seed
