"""A numeric optimizer over a trial's numbers: Optuna's TPE or CMA-ES as a search policy, and its view for the LLM.

The space: the recipe (among the run's), the start (the base model, or the best checkpoint so far by valid score),
the learning rate as a factor of the recipe's default (log scale, 0.1x to 5x), the schedule (linear, cosine, or
constant with a cool-down), its warm-up share, and the train-row choices the data call for, if any
(agent.proposers.data_moves). The objective is the trial's valid score (the public score where
there is none); a failed trial is a failed Optuna trial. The study lives in the run's folder (`optuna.db`, SQLite)
and resumes with the run: each Optuna trial carries the id of the rlloop trial it proposed, told its value once that
trial is recorded. With `--memory`, the best first move of earlier runs on this benchmark and model is the study's
first trial. Optuna needs trials to act: TPE samples at random for its first `STARTUP_TRIALS`, so give it a run of
a dozen short trials, not five long ones (`HalvingProposer` is for those).

`advice` gives the LLM proposer the same optimizer's view of its own trials (Centaur: an LLM shown a numeric
optimizer's state): the best numbers so far and what TPE would try next.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.core import Proposal, ProposalContext, TrialRecord
from agent.proposers.base import ProposerBase, RunView
from agent.proposers.builtin import DEFAULT_LR, trial_budget, value
from agent.proposers.data_moves import data_report, takes_row_moves

if TYPE_CHECKING:
    import optuna

STUDY = "rlloop"
STORAGE_FILE = "optuna.db"
STARTUP_TRIALS = 4
RLLOOP_TRIAL = "rlloop_trial"  # user attribute: the rlloop trial an Optuna trial proposed
LOG_FACTOR = (-1.0, math.log10(5.0))  # the learning rate's factor of the recipe default, log10
SCHEDULES = ("linear", "cosine", "constant")
COOLDOWN = 0.3  # "constant" here is warm-up, stable and a cool-down over the trial's last 30%


def number_distributions() -> dict[str, Any]:
    """A trial's numbers: its rate as a factor of the recipe's default, its schedule and warm-up."""
    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return {
        "log_lr_factor": optuna.distributions.FloatDistribution(*LOG_FACTOR),
        "schedule": optuna.distributions.CategoricalDistribution(list(SCHEDULES)),
        "warmup_ratio": optuna.distributions.FloatDistribution(0.0, 0.2),
    }


def data_choices(context: ProposalContext) -> dict[str, dict[str, Any]]:
    """The train-row choices the run's data call for (agent.proposers.data_moves), by name; "as_given" is none."""
    report = data_report(context.workspace, context.benchmark)
    return {
        "as_given": {},
        **{"+".join(f"{k}={v}" for k, v in m.fields.items()): m.fields for m in report.moves},
    }


def distributions(recipes: list[str], data: list[str] | None = None) -> dict[str, Any]:
    """The whole space, as Optuna distributions (one set for every trial: its samplers see a fixed space)."""
    import optuna

    return {
        "recipe": optuna.distributions.CategoricalDistribution(list(recipes)),
        "start": optuna.distributions.CategoricalDistribution(["base", "best"]),
        **number_distributions(),
        **(
            {"data": optuna.distributions.CategoricalDistribution(list(data))}
            if data and len(data) > 1
            else {}
        ),
    }


def sampler(kind: str, seed: int) -> optuna.samplers.BaseSampler:
    import optuna

    if kind == "cmaes":  # the continuous numbers by CMA-ES; recipe, start and schedule at random
        return optuna.samplers.CmaEsSampler(
            seed=seed, n_startup_trials=STARTUP_TRIALS, warn_independent_sampling=False
        )
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=STARTUP_TRIALS, multivariate=True)


def hyperparameters(params: dict[str, Any]) -> dict[str, Any]:
    """An Optuna trial's numbers as the recipe's config fields."""
    recipe = str(params["recipe"])
    rate = DEFAULT_LR.get(recipe, 1e-4) * 10 ** float(params["log_lr_factor"])
    chosen: dict[str, Any] = {
        "learning_rate": float(f"{rate:.4g}"),
        "lr_scheduler_type": params["schedule"],
        "warmup_ratio": round(float(params["warmup_ratio"]), 3),
    }
    if params["schedule"] == "constant":
        chosen["cooldown_ratio"] = COOLDOWN
    return chosen


