"""The Hydra keys each verl entry point accepts, read from verl's own config files into `fixtures/verl_config_keys.json`.

The planner's overrides are checked against this list offline (no verl install, no network): a plain `key=value`
must name a key verl's config has, a `+key=value` one it has not (Hydra refuses to append an existing key). Rewrite
the fixture from a verl checkout (`fetch github:volcengine/verl` gives a bare mirror) with
`python -m tests.trainers.verl_config_keys <verl git dir>`; review the diff.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tasks.atomic import atomic_write_json

FIXTURE = Path(__file__).parent / "fixtures" / "verl_config_keys.json"

# entry point -> (config file, {group: file composed under that key by `defaults`})
SOURCES: dict[str, tuple[str, dict[str, str]]] = {
    "verl.trainer.main_ppo": ("verl/trainer/config/_generated_ppo_trainer.yaml", {}),
    "verl.trainer.main_generation": ("verl/trainer/config/generation.yaml", {}),
    "verl.trainer.main_eval": ("verl/trainer/config/evaluation.yaml", {}),
    "verl.trainer.fsdp_sft_trainer": (
        "verl/trainer/config/sft_trainer.yaml",
        {"optim": "verl/trainer/config/optim/fsdp.yaml"},
    ),
}


def flatten(node: Any, prefix: str = "") -> list[str]:
    """Every dotted key path of a YAML mapping, inner nodes included (Hydra can set either)."""
    if not isinstance(node, dict):
        return []
    keys: list[str] = []
    for key, value in node.items():
        if key in ("defaults", "_target_"):
            continue
        path = f"{prefix}{key}"
        keys.append(path)
        keys += flatten(value, path + ".")
    return keys


def show(git_dir: Path, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"HEAD:{path}"], check=True, capture_output=True, text=True
    ).stdout


def read(git_dir: Path, path: str) -> Any:
    return yaml.safe_load(show(git_dir, path))


MERGER = "verl/model_merger/base_model_merger.py"


def merger_flags(git_dir: Path) -> list[str]:
    """`python -m verl.model_merger merge` flags, from its argparse calls."""
    return sorted(set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', show(git_dir, MERGER))))


def snapshot(git_dir: Path) -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    entry_points: dict[str, list[str]] = {}
    for module, (main, groups) in SOURCES.items():
        config = read(git_dir, main) or {}
        for group, path in groups.items():
            config.setdefault(group, {}).update(read(git_dir, path) or {})
        entry_points[module] = sorted(set(flatten(config)))
    return {
        "verl_commit": commit,
        "sources": {m: s[0] for m, s in SOURCES.items()} | {"verl.model_merger": MERGER},
        "keys": entry_points,
        "merger_flags": merger_flags(git_dir),
    }


if __name__ == "__main__":
    atomic_write_json(FIXTURE, snapshot(Path(sys.argv[1])), indent=1, sort_keys=True)
    print(f"wrote {FIXTURE}")
