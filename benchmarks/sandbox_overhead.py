"""What a sandbox costs a trial: start-to-first-instruction and end-to-end, for a bare local process, the local
sandbox isolated by namespaces (bubblewrap), and docker, measured side by side (round-robin) in one run; each
isolating backend twice: with the workspace alone, and with a trial's mounts (`+trial`: the run's workspace, the
start checkpoint, the base model and the trial's record read-only at fixed paths, its output the writable folder).

    python benchmarks/sandbox_overhead.py [--n 20] [--train-seconds 20]

Targets: isolated local < 50 ms over a bare process a trial start; docker < 0.5 s; a trial's mounts within +50 ms of
the workspace alone; < 5% of a one-minute trial end to end. The first figure is the time from `Sandbox.run()` being called to the command's first Python statement (it
prints time.time()); the second, the whole `run()` including teardown. With the trainer image present, a short real
torch training loop is also run and the difference reported as a share of a one-minute trial. Docker is left out,
with a line saying why, where it is not usable.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sandbox.backends.docker import DockerSandbox
from sandbox.backends.local import LocalSandbox
from sandbox.base import Sandbox, SandboxRequest
from sandbox.images import TRAINER_IMAGE
from sandbox.status import docker_status
from sandbox.view import FIXED, TrialView

STAMP = "import time; print('T0', repr(time.time()), flush=True)"
TRAIN = """
import time, torch
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(512, 64), torch.randn(512, 1)
end = time.monotonic() + {seconds}
steps = 0
while time.monotonic() < end:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step(); steps += 1
print('steps', steps, 'loss', float(loss))
"""


def trial_layout(root: Path) -> TrialView:
    """A trial's host folders as a run lays them out (a small model folder standing in for the checkpoints)."""
    host = TrialView(
        workspace=root / "run" / "workspace",
        model=root / "models" / "m",
        base=root / "models" / "m",
        trial=root / "run" / "trials" / "t01",
        output=root / "run" / "trials" / "t01" / "output",
    )
    for folder in (host.workspace / "data", host.model, host.output):
        folder.mkdir(parents=True, exist_ok=True)
    (host.workspace / "data" / "train.jsonl").write_text('{"id": "1", "prompt": "1+1=", "answer": "2"}\n')
    (host.model / "config.json").write_text("{}")
    (host.trial / "config.json").write_text("{}")
    return host


def one_start(
    sandbox: Sandbox, python: str, ws: Path, i: int, trial: TrialView | None
) -> tuple[float, float]:
    log_path = ws.parent / f"start-{sandbox.name}-{i}{'-trial' if trial else ''}.log"
    if trial is None:
        request = SandboxRequest(command=[python, "-c", STAMP], workspace=ws, log_path=log_path)
    else:
        request = SandboxRequest(
            command=[python, "-c", STAMP],
            workspace=trial.output,
            workspace_target=FIXED.output,
            workdir=FIXED.workspace,
            mounts=trial.mounts(FIXED),
            log_path=log_path,
        )
    t0 = time.time()
    result = sandbox.run(request)
    total = time.time() - t0
    if not result.ok:
        raise RuntimeError(f"{sandbox.name} run failed: {result.reason()}\n{result.log_tail}")
    stamp = next(line for line in result.log_tail.splitlines() if line.startswith("T0 "))
    return float(stamp.split()[1]) - t0, total


def measure_starts(
    boxes: dict[str, tuple[Sandbox, str, TrialView | None]], n: int, ws: Path
) -> dict[str, tuple[float, float]]:
    """Median (start, whole run) per sandbox, the sandboxes taking turns so machine noise hits them alike."""
    starts: dict[str, list[float]] = {k: [] for k in boxes}
    totals: dict[str, list[float]] = {k: [] for k in boxes}
    for i in range(n):
        for name, (sandbox, python, trial) in boxes.items():
            start, total = one_start(sandbox, python, ws, i, trial)
            starts[name].append(start)
            totals[name].append(total)
    return {k: (statistics.median(starts[k]), statistics.median(totals[k])) for k in boxes}


def measure_train(sandbox: Sandbox, python: str, seconds: float, ws: Path) -> float:
    request = SandboxRequest(
        command=[python, "-c", TRAIN.format(seconds=seconds)],
        workspace=ws,
        log_path=ws.parent / "train.log",
        cpus=1.0,
    )
    t0 = time.time()
    result = sandbox.run(request)
    if not result.ok:
        raise RuntimeError(f"{sandbox.name} training run failed: {result.reason()}\n{result.log_tail}")
    return time.time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--train-seconds", type=float, default=20.0)
    parser.add_argument("--image", default=TRAINER_IMAGE)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "workspace"
        ws.mkdir()
        trial = trial_layout(Path(tmp))
        boxes: dict[str, tuple[Sandbox, str, TrialView | None]] = {
            "bare": (LocalSandbox(isolate=False), sys.executable, None)
        }
        isolated = LocalSandbox()
        if isolated.isolation == "namespaces":
            boxes["isolated"] = (isolated, sys.executable, None)
            boxes["isolated+trial"] = (isolated, sys.executable, trial)
        else:
            print(f"local isolated: not measured ({isolated.isolation_reason})")
        status = docker_status(args.image)
        docker = DockerSandbox(image=args.image) if status.usable else None
        if docker is not None:
            boxes["docker"] = (docker, "python3", None)
            boxes["docker+trial"] = (docker, "python3", trial)
        else:
            print(f"docker: not measured ({status.summary()})")
        medians = measure_starts(boxes, args.n, ws)
        bare_start, bare_total = medians["bare"]
        print(f"start-to-first-instruction, median of {args.n} (round-robin):")
        for name, (start, total) in medians.items():
            extra = "" if name == "bare" else f"   overhead {1000 * (start - bare_start):+.0f} ms a start, "
            extra += "" if name == "bare" else f"{1000 * (total - bare_total):+.0f} ms a whole run"
            print(f"  {name:15s}{start:.3f} s   (whole run() {total:.3f} s){extra}")
        if "isolated" in medians:
            print(
                f"  isolated local target: < 50 ms a start over bare: {1000 * (medians['isolated'][0] - bare_start):.0f} ms"
            )
        if "docker" in medians:
            print(
                f"  docker target: < 500 ms a start over bare: {1000 * (medians['docker'][0] - bare_start):.0f} ms"
            )
        for name in ("isolated", "docker"):
            if f"{name}+trial" in medians:
                mounts = 1000 * (medians[f"{name}+trial"][0] - medians[name][0])
                print(f"  {name} trial mounts target: within +50 ms of the workspace alone: {mounts:+.0f} ms")
        if docker is not None and args.image == TRAINER_IMAGE and args.train_seconds > 0:
            local_train = measure_train(LocalSandbox(isolate=False), sys.executable, args.train_seconds, ws)
            docker_train = measure_train(docker, "python", args.train_seconds, ws)
            extra_s = docker_train - local_train
            print(f"end to end, a {args.train_seconds:g}-s torch training loop (1 CPU):")
            print(
                f"  bare {local_train:.2f} s, docker {docker_train:.2f} s, overhead {extra_s:+.2f} s "
                f"= {100 * extra_s / 60:.1f}% of a one-minute trial (target < 5%)"
            )
        if docker is not None:
            docker.close()


if __name__ == "__main__":
    main()
