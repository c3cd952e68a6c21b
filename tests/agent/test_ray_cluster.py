"""Trials and sweeps on a real multi-node Ray cluster on this machine: a head that runs no trials and two worker
nodes (raylets of their own, 2 CPUs and 1 declared GPU each), started once for the module with
`ray.cluster_utils.Cluster`.

What a real cluster does that one in-process Ray instance never did: trials land on different nodes and each says
which; a GPU id is the one Ray assigned on that node; a node removed mid-trial ends its trial as `worker_lost` (or
retries it on the other node) with nothing left running; the driver killed with SIGKILL while its trial runs on a
worker node, then `rlloop resume`, repeats nothing finished and leaves nothing behind; a sweep spread over the nodes
survives the Ray worker of one run killed mid-trial and writes each results row once; and a node that does not see RLLOOP_HOME (made real: it runs in its own mount namespace
with a tmpfs over the home) stops the run before anything is trained, named.

Run them alone with `pytest -m ray_cluster`.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.status.runs import read_state
from tests.sandbox.conftest import running_with
from tests.support.processes import descendants, run_processes, running_containers, still_alive

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.ray_cluster]

STORE = 80 * 1024**2  # object store of each node: this machine's memory is shared by the whole suite
WORKERS = 2

# A trial that counts its attempts, says where it runs and which GPUs it sees, then sleeps argv[2] seconds. A second attempt (its marker
# file in the shared workspace) finishes at once. argv[1] is a token to find its processes from the host.
TRIAL = r"""
import os, sys, time
open("attempts", "a").write("attempt\n")
if os.path.exists("attempted"):
    print("second attempt done"); sys.exit(0)
open("attempted", "w").write("1")
print("training", "CUDA_VISIBLE_DEVICES=" + os.environ.get("CUDA_VISIBLE_DEVICES", "-"), flush=True)
time.sleep(float(sys.argv[2]))
"""

RUN_ARGS = [
    "--benchmark",
    "arith",
    "--base-model",
    "tiny-arith",
    "--trial-steps",
    "25",
    "--eval-limit",
    "40",
    "--valid-limit",
    "60",
    "--public-fraction",
    "0",
    "--timeout",
    "30m",
    "--submit",
    "all",
    "--quiet",
]


class LocalCluster:
    """The module's cluster: its address, its worker nodes, and a way to swap a removed one for a fresh one."""

    def __init__(self) -> None:
        from ray.cluster_utils import Cluster

        self.cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 0,  # the head runs no trials
                "num_gpus": 0,
                "object_store_memory": STORE,
                "include_dashboard": False,
                # a node that is gone is noticed in about 3 s (defaults: 30 s)
                "_system_config": {"health_check_period_ms": 1000, "health_check_failure_threshold": 3},
            },
        )
        self.workers = [self.add_worker() for _ in range(WORKERS)]
        self.address = self.cluster.address
        ray.init(address=self.address, log_to_driver=False)
        self.cluster.wait_for_nodes()

    def add_worker(self) -> Any:
        return self.cluster.add_node(num_cpus=2, num_gpus=1, object_store_memory=STORE)

    def worker_ids(self) -> set[str]:
        return {node.node_id for node in self.workers}

    def raylet_pid(self, node: Any) -> int:
        return int(node.all_processes["raylet"][0].process.pid)

    def node_running(self, pid: int) -> Any:
        """The worker node whose raylet is an ancestor of `pid`."""
        raylets = {self.raylet_pid(node): node for node in self.workers}
        while pid > 1:
            if pid in raylets:
                return raylets[pid]
            pid = _parent(pid)
        raise AssertionError("the trial runs under no worker node's raylet")

    def remove(self, node: Any) -> None:
        """Remove `node` as a lost machine goes: no graceful drain."""
        self.cluster.remove_node(node, allow_graceful=False)
        self.workers.remove(node)

    def restore(self) -> None:
        """Fresh workers in place of removed ones (from the main thread: Ray's node start sets signal handlers)."""
        while len(self.workers) < WORKERS:
            self.workers.append(self.add_worker())
        self.cluster.wait_for_nodes()

    def alive_ids(self) -> set[str]:
        return {n["NodeID"] for n in ray.nodes() if n["Alive"]}

    def shutdown(self) -> None:
        ray.shutdown()
        self.cluster.shutdown()


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    if ray.is_initialized():  # another module's local instance, on this pytest worker
        ray.shutdown()
    made = LocalCluster()
    try:
        yield made
    finally:
        made.shutdown()


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


