"""What an earlier, killed process of a run left running, ended before the run goes on, and said in the run log.

A run killed with SIGKILL cannot stop its children. Its trials stop by themselves (the sandboxes tie them to the
run's process) and its grader gets a parent-death signal, but what was still there when the run comes back (an
exited container, a trial or grader that had not gone yet) is ended here, before the resumed run starts a trial in
the same folder or a grader on the same store, and each is named in `run.log` and on the console.
"""

from __future__ import annotations

from collections import Counter

from agent.run.grading import stop_stale_grader
from agent.run.reporting import Reporter
from agent.run.workspace import RunPaths
from sandbox.base import Sandbox


def end_leftovers(sandbox: Sandbox, paths: RunPaths, reporter: Reporter) -> list[str]:
    """End everything of this run an earlier process left (trial containers or processes, the grader); report
    what it was; return the descriptions (empty when nothing was left)."""
    ended: list[str] = []
    found = sandbox.cleanup(paths.labels)
    what = list(getattr(found, "what", ()))
    ended += what or [f"{sandbox.name} sandbox trial process"] * int(found)
    grader = stop_stale_grader(paths)
    if grader is not None:
        ended.append(grader)
    if ended:
        reporter.warn(f"ended {describe(ended)} from the previous attempt")
    return ended


def describe(items: list[str]) -> str:
    """Counts per kind, in first-seen order: "1 leftover trial container of t03, 1 leftover grader process"."""
    counts = Counter(items)
    return ", ".join(
        f"1 leftover {item}" if n == 1 else f"{n} leftovers: {item}" for item, n in counts.items()
    )
