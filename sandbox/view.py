"""Where a trial sees its folders: the same fixed paths on every backend that maps them, never a host path.

A trial that knew where its run folder lives on the host could plant a link there for a host reader to follow
(`sandbox.untrusted` refuses to follow it; this makes the link lead nowhere as well). So on a backend that
`maps_paths` (isolated local, Docker, Ray on either) the trial's world is:

    /workspace   the run's workspace: description.md, data/ (read-only; the working directory)
    /model       the checkpoint it starts from: the base model or its parent trial's output (read-only)
    /base        the run's base model (read-only)
    /trial       the host's record of this trial: config.json, train.py (read-only)
    /output      its one writable folder: checkpoint, metrics.json, scratch

Configs and environment variables name these paths. An unisolated local run (no namespaces: isolation=none) can
map nothing, so there the same names are the host paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sandbox.base import Mount


@dataclass(frozen=True)
class TrialView:
    """The five folders of a trial, as host paths or as the trial sees them (`FIXED`)."""

    workspace: Path
    model: Path
    base: Path
    trial: Path
    output: Path

    def seen(self, maps: bool) -> TrialView:
        """How the trial sees these host folders: `FIXED` on a backend that maps paths, else the host paths."""
        return FIXED if maps else self

    def mounts(self, seen: TrialView) -> list[Mount]:
        """The read-only mounts of these host folders at where the trial sees them (`output` is the request's
        writable workspace, not a mount)."""
        return [
            Mount(source=self.workspace, target=seen.workspace),
            Mount(source=self.model, target=seen.model),
            Mount(source=self.base, target=seen.base),
            Mount(source=self.trial, target=seen.trial),
        ]


FIXED = TrialView(
    workspace=Path("/workspace"),
    model=Path("/model"),
    base=Path("/base"),
    trial=Path("/trial"),
    output=Path("/output"),
)