def _request(workspace: Path, token: str, sleep_s: float, **extra: Any) -> Any:
    from sandbox.base import SandboxRequest

    return SandboxRequest(
        command=[sys.executable, "-c", TRIAL, token, str(sleep_s)],
        workspace=workspace,
        log_path=workspace.parent / "log.txt",
        timeout_s=120,
        memory_mb=512,
        labels={"rlloop.run": f"cluster-{token[-8:]}", "rlloop.trial": "t01"},
        **extra,
    )


def _at_once(*calls: Any) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    def call(i: int) -> None:
        results[i] = calls[i]()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    return results


def test_trials_land_on_different_nodes_and_say_which(cluster: LocalCluster, tmp_path: Path) -> None:
    from sandbox.backends.ray import RaySandbox

    sandbox = RaySandbox(inner="local")
    spaces = [tmp_path / f"t{i}" / "workspace" for i in range(2)]
    for ws in spaces:
        ws.mkdir(parents=True)
    # 2 CPUs each, as much as a worker node has: two at once need both nodes
    results = _at_once(
        *[lambda ws=ws: sandbox.run(_request(ws, uuid.uuid4().hex, 2, cpus=2)) for ws in spaces]
    )
    assert all(r.ok for r in results), [r.log_tail for r in results]
    nodes = [r.node["node_id"] for r in results]
    assert set(nodes) == cluster.worker_ids(), nodes  # one on each worker, none on the head
    assert all(r.node["hostname"] and r.node["node_ip"] for r in results)


def test_a_gpu_trial_gets_the_id_ray_assigned_on_its_node(cluster: LocalCluster, tmp_path: Path) -> None:
    from sandbox.backends.ray import RaySandbox

    sandbox = RaySandbox(inner="local")
    spaces = [tmp_path / f"g{i}" / "workspace" for i in range(2)]
    for ws in spaces:
        ws.mkdir(parents=True)
    # each asks for "GPU 3"; each node has one GPU, id 0: that is what each trial gets, on its own node
    results = _at_once(
        *[lambda ws=ws: sandbox.run(_request(ws, uuid.uuid4().hex, 1, cpus=1, gpus=[3])) for ws in spaces]
    )
    assert all(r.ok for r in results), [r.log_tail for r in results]
    assert [r.gpus for r in results] == [[0], [0]]
    assert {r.node["node_id"] for r in results} == cluster.worker_ids()
    for ws in spaces:
        assert "CUDA_VISIBLE_DEVICES=0" in (ws.parent / "log.txt").read_text()


def _remove_the_node_when_training(
    cluster: LocalCluster, workspace: Path, token: str, lost: list[Any]
) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (workspace / "attempted").exists():
        time.sleep(0.1)
    tree = running_with(token)
    assert tree, "the trial never started"
    node = cluster.node_running(min(tree))
    lost.append((node.node_id, tree))
    cluster.remove(node)


@pytest.mark.parametrize("retries", [0, 1])
def test_a_node_lost_mid_trial(cluster: LocalCluster, workspace: Path, retries: int) -> None:
    """No retries: the trial ends as worker_lost. One retry: it runs again, once, on another node. Either way
    nothing of the first attempt is left running on any node."""
    from sandbox.backends.ray import RaySandbox

    token = f"rlloop-test-{uuid.uuid4().hex}"
    lost: list[Any] = []
    remover = threading.Thread(target=_remove_the_node_when_training, args=(cluster, workspace, token, lost))
    remover.start()
    result = RaySandbox(inner="local", max_retries=retries).run(_request(workspace, token, 120, cpus=1))
    remover.join(timeout=120)
    cluster.restore()
    assert lost, "the node was never removed"
    lost_node, first_attempt = lost[0]
    log = (workspace.parent / "log.txt").read_text()
    # the lost attempt, then (with a retry) one more: never the same trial twice at once, never once too often
    assert (workspace / "attempts").read_text().count("attempt") == 1 + retries
    if retries:
        assert result.ok, result.log_tail
        assert "second attempt done" in log
        assert result.node["node_id"] != lost_node
    else:
        assert not result.ok and result.worker_lost, result.log_tail
        assert "Ray worker" in result.reason() and "died" in log
    assert not still_alive(first_attempt, within_s=15), "a trial outlived its lost node"
    assert not running_with(token)


