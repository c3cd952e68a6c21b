"""The Hydra keys each verl entry point accepts, composed by verl's own config files into `fixtures/verl_config_keys.json`.

The planner's overrides are checked against this list offline (no verl needed): a plain `key=value` must name a key
verl's composed config has, a `+key=value` one it has not (Hydra refuses to append an existing key). Rewrite the
fixture from the installed verl (`make verl-env`) with `python -m tests.trainers.verl_config_keys`; review the
diff. With verl installed, tests/trainers/test_verl_accepts.py goes further: verl's own composition and checks.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tasks.atomic import atomic_write_json
from trainers.verl.builders import EVALUATION, GENERATION, MAIN_PPO, SFT

FIXTURE = Path(__file__).parent / "fixtures" / "verl_config_keys.json"

# entry point -> the config its `@hydra.main` composes
SOURCES: dict[str, str] = {
    MAIN_PPO: "ppo_trainer",
    GENERATION: "ppo_trainer",
    EVALUATION: "evaluation",
    SFT: "sft_trainer_engine",
}
MERGER = "verl/model_merger/base_model_merger.py"


def flatten(node: Any, prefix: str = "") -> list[str]:
    """Every dotted key path of a mapping, inner nodes included (Hydra can set either)."""
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


def snapshot() -> dict[str, Any]:
    from tests.trainers import verl_validate

    verl = verl_validate.load()
    from omegaconf import OmegaConf  # verl's folder is on the path now

    keys = {
        module: sorted(set(flatten(OmegaConf.to_container(verl_validate.compose(name, []), resolve=False))))
        for module, name in SOURCES.items()
    }
    merger = (Path(verl.__file__).parent.parent / MERGER).read_text(encoding="utf-8")
    return {
        "verl_version": verl.__version__,
        "sources": {m: f"verl/trainer/config/{name}.yaml" for m, name in SOURCES.items()}
        | {"verl.model_merger": MERGER},
        "keys": keys,
        "merger_flags": sorted(set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', merger))),
    }


if __name__ == "__main__":
    atomic_write_json(FIXTURE, snapshot(), indent=1, sort_keys=True)
    print(f"wrote {FIXTURE}")