def _best(trials: list[TrialRecord]) -> TrialRecord | None:
    scored = [t for t in trials if t.status == "succeeded" and value(t) is not None and t.checkpoint]
    return max(scored, key=lambda t: value(t) or 0.0, default=None)


class NumericProposer(ProposerBase):
    """Each trial's recipe, start and numbers from an Optuna sampler (TPE, or CMA-ES), its study in the run's folder."""

    def __init__(self, kind: str = "tpe", max_steps: int | None = None, name: str = "optuna") -> None:
        self.kind, self.max_steps, self.name = kind, max_steps, name
        self.storage: Path | None = None
        self.remembered: dict[str, Any] | None = None

    def attach_run(self, run: RunView, trial_id: str) -> None:
        self.storage = run.paths.run_dir / STORAGE_FILE
        if run.config.memory and self.remembered is None:
            from agent.proposers.memory import best_start

            found = best_start(run.config.home, run.config.benchmark, run.config.base_model)
            self.remembered = {"recipe": found[0], **found[1]} if found else {}

    def study(self, context: ProposalContext) -> optuna.Study:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = f"sqlite:///{self.storage}" if self.storage is not None else None
        # a sampler is made afresh for every proposal (the study is what persists): seeded by the run's seed and
        # how far the study is, so each draw differs and a resumed run draws what it would have
        done = len(context.trials)
        study = optuna.create_study(
            study_name=STUDY,
            storage=storage,
            sampler=sampler(self.kind, context.seed * 1000 + done),
            direction="maximize",
            load_if_exists=True,
        )
        if not study.trials and self.remembered:  # --memory: where an earlier run's best first move started
            start = self.remembered
            recipes = context.recipes or ["sft", "grpo"]
            if start.get("recipe") in recipes and start.get("learning_rate"):
                factor = float(start["learning_rate"]) / DEFAULT_LR.get(str(start["recipe"]), 1e-4)
                study.enqueue_trial(
                    {
                        "recipe": start["recipe"],
                        "start": "base",
                        "log_lr_factor": min(max(math.log10(factor), LOG_FACTOR[0]), LOG_FACTOR[1]),
                    },
                    skip_if_exists=True,
                )
        return study

    def propose(self, context: ProposalContext) -> Proposal:
        import optuna

        recipes = context.recipes or ["sft", "grpo"]
        choices = data_choices(context)
        study = self.study(context)
        tell(study, context.trials)
        trial_id = f"t{len(context.trials) + 1:02d}"
        pending = [
            t
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if t.user_attrs.get(RLLOOP_TRIAL) == trial_id
        ]
        if pending:  # asked before an interruption: the same numbers again
            params = dict(pending[0].params)
        else:
            asked = study.ask(distributions(recipes, list(choices)))
            asked.set_user_attr(RLLOOP_TRIAL, trial_id)
            params = dict(asked.params)
        best = _best(context.trials)
        start = best.trial_id if params["start"] == "best" and best is not None else None
        chosen = hyperparameters(params)
        if takes_row_moves(str(params["recipe"])):
            chosen.update(choices.get(str(params.get("data", "as_given")), {}))
        seconds, budget = trial_budget(context, self.max_steps)
        done = sum(1 for t in study.trials if t.state.is_finished())
        phase = "sampling at random" if done < STARTUP_TRIALS else f"{self.kind.upper()} on {done} trials"
        return Proposal(
            hypothesis=f"{params['recipe']} at learning rate {chosen['learning_rate']:.3g} ({params['schedule']}, "
            f"warm-up {chosen['warmup_ratio']:.0%}) from {start or 'the base model'} scores well on valid.",
            rationale=f"Optuna ({phase}) over recipe, start, learning rate and schedule.",
            recipe=str(params["recipe"]),
            hyperparameters={**chosen, **budget},
            parent=start,
            operator="draft" if start is None else "improve",
            estimated_cost_s=seconds,
        )


