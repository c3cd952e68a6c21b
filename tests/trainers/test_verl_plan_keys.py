"""Issue 17 point 5 (shared with issue 12), offline: every command `plan` prints calls a verl entry point with keys
verl's config has. For every family x track x stage, with and without every role flag, each `key=value` override
of `main_ppo`, `main_generation_server`, `main_eval` and `sft_trainer` names a key of that entry point's config
(composed by verl 0.9.1's own Hydra configs into `fixtures/verl_config_keys.json` by `verl_config_keys.py`), each `+key=value` one a key
it does not have (Hydra refuses to append an existing key), no key is given twice, the shell words of the command
are exactly the stage's overrides, and `verl.model_merger merge` gets only flags it parses. What this cannot check
(verl's own config validation, e.g. required micro-batch sizes) needs verl installed: test_verl_accepts.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from trainers.verl.builders import EVALUATION, GENERATION, MAIN_PPO, MERGER, SFT, VERL_VERSION
from trainers.verl.plan import FAMILY_TRACKS, STAGES, plan

KNOWN: dict[str, Any] = json.loads(
    (Path(__file__).parent / "fixtures" / "verl_config_keys.json").read_text(encoding="utf-8")
)
ENTRY_POINTS = (MAIN_PPO, GENERATION, EVALUATION, SFT)
ROLES: dict[str, Any] = {
    "model": "Qwen/Qwen3-8B",
    "reference": "<MODEL_ROOT>/teacher",
    "coach": "gpt-4o",
    "reward_model": "<MODEL_ROOT>/d",
    "checkpoint_step": "100-300:100",
    "experiment": "e17",
}


def invocations(command: str) -> list[list[str]]:
    """The shell words of each command a stage chains (`&&`, `;`, a `for ...; do ...; done` loop)."""
    flat = command.replace(" \\\n    ", " ")
    parts = [p for chunk in flat.split(" && ") for p in chunk.split("; ")]
    words = [shlex.split(p) for p in parts]
    return [w[1:] if w and w[0] == "do" else w for w in words if w and w[0] not in ("for", "done")]


def grid() -> list[tuple[str, str | None, str, bool]]:
    return [
        (family, track, stage, with_roles)
        for family, stages in STAGES.items()
        for track in [None, *FAMILY_TRACKS[family]]
        for stage in stages
        for with_roles in (False, True)
    ]


@pytest.mark.parametrize(("family", "track", "stage", "with_roles"), grid())
def test_every_override_is_a_key_verl_has(
    family: str, track: str | None, stage: str, with_roles: bool
) -> None:
    extra: dict[str, Any] = dict(ROLES) if with_roles else {}
    if track == "system-prompt":
        extra |= {"prompt_type": "safety"}
    (planned,) = plan(family, stage=stage, track=track, env={}, **extra).stages
    seen: list[str] = []
    for words in invocations(planned.command):
        if MERGER in words:
            flags = [w for w in words[words.index(MERGER) + 1 :] if w.startswith("--")]
            assert words[words.index(MERGER) + 1] == "merge" and set(flags) <= set(KNOWN["merger_flags"])
            continue
        module = next((m for m in ENTRY_POINTS if m in words), None)
        if module is None:
            continue
        overrides = words[words.index(module) + 1 :]
        keys = KNOWN["keys"][module]
        for override in overrides:
            key = override.split("=", 1)[0]
            if key.startswith("+"):
                assert key[1:] not in keys, f"{module}: {key} appends a key verl already has"
            else:
                assert key in keys, f"{module} has no key {key!r} (verl {KNOWN['verl_version']})"
        assert len({o.split("=", 1)[0] for o in overrides}) == len(overrides), overrides
        seen += overrides
    assert sorted(set(seen)) == sorted(
        set(planned.overrides)
    )  # the words are the stage's overrides, quoted right


def test_the_key_list_is_verls() -> None:
    assert KNOWN["verl_version"] == VERL_VERSION
    assert KNOWN["sources"][MAIN_PPO] == "verl/trainer/config/ppo_trainer.yaml"
    ppo = set(KNOWN["keys"][MAIN_PPO])
    assert {"actor_rollout_ref.rollout.n", "trainer.nnodes", "algorithm.adv_estimator"} <= ppo
    assert "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu" in ppo
    assert "actor_rollout_ref.ref.model.path" not in ppo  # why a named teacher cannot be the reference
    assert "data.output_path" not in KNOWN["keys"][GENERATION]  # read by main_generation_server: appended
    assert "data.messages_key" in KNOWN["keys"][SFT] and "--local_dir" in KNOWN["merger_flags"]
