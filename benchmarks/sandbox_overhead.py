"""What a sandbox costs a trial: start-to-first-instruction and end-to-end, docker vs a plain local process.

    python benchmarks/sandbox_overhead.py [--n 10] [--train-seconds 20]

Targets: < 0.5 s per trial start, < 5% of a one-minute trial end to end.
The first figure is the time from `Sandbox.run()` being called to the command's first Python statement (it prints
time.time()); the second, the whole `run()` including teardown. With the trainer image present, a short real torch
training loop is also run in both and the difference reported as a share of a one-minute trial.
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


def measure_start(sandbox: Sandbox, python: str, n: int, ws: Path) -> tuple[float, float]:
    starts, totals = [], []
    for i in range(n):
        request = SandboxRequest(command=[python, "-c", STAMP], workspace=ws, log_path=ws / f"start-{i}.log")
        t0 = time.time()
        result = sandbox.run(request)
        totals.append(time.time() - t0)
        if not result.ok:
            raise RuntimeError(f"{sandbox.name} run failed: {result.reason()}\n{result.log_tail}")
        stamp = next(line for line in result.log_tail.splitlines() if line.startswith("T0 "))
        starts.append(float(stamp.split()[1]) - t0)
    return statistics.median(starts), statistics.median(totals)


def measure_train(sandbox: Sandbox, python: str, seconds: float, ws: Path) -> float:
    request = SandboxRequest(
        command=[python, "-c", TRAIN.format(seconds=seconds)],
        workspace=ws,
        log_path=ws / "train.log",
        cpus=1.0,
    )
    t0 = time.time()
    result = sandbox.run(request)
    if not result.ok:
        raise RuntimeError(f"{sandbox.name} training run failed: {result.reason()}\n{result.log_tail}")
    return time.time() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10)
    parser.add_argument("--train-seconds", type=float, default=20.0)
    parser.add_argument("--image", default=TRAINER_IMAGE)
    args = parser.parse_args()
    status = docker_status(args.image)
    if not status.usable:
        sys.exit(f"cannot measure docker: {status.summary()}")
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "workspace"
        ws.mkdir()
        local, docker = LocalSandbox(), DockerSandbox(image=args.image)
        local_start, local_total = measure_start(local, sys.executable, args.n, ws)
        docker_start, docker_total = measure_start(docker, "python3", args.n, ws)
        print(f"start-to-first-instruction, median of {args.n}:")
        print(f"  local  {local_start:.3f} s   (whole run() {local_total:.3f} s)")
        print(f"  docker {docker_start:.3f} s   (whole run() {docker_total:.3f} s)")
        print(
            f"  docker overhead {docker_start - local_start:+.3f} s a trial start (target < 0.5 s), "
            f"{docker_total - local_total:+.3f} s a whole run; ratio {docker_total / local_total:.2f}x"
        )
        if args.image == TRAINER_IMAGE:
            local_train = measure_train(local, sys.executable, args.train_seconds, ws)
            docker_train = measure_train(docker, "python", args.train_seconds, ws)
            extra = docker_train - local_train
            print(f"end to end, a {args.train_seconds:g}-s torch training loop (1 CPU):")
            print(
                f"  local {local_train:.2f} s, docker {docker_train:.2f} s, overhead {extra:+.2f} s "
                f"= {100 * extra / 60:.1f}% of a one-minute trial (target < 5%)"
            )
        docker.close()


if __name__ == "__main__":
    main()
