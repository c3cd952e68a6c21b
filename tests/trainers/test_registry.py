"""The recipe registry: explicit built-ins, documented configs, and plugins that reach `python -m trainers` and a trial.

The plugin is real: a package and a `*.dist-info/entry_points.txt` in a temp folder put on PYTHONPATH, as a user
would ship one without installing it. Its module registers two recipes (a plugin may register several).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainers.conftest import REPO
from trainers.registry import BUILTIN_MODULES, RECIPES, get_recipe, list_recipes

PLUGIN = '''
"""A recipe plugin: `echo` writes its message into output_dir; `echo_loud` shouts it."""
from pathlib import Path

from pydantic import Field

from trainers.config import TrainerConfig
from trainers.registry import Recipe, register_recipe
from trainers.result import TrainResult


class EchoConfig(TrainerConfig):
    """What to echo."""

    message: str = Field(default="hello", description="Text written to output_dir/echo.txt.")


def _write(config: EchoConfig, text: str, name: str) -> TrainResult:
    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(config.output_dir) / "echo.txt").write_text(text)
    return TrainResult(recipe=name, output_dir=config.output_dir)


register_recipe(Recipe("echo", "Echo a message.", EchoConfig, lambda c: _write(c, c.message, "echo")))
register_recipe(Recipe("echo_loud", "Shout a message.", EchoConfig, lambda c: _write(c, c.message.upper(), "echo_loud")))
'''

IN_TRIAL = """
import json, sys
from pathlib import Path
from agent.loop.limits import TrialLimits
from agent.loop.trials import PreparedTrial, fresh_output, sandbox_request, trial_folders
from agent.run.workspace import RunPaths
from sandbox.backends.local import LocalSandbox

home = Path(sys.argv[1])
paths = RunPaths(home=home, run_id="plugin")
sandbox = LocalSandbox()
record = fresh_output(paths, "t01")
host = trial_folders(paths, "t01", home / "base", home / "base")
seen = host.seen(sandbox.maps_paths)
config = {"model_path": str(seen.model), "train_file": "t.jsonl", "output_dir": str(seen.output), "message": sys.argv[2]}
(record / "config.json").write_text(json.dumps(config))
command = [sys.executable, "-m", "trainers", "echo", "--config", str(seen.trial / "config.json")]
request = sandbox_request(
    PreparedTrial(command, host, seen), trial_id="t01", paths=paths,
    limits=TrialLimits(timeout_s=120, memory_mb=4096),
)
result = sandbox.run(request)
print(json.dumps({"exit_code": result.exit_code, "log": result.log_tail, "isolation": LocalSandbox().isolation,
                  "pythonpath": request.env.get("PYTHONPATH"), "mounts": [str(m.source) for m in request.mounts]}))
"""


def test_builtins_are_registered_explicitly_and_opcd_registers_both() -> None:
    names = [r.name for r in list_recipes()]
    assert {"sft", "grpo", "dpo", "opo", "opcd", "opcd_offpolicy", "gad", "coach", "oel", "rft"} <= set(names)
    assert get_recipe("opcd").run.__module__ == get_recipe("opcd_offpolicy").run.__module__
    assert "trainers.algorithms.opcd" in BUILTIN_MODULES
    assert not (REPO / "trainers" / "algorithms" / "opcd_offpolicy.py").exists()
    with pytest.raises(KeyError, match="unknown recipe 'nope'; known: .*opcd_offpolicy.*rlloop.recipes"):
        get_recipe("nope")


@pytest.mark.parametrize("name", RECIPES.names())
def test_every_config_field_is_described(name: str) -> None:
    """The LLM proposer sees a recipe through its field descriptions (agent/proposers/recipes.py): none may be blank."""
    config = get_recipe(name).config_class
    missing = [field for field, info in config.model_fields.items() if not (info.description or "").strip()]
    assert not missing, f"{name} ({config.__name__}) has fields without Field(description=...): {missing}"


@pytest.fixture
def plugin_dir(tmp_path: Path) -> Path:
    """A package + dist-info in a folder readable by the sandbox user (pytest's tmp folders are 0700)."""
    root = tmp_path / "plugins"
    (root / "rlloop_echo").mkdir(parents=True)
    (root / "rlloop_echo" / "__init__.py").write_text(PLUGIN)
    dist = root / "rlloop_echo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlloop-echo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[rlloop.recipes]\nrlloop_echo = rlloop_echo\n")
    for path in [tmp_path, *root.rglob("*"), root]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def _env(*pythonpath: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(map(str, [*pythonpath, REPO])),
        "OMP_NUM_THREADS": "1",
    }


def _config(path: Path, output_dir: Path, message: str) -> Path:
    path.write_text(
        json.dumps(
            {"model_path": "m", "train_file": "t.jsonl", "output_dir": str(output_dir), "message": message}
        )
    )
    return path


def test_entry_point_plugin_runs_through_python_m_trainers(tmp_path: Path, plugin_dir: Path) -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "trainers", "--list"], env=_env(plugin_dir), capture_output=True, text=True
    )
    assert listing.returncode == 0 and "echo " in listing.stdout and "echo_loud" in listing.stdout, listing
    out = tmp_path / "out"
    for recipe, expected in (("echo", "hi there"), ("echo_loud", "HI THERE")):
        config = _config(tmp_path / f"{recipe}.json", out, "hi there")
        proc = subprocess.run(
            [sys.executable, "-m", "trainers", recipe, "--config", str(config)],
            env=_env(plugin_dir),
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr
        assert (out / "echo.txt").read_text() == expected
    bad = subprocess.run(
        [sys.executable, "-m", "trainers", "echo", "--config", str(tmp_path / "echo.json")],
        env=_env(),  # without the plugin folder: unknown, with the list
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "unknown recipe 'echo'" in bad.stderr


def test_entry_point_plugin_reaches_a_local_sandbox_trial(tmp_path: Path, plugin_dir: Path) -> None:
    """The trial's environment is scrubbed and (isolated) it sees only the Python roots: the trial request mounts
    the plugin's package and metadata and puts their folder on the trial's PYTHONPATH."""
    home = tmp_path / "home"
    (home / "base").mkdir(parents=True)
    run = home / "runs" / "plugin"
    (run / "workspace").mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, "-c", IN_TRIAL, str(home), "from a trial"],
        env=_env(plugin_dir),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["exit_code"] == 0, report["log"]
    assert (run / "trials" / "t01" / "output" / "echo.txt").read_text() == "from a trial"
    assert report["pythonpath"] == str(plugin_dir.resolve())
    assert str((plugin_dir / "rlloop_echo").resolve()) in report["mounts"]
