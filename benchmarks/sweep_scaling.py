"""Sweep scaling on this machine: wall time of the same small sweep with 1 and with 2 runs at once, and the
scheduling overhead per trial of the ray sandbox against the local one (target: under 1 s a trial).

    .venv/bin/python benchmarks/sweep_scaling.py [--seeds 2] [--trials 5]
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console

from agent.sweeps.driver import run_sweep
from agent.sweeps.spec import SweepSpec
from sandbox.base import SandboxRequest

FAST = {"eval_limit": 40, "sandbox": "local", "trial_timeout": 300, "public_fraction": 0.0}


def sweep_wall_s(home: Path, concurrency: int, seeds: int) -> float:
    spec = SweepSpec(
        sweep_id=f"scaling-c{concurrency}",
        benchmarks=["arith"],
        base_models=["tiny-arith"],
        agents=["builtin"],
        seeds=seeds,
        timeout=900,
        loop_n=1,
        concurrency=concurrency,
        run_overrides=FAST,
    )
    started = time.monotonic()
    manifest = run_sweep(spec, home, console=Console(file=io.StringIO()), refresh_s=0.2)
    if manifest.status != "finished":
        sys.exit(f"sweep with concurrency {concurrency} did not finish: {manifest.model_dump_json()}")
    return time.monotonic() - started


def trial_overheads(trials: int) -> tuple[list[float], list[float]]:
    """Wall seconds of a trivial trial through the local sandbox and through the ray sandbox (warm instance)."""
    import ray

    from sandbox.backends.local import LocalSandbox
    from sandbox.backends.ray import RaySandbox

    ray.init(num_cpus=2, object_store_memory=80 * 1024**2, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ws = Path(tmp)

            def request() -> SandboxRequest:
                return SandboxRequest(
                    command=[sys.executable, "-c", "pass"],
                    workspace=ws,
                    log_path=ws.parent / "log.txt",
                    cpus=1,
                )

            local, remote = LocalSandbox(), RaySandbox(inner="local")
            remote.run(request())  # warm the worker pool
            local_s, ray_s = [], []
            for _ in range(trials):
                t0 = time.monotonic()
                local.run(request())
                local_s.append(time.monotonic() - t0)
                t0 = time.monotonic()
                remote.run(request())
                ray_s.append(time.monotonic() - t0)
            return local_s, ray_s
    finally:
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=2, help="runs in the sweep")
    parser.add_argument("--trials", type=int, default=5, help="trivial trials for the overhead figure")
    parser.add_argument("--skip-sweep", action="store_true")
    args = parser.parse_args()
    local_s, ray_s = trial_overheads(args.trials)
    overhead = statistics.median(ray_s) - statistics.median(local_s)
    print(f"trivial trial, local sandbox: median {statistics.median(local_s):.3f}s over {args.trials}")
    print(f"trivial trial, ray sandbox:   median {statistics.median(ray_s):.3f}s over {args.trials}")
    print(
        f"ray scheduling overhead per trial: {overhead:.3f}s (target < 1 s: {'met' if overhead < 1 else 'MISSED'})"
    )
    if args.skip_sweep:
        return
    from trainers.tiny import build_tiny_arith

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        build_tiny_arith(model, seed=0, progress=False)
        walls = {}
        for concurrency in (1, 2):
            home = Path(tmp) / f"home-c{concurrency}"
            shutil.copytree(model, home / "models" / "tiny-arith")
            walls[concurrency] = sweep_wall_s(home, concurrency, args.seeds)
            print(f"sweep of {args.seeds} runs, concurrency {concurrency}: {walls[concurrency]:.1f}s wall")
        print(f"speed-up 2 vs 1 at once: {walls[1] / walls[2]:.2f}x")


if __name__ == "__main__":
    main()
