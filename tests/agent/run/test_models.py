"""`--base-model org/name` resolves through huggingface_hub's own cache, offline, as it would after a download.

The cache is laid out by huggingface_hub's own helpers (`repo_folder_name`, `_create_symlink`: blobs/, snapshots/
<commit>/ of relative symlinks, refs/main) and checked with `scan_cache_dir`; the resolution runs in a fresh
process with HF_HOME and HF_HUB_OFFLINE=1 set, through the same `snapshot_download` call that downloads online.
The folder it resolves to must work where the blobs are not mounted: inside a local-sandbox trial (its own mount
namespace sees only the model folder) and through the grader.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import scan_cache_dir
from huggingface_hub.file_download import _create_symlink, repo_folder_name

from grader.benchmarks import get_benchmark
from grader.config import EvalConfig
from grader.evaluation import evaluate
from sandbox.backends.local import LocalSandbox
from sandbox.base import Mount, SandboxRequest

REPO = Path(__file__).resolve().parents[3]
HUB_ID = "rlloop-test/tiny-chat-instruct"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def lay_out_hub_cache(hf_home: Path, model: Path, repo_id: str = HUB_ID) -> Path:
    """`model`'s files as huggingface_hub stores a download: content-named blobs, a snapshot of symlinks."""
    repo = hf_home / "hub" / repo_folder_name(repo_id=repo_id, repo_type="model")
    snapshot = repo / "snapshots" / COMMIT
    for file in sorted(p for p in model.rglob("*") if p.is_file()):
        data = file.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        target = snapshot / file.relative_to(model)
        target.parent.mkdir(parents=True, exist_ok=True)
        _create_symlink(str(blob), str(target))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory: pytest.TempPathFactory, tiny_chat_dir: Path) -> Path:
    hf_home = tmp_path_factory.mktemp("hf-home")
    snapshot = lay_out_hub_cache(hf_home, tiny_chat_dir)
    assert all(p.is_symlink() for p in snapshot.iterdir())  # the hub's layout: snapshot files are links
    info = scan_cache_dir(hf_home / "hub")  # huggingface_hub itself recognises the cache
    (repo,) = [r for r in info.repos if r.repo_id == HUB_ID]
    assert {rev.commit_hash for rev in repo.revisions} == {COMMIT} and "main" in next(
        iter(repo.revisions)
    ).refs
    return hf_home


def resolve_offline(name: str, home: Path, hf_home: Path) -> subprocess.CompletedProcess[str]:
    """agent.run.models.resolve_base_model in a fresh process (huggingface_hub reads HF_* when it is imported)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        HF_HOME=str(hf_home),
        HF_HUB_OFFLINE="1",
        PYTHONPATH=str(REPO),
        OMP_NUM_THREADS="1",
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    code = (
        "import sys; from pathlib import Path; from agent.run.models import resolve_base_model, ModelNotFoundError\n"
        "try:\n    print(resolve_base_model(sys.argv[1], Path(sys.argv[2])))\n"
        "except ModelNotFoundError as exc:\n    print(exc, file=sys.stderr); sys.exit(3)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, name, str(home)], env=env, capture_output=True, text=True, timeout=120
    )


def test_org_name_resolves_offline_from_the_hub_cache_into_a_plain_folder(
    hub_cache: Path, tmp_path: Path
) -> None:
    done = resolve_offline(HUB_ID, tmp_path / "home", hub_cache)
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip().splitlines()[-1])
    assert path == (tmp_path / "home" / "models" / "rlloop-test--tiny-chat-instruct").resolve()
    files = [p for p in path.rglob("*") if p.is_file()]
    assert files and not any(p.is_symlink() for p in path.rglob("*"))  # real files: no link into blobs/
    assert json.loads((path / "rlloop_source.json").read_text()) == {"hub_id": HUB_ID, "commit": COMMIT}
    snapshot = hub_cache / "hub" / "models--rlloop-test--tiny-chat-instruct" / "snapshots" / COMMIT
    for item in snapshot.iterdir():
        assert (path / item.name).read_bytes() == item.read_bytes()
    again = resolve_offline(
        HUB_ID, tmp_path / "home", hub_cache
    )  # second time: the resolved folder, no hub call
    assert again.returncode == 0 and Path(again.stdout.strip().splitlines()[-1]) == path


def test_an_id_missing_from_the_offline_cache_says_what_to_do(hub_cache: Path, tmp_path: Path) -> None:
    done = resolve_offline("rlloop-test/not-there", tmp_path / "home", hub_cache)
    assert done.returncode == 3
    assert "not in the Hugging Face cache (HF_HUB_OFFLINE=1" in done.stderr and "--base-model" in done.stderr


LOAD = (
    "import os, sys; from transformers import AutoModelForCausalLM, AutoTokenizer\n"
    "p = os.environ['MODEL_PATH']; tok = AutoTokenizer.from_pretrained(p)\n"
    "model = AutoModelForCausalLM.from_pretrained(p)\n"
    "print('loaded', model.config.model_type, tok.eos_token, sum(x.numel() for x in model.parameters()))\n"
)


def _in_sandbox(model: Path, workspace: Path) -> tuple[bool, str]:
    workspace.mkdir(parents=True, exist_ok=True)
    sandbox = LocalSandbox()
    result = sandbox.run(
        SandboxRequest(
            command=[sandbox.python, "-c", LOAD],
            workspace=workspace,
            log_path=workspace.parent / "log.txt",
            timeout_s=120,
            env={"MODEL_PATH": str(model), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
            mounts=[Mount(source=model, read_only=True)],  # as a trial mounts its base model
        )
    )
    return result.ok, result.log_tail


def test_the_resolved_folder_loads_inside_a_local_sandbox_trial_and_in_the_grader(
    hub_cache: Path, tmp_path: Path
) -> None:
    done = resolve_offline(HUB_ID, tmp_path / "home", hub_cache)
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip().splitlines()[-1])
    ok, log = _in_sandbox(path, tmp_path / "ws")
    assert ok and "loaded qwen2 <|im_end|>" in log, log
    if (
        LocalSandbox().isolation != "none"
    ):  # the control: the raw snapshot's links dangle where blobs/ is unseen
        snapshot = hub_cache / "hub" / "models--rlloop-test--tiny-chat-instruct" / "snapshots" / COMMIT
        raw_ok, raw_log = _in_sandbox(snapshot, tmp_path / "ws-raw")
        assert not raw_ok, raw_log
    bench = get_benchmark("arith")
    result = evaluate(path, bench.load("valid")[:4], bench, EvalConfig(prompt_style="chat", limit=4))  # type: ignore[arg-type]
    assert result.n == 4 and 0.0 <= result.score <= 1.0
