"""verl's own start-up checks on a planned command, without a GPU: what each entry point does before it allocates one.

verl 0.9.1 lives in its own folder (`make verl-env`: `.venv/verl-site`, installed with --no-deps next to the main
environment's torch and transformers; its wheel also ships a top-level `tests` package, so the folder goes at the
END of sys.path). Each planned command, its placeholders filled the way a user would fill them, is checked as the
entry point checks it:
- `main_ppo`: Hydra composes `ppo_trainer` with the overrides; `main()` then runs `validate_config(config,
  need_reference_policy(config), need_critic(config))`; the trainer builds `AlgoConfig`, imports the modules
  VERL_USE_EXTERNAL_MODULES names (Ray's runtime_env), looks up the advantage estimator and the policy loss, and
  loads the custom reward function (`get_custom_reward_fn`).
- `main_generation_server`: composes `ppo_trainer`; asserts n_samples (rollout.n) == 1 at temperature 0 and >= 1
  (its `main()`, copied: it calls ray.init first); reads data.train_files and data.output_path.
- `main_eval`: composes `evaluation`; each Ray task calls `get_custom_reward_fn(config)`.
- `sft_trainer`: composes `sft_trainer_engine`; `_build_config` turns engine, optim, checkpoint and profiler into
  their dataclasses (the model's HFModelConfig reads the model folder: not built here) and checks the profile
  interval.
- `verl.model_merger merge`: its own `parse_args` and `generate_config_from_args`.
- `torchrun`: torch's own argument parser (`torch.distributed.run`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from trainers.verl.builders import EVALUATION, GENERATION, MAIN_PPO, MERGER, SFT, VERL_VERSION

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("RLLOOP_VERL_SITE") or ROOT / ".venv" / "verl-site")
REQUIRED = bool(
    os.environ.get("RLLOOP_VERL_SITE")
)  # `make test` sets it: then a missing verl fails, not skips
EXTENSIONS = ROOT / "trainers" / "verl" / "ext"

# what a user puts in place of each placeholder or shell variable before running a command
FILL: dict[str, str] = {
    "<MODEL_ROOT>": "/models",
    "<DATA_ROOT>": "/data",
    "<CKPT_ROOT>": "/ckpt",
    "<RESULT_ROOT>": "/results",
    "<VERL_EXT>": str(EXTENSIONS),
    "<STEP>": "100",
    "<PROMPT_FILE>": "/data/safety.txt",
    "<PROMPT_TYPE>": "safety",
    "<COACH_MODEL>": "gpt-4o",
    "<JUDGE_MODEL>": "gpt-4o",
    "<r>": "1",
}
SHELL = {
    r"\$\(cat [^)]*\)": "100",
    r"\$step\b": "200",
    r"\$NODE_RANK\b": "0",
    r"\$MASTER_ADDR\b": "10.0.0.1",
    r"\$MASTER_PORT\b": "29500",
}


def missing_reason() -> str | None:
    if not (SITE / "verl").is_dir():
        return f"verl {VERL_VERSION} is not installed in {SITE}: run `make verl-env`"
    return None


def load() -> Any:
    """Import verl from SITE (appended to sys.path) and return it; its version must be the one the plans target."""
    if str(SITE) not in sys.path:
        sys.path.append(str(SITE))
    saved = dict(os.environ)
    import verl

    os.environ.clear()
    os.environ.update(saved)  # importing verl sets Ray variables; the rest of the suite runs without them

    assert verl.__version__ == VERL_VERSION, (
        f"verl {verl.__version__} in {SITE}, the plans target {VERL_VERSION}"
    )
    return verl


def filled(command: str) -> str:
    for placeholder, value in FILL.items():
        command = command.replace(placeholder, value)
    return command


def words_of(command: str) -> list[list[str]]:
    """The shell words of each command a stage chains, placeholders and shell variables filled."""
    from tests.trainers.test_verl_plan_keys import invocations

    found = []
    for words in invocations(filled(command)):
        for pattern, value in SHELL.items():
            words = [re.sub(pattern, value, w) for w in words]
        found.append(words)
    return found


def config_dir() -> str:
    import verl

    return str(Path(verl.__file__).parent / "trainer" / "config")


def compose(name: str, overrides: list[str]) -> Any:
    """Hydra's compose of verl's config `name` with the overrides, as `@hydra.main` does for the entry point."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base=None):
        return hydra_compose(config_name=name, overrides=overrides)