def _cli(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("RLLOOP_FAILPOINT", "RAY_ADDRESS")}
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        env={**clean, "RLLOOP_HOME": str(home), "RLLOOP_TEST_SEED": "20261201", **env},
        capture_output=True,
        text=True,
        timeout=900,
    )


def _submissions(run_dir: Path) -> list[str]:
    import sqlite3

    conn = sqlite3.connect(run_dir / "grader" / "store.db")
    try:
        rows = conn.execute("SELECT model_path FROM submissions ORDER BY id").fetchall()
    finally:
        conn.close()
    return [Path(p).parent.name for (p,) in rows]


@pytest.mark.slow
def test_driver_killed_while_trials_run_on_nodes_then_resumed(
    cluster: LocalCluster, tiny_model_home: Path
) -> None:
    """`rlloop run --sandbox ray`: t01 trains and is graded, the driver is SIGKILLed 3 s into t02 (on a worker
    node); nothing of it survives on any node; `rlloop resume` redoes t02 only. Each trial records its node in
    its record, the run log and MLflow."""
    home = tiny_model_home.resolve()
    args = ["--run-id", "onnodes", "--loop-n", "2", "--sandbox", "ray", "--ray-address", cluster.address]
    crashed = _cli(home, "run", *args, *RUN_ARGS, RLLOOP_FAILPOINT="run_trial:2")
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    run_dir = home / "runs" / "onnodes"
    assert (run_dir / "trials" / "t02").is_dir(), "killed before t02 started"
    left = still_alive(run_processes("onnodes", run_dir / "workspace"), within_s=15)
    assert not left, f"alive after the driver was killed: {left}"
    assert not running_containers("onnodes", within_s=15)
    before = read_state(run_dir)
    (first,) = [t for t in before["trials"] if t["trial_id"] == "t01"]
    assert first["status"] == "succeeded"

    resumed = _cli(home, "resume", "onnodes")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    state = read_state(run_dir)
    assert state["status"] == "finished"
    assert [t["trial_id"] for t in state["trials"]] == ["t01", "t02"]
    again = state["trials"][0]
    assert (again["duration_s"], again["checkpoint_sha256"]) == (
        first["duration_s"],
        first["checkpoint_sha256"],
    )
    assert _submissions(run_dir) == ["t01", "t02"]  # each graded once: t01 not again after the crash
    log = (run_dir / "run.log").read_text()
    assert "shared storage: 2 trial node(s) see" in log
    workers = {n["NodeID"] for n in ray.nodes() if n["Resources"].get("CPU")}
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("rlloop/arith")
    assert experiment is not None
    for trial in state["trials"]:
        node = trial["sandbox"]["node"]
        assert node["node_id"] in workers and trial["sandbox"]["backend"].startswith("ray/")
        assert f"{trial['trial_id']} ran on node {node['node_id']}" in log
        (child,) = client.search_runs(
            [experiment.experiment_id],
            f"tags.`rlloop.run_id` = 'onnodes' and tags.`rlloop.trial_id` = '{trial['trial_id']}'",
        )
        assert child.data.tags["rlloop.node_id"] == node["node_id"]
        assert child.data.tags["rlloop.node_ip"] == node["node_ip"]
    assert not still_alive(run_processes("onnodes", run_dir / "workspace"), within_s=5)


