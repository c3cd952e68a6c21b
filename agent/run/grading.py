"""The agent's side of the grading server: start it as its own process, wait for its baseline, talk HTTP to it."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from agent.processes import Child, free_port, kill_tree, spawn_child
from agent.run.config import RunConfig
from agent.run.workspace import RunPaths
from grader.contract import EvalConfig, FinalizeAnswer, GraderConfig, SubmitAnswer
from sandbox.devices import DevicePlan, plan_devices
from tasks import procfs
from tasks.atomic import atomic_write_json

STALE_GRACE_S = 3.0  # a stale grader busy in an evaluation gets this long after SIGTERM, then SIGKILL


def stop_stale_grader(paths: RunPaths) -> str | None:
    """End the grader an earlier process of this run left on its store (its pid is in grader/server.pid): SIGTERM,
    then SIGKILL after STALE_GRACE_S. Returns what was ended, for the run log, or None when nothing was left."""
    pid_file = paths.grader_dir / "server.pid"
    try:
        pid = int(pid_file.read_text())
    except (OSError, ValueError):
        return None
    cmdline = procfs.cmdline(pid)
    if cmdline is None or b"grader" not in cmdline or str(paths.grader_dir).encode() not in cmdline:
        return None  # the pid is some other process's by now
    kill_tree(pid, grace_s=STALE_GRACE_S)  # it, and whatever it started
    deadline = time.monotonic() + 5.0
    while procfs.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return f"grader process (pid {pid})"


class GraderError(RuntimeError):
    """The grading server could not be started or answered with an error."""


def grader_config(
    paths: RunPaths,
    *,
    benchmark: str,
    base_model: Path,
    port: int,
    token: str,
    max_submissions: int | None,
    min_interval_s: float,
    public_fraction: float,
    eval_limit: int | None,
    eval_batch_size: int,
    host: str = "127.0.0.1",
    test_seed: int | None = None,
    isolation: str = "unknown",
    prompt_format: str = "plain",
    system_prompt: str | None = None,
) -> GraderConfig:
    """The grader's config: its private folder, the one root submissions may come from, and the run's rules."""
    # chat: the grader renders with the base model's template and pins its hash and stop tokens
    chat = {"prompt_style": "chat", "system_prompt": system_prompt} if prompt_format == "chat" else {}
    return GraderConfig(
        run_id=paths.run_id,
        benchmark=benchmark,
        base_model=base_model,
        private_dir=paths.grader_dir,
        scores_mirror=paths.scores_json,
        token=token,
        host=host,
        port=port,
        # trials write only trials/<id>/output, an external agent only agent/: submissions come from there
        allowed_roots=[paths.trials_dir, paths.agent_dir],
        max_submissions=max_submissions,
        min_interval_s=min_interval_s,
        public_fraction=public_fraction or None,
        test_seed=test_seed,  # None: the grader's own secret, in its private folder
        isolation=isolation,  # stamped on every score (the weakest over all starts of the run)
        eval=EvalConfig.model_validate({"limit": eval_limit, "batch_size": eval_batch_size, **chat}),
    )


class GraderProcess:
    """A grading server owned by one research run. Reuses the run's token and store across restarts (resume)."""

    def __init__(self, paths: RunPaths, config: GraderConfig) -> None:
        self.paths = paths
        self.config = config
        self.child: Child | None = None
        self.url = f"http://{config.host}:{config.port}"
        self.token: str = config.token

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        """The server's process, once started."""
        return self.child.proc if self.child is not None else None

    @classmethod
    def for_run(
        cls,
        paths: RunPaths,
        config: RunConfig,
        *,
        base_model: Path,
        isolation: str,
        max_submissions: int | None,
    ) -> GraderProcess:
        """The grader of a run, the research loop's or an external agent's: the one place a run's settings
        (benchmark, limits, public split, test seed, eval size, prompt format) become the grader's config.
        `max_submissions` is the caller's cap (the loop sizes it from its trials; an agent has only the config's)."""
        return cls.load_or_create(
            paths,
            benchmark=config.benchmark,
            base_model=base_model,
            max_submissions=max_submissions,
            min_interval_s=config.min_submit_interval,
            public_fraction=config.public_fraction,
            eval_limit=config.eval_limit,
            eval_batch_size=config.eval_batch_size,
            test_seed=config.test_seed,
            isolation=isolation,
            prompt_format=config.prompt_format,
            system_prompt=config.system_prompt,
        )

    @classmethod
    def load_or_create(cls, paths: RunPaths, **kwargs: Any) -> GraderProcess:
        """Keep the token of an earlier start of this run (so resumed runs talk to the same store) on a new port."""
        config_path = paths.grader_dir / "config.json"
        token = secrets.token_urlsafe(24)
        if config_path.exists():
            token = json.loads(config_path.read_text())["token"]
        config = grader_config(paths, port=free_port(), token=token, **kwargs)
        paths.grader_dir.mkdir(parents=True, exist_ok=True)
        # the fields set here, as the grader reads them (`GraderConfig`); the token: never readable by others
        atomic_write_json(config_path, config.model_dump(mode="json", exclude_unset=True), mode=0o600)
        return cls(paths, config)

    def stop_stale(self) -> str | None:
        """Stop a grader left by an earlier process of this run, so two servers never share one store."""
        return stop_stale_grader(self.paths)

    def start(
        self, ready_timeout_s: float = 600.0, on_wait: Any = None, devices: DevicePlan | None = None
    ) -> dict[str, Any]:
        """Start `python -m grader serve` and wait until its baseline is scored. Returns /health.

        The grader sees one device, `devices.grader_gpu` (planned for trials with no GPUs when not given): its own
        GPU where trials leave one spare, else one it takes turns on with trials through the device lease, or none
        (CUDA_VISIBLE_DEVICES="") on a machine without GPUs."""
        self.stop_stale()
        devices = devices or plan_devices(0)
        log = open(self.paths.grader_dir / "server.out", "ab")  # noqa: SIM115 - owned by the child
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "RLLOOP_TOKEN"))}
        env.update(devices.grader_env())
        # our Ctrl-C handling stops it explicitly, after the trial. SIGKILL when the run's process dies, however it
        # dies: a grader busy in an evaluation would sit on SIGTERM until the evaluation ends. Safe: the store is
        # SQLite WAL with synchronous=FULL.
        self.child = spawn_child(
            [sys.executable, "-m", "grader", "serve", "--config", str(self.paths.grader_dir / "config.json")],
            death_signal=signal.SIGKILL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        (self.paths.grader_dir / "server.pid").write_text(str(self.child.pid))
        log.close()
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline:
            code = self.child.poll()
            if code is not None:
                self.child.stop()  # reaps it, and whatever it started
                raise GraderError(
                    f"grading server exited with code {code} while starting; see "
                    f"{self.paths.grader_dir / 'server.out'} and {self.paths.grader_dir / 'grader.log'}"
                )
            try:
                health = httpx.get(f"{self.url}/health", timeout=2.0).json()
                if health.get("ready"):
                    return dict(health)
            except (httpx.HTTPError, ValueError):
                pass
            if on_wait is not None:
                on_wait()
            time.sleep(0.5)
        self.stop()
        raise GraderError(
            f"grading server not ready after {ready_timeout_s:.0f}s; see {self.paths.grader_dir}"
        )

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def submit(self, model_path: Path, timeout_s: float = 1800.0) -> SubmitAnswer:
        response = httpx.post(
            f"{self.url}/submit",
            json={"model_path": str(model_path)},
            headers=self._headers(),
            timeout=timeout_s,
        )
        body = (
            response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        )
        if response.status_code >= 400:
            detail = body.get("detail") if isinstance(body, dict) else None
            raise GraderError(
                f"grader refused the submission ({response.status_code}): {detail or response.text}"
            )
        try:
            return SubmitAnswer.model_validate(body)
        except ValueError as exc:
            raise GraderError(
                f"the grader's answer to the submission is not a /submit answer: {exc}"
            ) from None

    def get(self, path: str) -> Any:
        response = httpx.get(f"{self.url}{path}", headers=self._headers(), timeout=30.0)
        response.raise_for_status()
        return response.json()

    def finalize(self) -> dict[str, Any]:
        response = httpx.post(f"{self.url}/finalize", headers=self._headers(), timeout=1800.0)
        if response.status_code >= 400:
            raise GraderError(f"grader could not finalize ({response.status_code}): {response.text[:300]}")
        try:  # checked against the contract, handed on as the JSON the grader sent
            return FinalizeAnswer.model_validate(response.json()).model_dump(mode="json")
        except ValueError as exc:
            raise GraderError(f"the grader's answer to finalize is not a /finalize answer: {exc}") from None

    def stop(self) -> None:
        """Stop the server and all it started: SIGTERM, SIGKILL after 10 s (an evaluation may hold it up)."""
        if self.child is not None:
            self.child.stop(grace_s=10.0)