@contextmanager
def argv(words: list[str]) -> Iterator[None]:
    saved = sys.argv
    sys.argv = words
    try:
        yield
    finally:
        sys.argv = saved


def check_ppo(overrides: list[str]) -> Any:
    from omegaconf import OmegaConf
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.reward import get_custom_reward_fn
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.utils.import_utils import import_external_libs

    config = compose("ppo_trainer", overrides)
    validate_config(
        config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config)
    )
    OmegaConf.resolve(config)
    omega_conf_to_dataclass(config.algorithm)
    env = config.ray_kwargs.ray_init.runtime_env.get("env_vars", {})
    modules = env.get("VERL_USE_EXTERNAL_MODULES")
    if modules:
        import_external_libs(str(modules).split(","))
    core_algos.get_adv_estimator_fn(config.algorithm.adv_estimator)
    core_algos.get_policy_loss_fn(config.actor_rollout_ref.actor.policy_loss.loss_mode)
    reward_file(config.reward.custom_reward_function.path, lambda: get_custom_reward_fn(config))
    return config


MISSING_EXTENSION_FILES: set[str] = (
    set()
)  # reward files a plan names that rlloop has not written (see the test)


def reward_file(path: str | None, load_it: Any) -> None:
    """Load the reward function as verl does, when the plan names one; a file rlloop has not written is noted."""
    if not path:
        return
    if not Path(path).is_file():
        MISSING_EXTENSION_FILES.add(Path(path).name)
        return
    assert callable(load_it())


def check_generation(overrides: list[str]) -> Any:
    config = compose("ppo_trainer", overrides)
    n_samples = config.actor_rollout_ref.rollout.n
    if config.actor_rollout_ref.rollout.temperature == 0.0:
        assert n_samples == 1, "When temperature=0, n_samples must be 1."
    assert n_samples >= 1, "n_samples should always >= 1"
    assert config.data.train_files and config.data.output_path
    return config


def check_eval(overrides: list[str]) -> Any:
    from verl.trainer.ppo.reward import get_custom_reward_fn

    config = compose("evaluation", overrides)
    assert config.data.path
    path = config.reward.custom_reward_function.path if "reward" in config else None
    assert path, (
        "main_eval's tasks call get_custom_reward_fn(config), which reads reward.custom_reward_function"
    )
    reward_file(path, lambda: get_custom_reward_fn(config))
    return config


def check_sft(overrides: list[str]) -> Any:
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    config = compose("sft_trainer_engine", overrides)
    OmegaConf.resolve(config)
    for part in ("engine", "optim", "checkpoint", "profiler"):
        omega_conf_to_dataclass(config[part])
    start, end = config.trainer.profile_interval
    assert end >= start and (start >= 0 or end < 0)
    assert config.model.path and config.data.train_files
    return config


def check_merger(words: list[str]) -> Any:
    from verl.model_merger.base_model_merger import generate_config_from_args, parse_args

    with argv(["verl.model_merger", *words]):
        return generate_config_from_args(parse_args())


def check_torchrun(words: list[str]) -> Any:
    from torch.distributed.run import get_args_parser

    return get_args_parser().parse_args(words)


CHECKS = {MAIN_PPO: check_ppo, GENERATION: check_generation, EVALUATION: check_eval, SFT: check_sft}


def check_command(command: str) -> list[tuple[str, Any]]:
    """Every verl call in `command` through its entry point's checks; (what, the composed config or parsed args).
    Raises what verl raises when it refuses one."""
    return [found for words in words_of(command) for found in _check_call(tuple(words))]


@cache  # the grid plans the same call many times: each distinct one is checked once
def _check_call(words: tuple[str, ...]) -> list[tuple[str, Any]]:
    if MERGER in words:
        return [(MERGER, check_merger(list(words[words.index(MERGER) + 1 :])))]
    module = next((m for m in CHECKS if m in words), None)
    if module is None:
        return []
    launched = [("torchrun", check_torchrun(list(words[1:])))] if words[0] == "torchrun" else []
    return [*launched, (module, CHECKS[module](list(words[words.index(module) + 1 :])))]
