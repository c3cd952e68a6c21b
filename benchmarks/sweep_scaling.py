"""Sweep scaling on this machine: wall time of the same small sweep with 1 and with 2 runs at once, and the
scheduling overhead per trial of the ray sandbox against the local one (target: under 1 s a trial).

    .venv/bin/python benchmarks/sweep_scaling.py [--seeds 2] [--trials 5]

With `--nodes 1,2`, the same on a multi-node Ray cluster started on this machine (a head that runs nothing and N
worker raylets, `ray.cluster_utils.Cluster`): runs per minute of a sweep spread by `rlloop bench --executor ray`
(one run per worker node at a time), the ray sandbox's scheduling overhead per trivial trial in milliseconds
against the same trial in the local sandbox, and the ratio of runs per minute on N nodes to 1 node.

    nice -n 10 .venv/bin/python benchmarks/sweep_scaling.py --nodes 1,2 [--seeds 2] [--trials 10]
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

FAST = {"eval_limit": 40, "sandbox": "local", "trial_timeout": 300, "public_fraction": 0.0, "trial_steps": 25}


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

    # address "local": a new instance of its own, never a cluster another test (or `ray start`) runs here
    ray.init(
        address="local",
        num_cpus=2,
        object_store_memory=80 * 1024**2,
        include_dashboard=False,
        log_to_driver=False,
    )
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


def cluster_figures(workers: int, seeds: int, trials: int, model: Path, root: Path) -> dict[str, float]:
    """Start a head (no trials) and `workers` worker nodes (1 CPU each: one run at a time), run the sweep through
    the Ray executor and trivial trials through the ray sandbox; return runs/min and overhead in ms."""
    import ray
    from ray.cluster_utils import Cluster

    from agent.sweeps.executors import RayExecutor
    from sandbox.backends.local import LocalSandbox
    from sandbox.backends.ray import RaySandbox

    store = 80 * 1024**2
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "object_store_memory": store, "include_dashboard": False},
    )
    for _ in range(workers):
        cluster.add_node(num_cpus=1, object_store_memory=store)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        ws = root / f"trivial-{workers}" / "workspace"
        ws.mkdir(parents=True)

        def request() -> SandboxRequest:
            return SandboxRequest(
                command=[sys.executable, "-c", "pass"], workspace=ws, log_path=ws.parent / "log.txt", cpus=1
            )

        local, remote = LocalSandbox(), RaySandbox(inner="local")
        remote.run(request())  # warm: a worker process on a node
        local_s, ray_s = [], []
        for _ in range(trials):
            t0 = time.monotonic()
            local.run(request())
            local_s.append(time.monotonic() - t0)
            t0 = time.monotonic()
            remote.run(request())
            ray_s.append(time.monotonic() - t0)
        home = root / f"home-n{workers}"
        shutil.copytree(model, home / "models" / "tiny-arith")
        spec = SweepSpec(
            sweep_id=f"scaling-n{workers}",
            benchmarks=["arith"],
            base_models=["tiny-arith"],
            agents=["builtin"],
            seeds=seeds,
            timeout=900,
            loop_n=1,
            concurrency=seeds,
            ray_address=cluster.address,
            run_overrides=FAST,
        )
        started = time.monotonic()
        manifest = run_sweep(
            spec, home, console=Console(file=io.StringIO()), executor=RayExecutor(None), refresh_s=0.2
        )
        wall = time.monotonic() - started
        if manifest.status != "finished":
            sys.exit(f"sweep on {workers} node(s) did not finish: {manifest.model_dump_json()}")
        return {
            "runs_per_min": seeds / wall * 60,
            "wall_s": wall,
            "local_ms": statistics.median(local_s) * 1000,
            "ray_ms": statistics.median(ray_s) * 1000,
            "overhead_ms": (statistics.median(ray_s) - statistics.median(local_s)) * 1000,
        }
    finally:
        ray.shutdown()
        cluster.shutdown()


def cluster_main(nodes: list[int], seeds: int, trials: int) -> None:
    from trainers.tiny import build_tiny_arith

    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "model"
        build_tiny_arith(model, seed=0, progress=False)
        figures = {n: cluster_figures(n, seeds, trials, model, Path(tmp)) for n in nodes}
    print(f"sweep of {seeds} runs (loop_n 1, tiny-arith), trivial trials: median of {trials}")
    print("worker nodes   runs/min   sweep wall   trial local   trial ray   ray overhead")
    for n, f in figures.items():
        print(
            f"{n:>12}   {f['runs_per_min']:8.2f}   {f['wall_s']:8.1f} s   {f['local_ms']:8.0f} ms"
            f"   {f['ray_ms']:6.0f} ms   {f['overhead_ms']:+7.0f} ms"
        )
    if 1 in figures and len(figures) > 1:
        for n in [n for n in figures if n != 1]:
            ratio = figures[n]["runs_per_min"] / figures[1]["runs_per_min"]
            print(f"runs/min on {n} nodes vs 1: {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=2, help="runs in the sweep")
    parser.add_argument("--trials", type=int, default=5, help="trivial trials for the overhead figure")
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument(
        "--nodes",
        help="comma list of worker-node counts (e.g. 1,2): measure on a local multi-node Ray cluster",
    )
    args = parser.parse_args()
    if args.nodes:
        cluster_main([int(n) for n in args.nodes.split(",")], args.seeds, args.trials)
        return
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