class NumericHalf:
    """The numbers of another policy's moves (`TreeProposer(numeric=...)`): the policy picks recipe, start and
    operator, Optuna picks the rate, schedule and warm-up, one study per recipe in the run's folder."""

    def __init__(self, kind: str = "tpe") -> None:
        self.kind = kind
        self.storage: Path | None = None

    def attach(self, run_dir: Path) -> None:
        self.storage = run_dir / STORAGE_FILE

    def suggest(self, context: ProposalContext, recipe: str) -> dict[str, Any]:
        """Config fields for the next trial of `recipe` (its rate, schedule, warm-up), asked of the recipe's study
        once the recipe's recorded trials are told."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = f"sqlite:///{self.storage}" if self.storage is not None else None
        study = optuna.create_study(
            study_name=f"numbers-{recipe}",
            storage=storage,
            sampler=sampler(self.kind, context.seed * 1000 + len(context.trials)),
            direction="maximize",
            load_if_exists=True,
        )
        tell(study, context.trials)
        trial_id = f"t{len(context.trials) + 1:02d}"
        pending = [
            t
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if t.user_attrs.get(RLLOOP_TRIAL) == trial_id
        ]
        if pending:
            params = dict(pending[0].params)
        else:
            asked = study.ask(number_distributions())
            asked.set_user_attr(RLLOOP_TRIAL, trial_id)
            params = dict(asked.params)
        return hyperparameters({"recipe": recipe, **params})


def tell(study: optuna.Study, trials: list[TrialRecord]) -> None:
    """Tell the study the value of every Optuna trial whose rlloop trial is recorded (failed ones as failed)."""
    import optuna

    recorded = {t.trial_id: t for t in trials}
    for asked in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        record = recorded.get(str(asked.user_attrs.get(RLLOOP_TRIAL)))
        if record is None:
            continue
        score = value(record)
        if record.status == "succeeded" and score is not None:
            study.tell(asked.number, score)
        else:
            study.tell(asked.number, state=optuna.trial.TrialState.FAIL)


def _params_of(trial: TrialRecord, recipes: list[str]) -> dict[str, Any] | None:
    """An rlloop trial's numbers in the optimizer's space (None: it is outside it, e.g. custom code)."""
    hp = trial.proposal.hyperparameters
    recipe, rate = trial.proposal.recipe, hp.get("learning_rate")
    if trial.proposal.train_py or recipe not in recipes or not isinstance(rate, int | float) or rate <= 0:
        return None
    factor = math.log10(float(rate) / DEFAULT_LR.get(recipe, 1e-4))
    schedule = hp.get("lr_scheduler_type", "linear")
    return {
        "recipe": recipe,
        "start": "base" if trial.proposal.init_from is None else "best",
        "log_lr_factor": min(max(factor, LOG_FACTOR[0]), LOG_FACTOR[1]),
        "schedule": schedule if schedule in SCHEDULES else "constant",
        "warmup_ratio": min(max(float(hp.get("warmup_ratio", 0.05)), 0.0), 0.2),
    }


def advice(context: ProposalContext, seed: int = 0) -> str | None:
    """What a TPE optimizer fitted to the trials so far says: the best numbers and its next suggestion (None: too
    few trials in its space to say anything)."""
    import optuna

    recipes = context.recipes or ["sft", "grpo"]
    space = distributions(recipes)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=sampler("tpe", seed + len(context.trials)))
    for trial in context.trials:
        params, score = _params_of(trial, recipes), value(trial)
        if params is None or trial.status != "succeeded" or score is None:
            continue
        study.add_trial(optuna.trial.create_trial(params=params, distributions=space, value=score))
    scored = len(study.trials)
    if not scored:
        return None
    best = study.best_trial
    suggested = hyperparameters(study.ask(space).params)
    lines = [
        f"A TPE optimizer fitted to the {scored} scored trials in its space (recipe, start, learning rate as a "
        "factor of the recipe default, schedule, warm-up):",
        f"- best so far: valid {best.value:.3f} with {_show(best.params)}",
        f"- it would try next: {suggested}"
        + (" (still sampling at random: too few trials)" if scored < STARTUP_TRIALS else ""),
        "Use it as a second opinion on the numbers; the recipe, start and data are your call.",
    ]
    return "\n".join(lines)


def _show(params: dict[str, Any]) -> str:
    shown = hyperparameters(params)
    return f"recipe {params['recipe']} from {params['start']}, " + ", ".join(
        f"{k}={v}" for k, v in shown.items()
    )
