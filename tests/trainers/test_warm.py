"""trainers.warm: the interpreter a trial trains in once the host's go comes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from trainers.warm import WARM_NICENESS

REPO = Path(__file__).resolve().parents[2]

# what the trial runs: its main thread's niceness, and that of the threads torch starts for its first matmul (Linux:
# niceness is a thread's, and a new thread takes its creator's)
PROBE = """
import json, os, sys
from pathlib import Path
import torch
def threads():
    found = {}
    for tid in os.listdir("/proc/self/task"):
        fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        found[tid] = int(fields[16])  # stat's 19th field: nice
    return found
before = threads()
torch.set_num_threads(2)
x = torch.randn(512, 512)
(x @ x).sum()
new = [nice for tid, nice in threads().items() if tid not in before]
Path(sys.argv[1]).write_text(json.dumps({"main": os.getpriority(os.PRIO_PROCESS, 0), "new": new}))
"""


def test_the_trial_trains_at_the_priority_it_was_started_with_while_its_imports_were_niced(
    tmp_path: Path,
) -> None:
    """The imports ran at a lower priority while the previous trial trained; the trial itself must not: beside
    another run's trial on a shared machine (the ladder's --jobs, a sweep), a niced trial was starved of the CPU
    (start-up 18-28 s of a 16-s trial at a load of 6-8)."""
    probe, out, go = tmp_path / "probe.py", tmp_path / "out.json", tmp_path / "go.json"
    probe.write_text(PROBE)
    go.write_text(json.dumps({"argv": [str(probe), str(out)], "started_at": 0.0}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "RLLOOP_RUN_RECIPES": "grpo"}  # no data to prepare
    done = subprocess.run(
        [sys.executable, "-m", "trainers.warm", str(go)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warm: the trainer library is imported" in done.stdout
    seen = json.loads(out.read_text())
    started_with = os.getpriority(os.PRIO_PROCESS, 0)
    assert seen["main"] == started_with != started_with + WARM_NICENESS
    assert seen["new"] and set(seen["new"]) == {started_with}  # the trial's compute threads are not niced
