"""What an AutoRL-Bench agent expects beyond the grader's own API, added by the token relay (`agent.external.relay`).

AutoRL-Bench's runner (rdagent/scenarios/rl/autorl_bench: run.py, core/server.py, core/utils.py) gives its agents:
- `run_meta.json` in the workspace, the "single source of truth" for time: `start_time`, `timeout_s`,
  `last_submit_time`, `end_time` (unix seconds), and `GET /time` answering those plus `now` and `remaining`;
- `/submit` accepting a `model_path` relative to the workspace, answering `submission_id`, `timestamp`,
  `model_path`, `score`, `baseline_score`, `improvement`, `elapsed_seconds`, `best`, `total_submissions`, and
  `{"error": ...}` on a refusal;
- `/health` answering `status`, `task`, `workspace`, `available_gpus`.
rlloop's grader answers in its own terms (`detail`, `elapsed_seconds`, `started_at`, absolute host paths only);
this module maps between the two without touching what the grader decides: a `model_path` as the agent sees it
(relative, or under /workspace) becomes the host path of the same folder in the agent's own writable folder, and
the host's paths never go back to the agent. run_meta.json is the host's own file (never one the agent can write).
See docs/autorl-bench.md.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from tasks.atomic import atomic_write_json

RUN_META_FIELDS = ("start_time", "timeout_s", "last_submit_time", "end_time")


def read_run_meta(path: Path) -> dict[str, Any]:
    from sandbox import untrusted

    try:
        data = untrusted.read_json(path.parent, path.name, max_bytes=64 * 1024)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def update_run_meta(path: Path, **fields: Any) -> None:
    """Set some of run_meta.json's fields (AutoRL-Bench's `update_run_meta`); a missing file is created."""
    atomic_write_json(path, {**{k: None for k in RUN_META_FIELDS}, **read_run_meta(path), **fields})


def init_run_meta(path: Path, timeout_s: float) -> None:
    """The agent's time budget as AutoRL-Bench's `init_run_meta` writes it: started now, nothing submitted yet."""
    atomic_write_json(
        path,
        {
            "start_time": int(time.time()),
            "timeout_s": int(timeout_s),
            "last_submit_time": None,
            "end_time": None,
        },
    )


class AutoRLAdapter:
    """Rewrites the agent's requests and the grader's answers to AutoRL-Bench's shapes (see the module docstring)."""

    def __init__(self, workspace: Path, task: str, run_meta: Path, inside: Path = Path("/workspace")) -> None:
        """`workspace`: the agent's folder on the host, which it sees at `inside`; `run_meta`: the host's file."""
        self.workspace = workspace
        self.inside = inside
        self.task = task
        self.run_meta = run_meta

    def host_path(self, raw: str) -> str:
        """The host path of a `model_path` the agent sent: relative to its workspace (as AutoRL-Bench's server
        resolves it) or absolute under it, `..` collapsed; anything else is sent on as is, for the grader to refuse
        (it accepts only folders inside the run's submission roots)."""
        seen = Path(os.path.normpath(self.inside / raw))
        if seen == self.inside or self.inside in seen.parents:
            return str(self.workspace / seen.relative_to(self.inside))
        return raw

    def seen_path(self, host: str) -> str:
        """A host path the grader answers with, as the agent sees it (the host's layout never reaches it)."""
        path = Path(host)
        if path == self.workspace or self.workspace in path.parents:
            return str(self.inside / path.relative_to(self.workspace))
        return "(outside the workspace)"

    def request_body(self, method: str, path: str, body: bytes) -> bytes:
        """A `model_path` as the agent sees it, turned into the host path of the same folder."""
        if (method, path) != ("POST", "/submit") or not body:
            return body
        try:
            data = json.loads(body)
        except ValueError:
            return body
        raw = data.get("model_path") if isinstance(data, dict) else None
        if isinstance(raw, str) and raw and "\x00" not in raw:
            data["model_path"] = self.host_path(raw)
            return json.dumps(data).encode()
        return body

    def response_body(self, method: str, path: str, status: int, body: bytes, sent: bytes) -> bytes:
        """The grader's answer with AutoRL-Bench's fields added (never removed or changed); `sent` is the body the
        agent sent (its `model_path` as it wrote it)."""
        try:
            data = json.loads(body)
        except ValueError:
            return body
        if not isinstance(data, dict):
            return body
        if status >= 400:
            if "error" not in data and "detail" in data:
                data["error"] = data["detail"]
        elif (method, path) == ("POST", "/submit"):
            update_run_meta(self.run_meta, last_submit_time=int(time.time()))
            data.setdefault("timestamp", datetime.now().isoformat())
            data.setdefault("model_path", _sent_path(sent))
        elif (method, path) == ("GET", "/time"):
            meta = read_run_meta(self.run_meta)
            now = int(time.time())
            start, budget = meta.get("start_time"), meta.get("timeout_s")
            remaining = (
                max(budget - (now - start), 0) if isinstance(start, int) and isinstance(budget, int) else None
            )
            data = {**data, **{k: meta.get(k) for k in RUN_META_FIELDS}, "now": now, "remaining": remaining}
        elif (method, path) in (("GET", "/scores"), ("GET", "/best")):
            for view in [data, *(data.get("submissions") or [])]:
                if isinstance(view, dict) and isinstance(view.get("model_path"), str):
                    view["model_path"] = self.seen_path(view["model_path"])
        elif (method, path) == ("GET", "/health"):
            data.setdefault("task", self.task)
            data.setdefault("workspace", str(self.inside))
            data.setdefault("available_gpus", [])
        return json.dumps(data).encode()


def _sent_path(sent: bytes) -> str | None:
    try:
        value = json.loads(sent).get("model_path")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None