@pytest.mark.slow
def test_a_sweep_across_nodes_survives_a_worker_killed_and_writes_each_row_once(
    cluster: LocalCluster, tiny_model_home: Path
) -> None:
    """Two runs of a sweep, one per worker node; the Ray worker running one research loop is SIGKILLed mid-trial.
    Ray retries that task (`max_retries=1`) and the run resumes, redoing the interrupted trial, not losing it; each
    run's results row is written once."""
    from rich.console import Console

    from agent.sweeps.driver import run_sweep
    from agent.sweeps.executors import RayExecutor
    from agent.sweeps.spec import SweepSpec

    spec = SweepSpec(
        sweep_id="sw-nodes",
        benchmarks="arith",
        base_models="tiny-arith",
        agents="builtin",
        seeds=2,
        timeout=600,
        loop_n=1,
        concurrency=2,
        ray_address=cluster.address,
        run_overrides={
            "eval_limit": 40,
            "sandbox": "local",
            "trial_timeout": 240,
            "public_fraction": 0.0,
            "trial_steps": 25,
        },
    )
    home = tiny_model_home.resolve()
    victim = next(iter(spec.combinations())).run_id("sw-nodes")
    victim_dir = home / "runs" / victim
    killed: list[int] = []

    def kill_worker_mid_trial() -> None:
        log = victim_dir / "trials" / "t01" / "log.txt"
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not (log.exists() and log.stat().st_size > 0):
            time.sleep(0.3)
        research_pid = int((victim_dir / "pid").read_text())
        worker_pid = int(Path(f"/proc/{research_pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(worker_pid, signal.SIGKILL)  # the Ray worker running the research loop and its trial
        killed.append(worker_pid)

    killer = threading.Thread(target=kill_worker_mid_trial, daemon=True)
    killer.start()
    # 2 CPUs a run, a whole worker node: the two runs go to the two nodes at once
    manifest = run_sweep(
        spec,
        home,
        console=Console(file=io.StringIO()),
        executor=RayExecutor(None, num_cpus=2, max_retries=1),
        refresh_s=0.5,
    )
    killer.join(timeout=5)
    assert killed, "the victim's trial never started"
    assert manifest.status == "finished", manifest.model_dump_json(indent=1)
    state = read_state(victim_dir)
    assert state["status"] == "finished"
    assert [t["trial_id"] for t in state["trials"]] == ["t01"]  # the interrupted trial was redone, not lost
    assert "resuming" in (victim_dir / "run.log").read_text()
    with open(home / "results.csv", newline="") as handle:
        rows = [row["run_id"] for row in csv.DictReader(handle)]
    assert sorted(rows) == sorted(manifest.entries), rows  # each run's row, once, the retried run's too


def _start_node_without(folder: Path, address: str) -> subprocess.Popen[bytes]:
    """A worker node that sees an empty tmpfs at `folder`: its own mount namespace, the rest of the machine as is."""
    ray_bin = Path(sys.executable).with_name("ray")
    script = (
        f"mount -t tmpfs -o size=16m rlloop-not-shared '{folder}' && exec '{ray_bin}' start --address={address} "
        f"--num-cpus=1 --object-store-memory={STORE} --disable-usage-stats --block"
    )
    return subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop_node(proc: subprocess.Popen[bytes]) -> None:
    tree = {proc.pid, *descendants(proc.pid)}
    for pid in tree:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert not still_alive(tree, within_s=10)


@pytest.mark.slow
def test_a_node_without_the_shared_home_stops_the_run_before_training(
    cluster: LocalCluster, tiny_model_home: Path
) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to give one node a folder of its own at the home's path")
    home = tiny_model_home.resolve()
    known = cluster.alive_ids()
    node = _start_node_without(home, cluster.address)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not cluster.alive_ids() - known:
            time.sleep(0.5)
        (stranger,) = cluster.alive_ids() - known
        args = ["--run-id", "unshared", "--loop-n", "1", "--sandbox", "ray", "--ray-address", cluster.address]
        result = _cli(home, "run", *args, *RUN_ARGS)
        assert result.returncode == 2, result.stdout + result.stderr
        message = " ".join(result.stderr.split())
        assert f"Ray node {stranger}" in message, message
        assert "do not see" in message and f"Mount the shared {home} (RLLOOP_HOME)" in message, message
        assert "does not exist on this node" in message
        assert not any(n in message for n in known), "a node that sees the home was blamed"
        trials = home / "runs" / "unshared" / "trials"
        assert not (trials.exists() and any(trials.iterdir())), "something was trained"
        print(result.stderr)  # what the user reads (shown with -rA)
        # a sweep spread by Ray checks the sweep's folder the same way, before any of its runs starts
        bench = [
            "bench",
            "--executor",
            "ray",
            "--ray-address",
            cluster.address,
            "--sweep-id",
            "unshared-sweep",
        ]
        swept = _cli(home, *bench, "--loop-n", "1", "--eval-limit", "40", "--sandbox", "local")
        assert swept.returncode == 2, swept.stdout + swept.stderr
        message = " ".join(swept.stderr.split())
        assert (
            f"Ray node {stranger}" in message
            and f"{home / 'sweeps' / 'unshared-sweep'} as this driver" in message
        )
        assert not [r for r in (home / "runs").iterdir() if r.name.startswith("unshared-sweep")]
    finally:
        _stop_node(node)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and stranger in cluster.alive_ids():
        time.sleep(0.5)
