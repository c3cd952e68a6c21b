"""The search-tree policy: the built-in proposer as a noise-aware search over the tree of trials.

Every trial is a node whose parent is the checkpoint it trained from (the base model is the root). A node's value
is its free valid score with its 95% CI (agent.loop.validation; the public score where there is none). Each step:

1. A trial that just failed is debugged once: the same move from the same parent, half the learning rate and
   batch.
2. Every node is open or done. Done (saturated) is: its valid CI lower bound is at the ceiling (`CEILING`), or `k`
   of its children were scored and none beat it beyond noise (a child's CI lower bound above the node's score),
   or every move from it was tried. A branch is a node with the descendants that did not beat it beyond noise:
   closing the node closes them. A node at the ceiling closes the whole search: nothing can beat it beyond
   noise. When no node is open the run ends early, saying why.
3. Among open nodes the parent is the one with the highest upper confidence bound, its CI's upper end plus a
   visit bonus `c * sqrt(ln(1 + trials) / (1 + children))`: a runner-up whose CI is wide (few samples, or a noisy
   score) is branched from before the best node's narrow one, and a node with few children before one with many.
4. From that parent the first untried move, in order: continue (the parent's recipe at its own rate, only while
   the parent beat its own parent beyond noise: a line that still climbs is not annealed), anneal (the parent's
   recipe at 0.7x its rate), a larger
   and a smaller rate (ablate), then each RL recipe (improve); from the root, drafts: every recipe at its default
   rate (supervised first), then each at a larger and a smaller rate. A recipe tried once and left (no children)
   is reached again whenever its node's bound is the highest: that is how an idea abandoned early is revisited.
   With `--memory`, the first draft is the best first move of earlier runs on the same benchmark and model, and
   from a checkpoint the first move is the rate step their lines gained most with (agent.proposers.memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from agent.core import CEILING, Operator, Proposal, ProposalContext, TrialRecord
from agent.proposers.base import ProposerBase, RunView, SearchDone
from agent.proposers.builtin import DEFAULT_LR, RL_CYCLE, default_rates, trial_budget, value
from agent.proposers.data_moves import DataReport, carried, data_report, takes_row_moves
from agent.proposers.numeric import NumericHalf

K_CHILDREN = 3  # scored children without gain beyond noise that close a node
UCB_C = 0.05  # weight of the visit bonus, in score units
DRAFT_RATES = ((1.0, ""), (2.0, " at a larger rate"), (0.3, " at a smaller rate"))
LR_MOVES: tuple[tuple[float, Operator, str], ...] = (
    (0.7, "improve", "anneal the learning rate and keep training"),
    (2.0, "ablate", "a larger learning rate"),
    (0.3, "ablate", "a smaller learning rate"),
)


@dataclass
class Node:
    """A checkpoint in the tree: the base model (trial None) or a succeeded trial, with its score and 95% CI."""

    trial: TrialRecord | None
    score: float
    low: float
    high: float
    children: list[TrialRecord] = field(default_factory=list)
    parent: Node | None = None

    @property
    def id(self) -> str | None:
        return self.trial.trial_id if self.trial else None

    @property
    def name(self) -> str:
        return self.id or "the base model"

    def text(self) -> str:
        return f"{self.name} {self.score:.3f} [{self.low:.3f},{self.high:.3f}]"


def _interval(trial: TrialRecord) -> tuple[float, float, float] | None:
    """(score, CI low, CI high) of a trial: valid, else the grader's public CI, else the bare score."""
    score = value(trial)
    if score is None:
        return None
    if trial.valid_score is not None:
        return score, trial.valid_ci_low or score, trial.valid_ci_high or score
    low, high = trial.grading.get("ci_low"), trial.grading.get("ci_high")
    return score, float(low if low is not None else score), float(high if high is not None else score)


def build_tree(context: ProposalContext) -> list[Node]:
    """The root (base model) and every succeeded, scored trial, each with the trials that started from it."""
    scored = [t for t in context.trials if value(t) is not None]
    validated = not scored or any(t.valid_score is not None for t in scored)  # one scale for root and trials
    base = context.baseline_valid_score if validated else None
    if base is not None and context.baseline_valid_ci is not None:
        root = Node(None, base, *context.baseline_valid_ci)
    else:
        score = base if base is not None else (context.baseline_score or 0.0)
        root = Node(None, score, score, score)
    nodes: dict[str | None, Node] = {None: root}
    for trial in sorted(context.trials, key=lambda t: t.index):
        parent = nodes.get(trial.proposal.init_from, root)
        parent.children.append(trial)
        interval = _interval(trial)
        if trial.status == "succeeded" and interval is not None and not trial.grading.get("flags"):
            nodes[trial.trial_id] = Node(trial, *interval, parent=parent)
    return list(nodes.values())


def beats(child: TrialRecord, node: Node) -> bool:
    """Whether a child improved on its parent beyond noise: its CI lower bound is above the parent's score."""
    interval = _interval(child)
    return interval is not None and child.status == "succeeded" and interval[1] > node.score


def _lr(trial: TrialRecord | None, recipe: str, rates: dict[str, float] = DEFAULT_LR) -> float:
    if trial is None or trial.proposal.recipe != recipe:
        return rates.get(recipe, 1e-4)
    return float(trial.proposal.hyperparameters.get("learning_rate", rates.get(recipe, 1e-4)))


@dataclass(frozen=True)
class Move:
    recipe: str
    lr: float
    operator: Operator
    why: str
    extra: dict[str, Any] = field(default_factory=dict)  # train-row choices (agent.proposers.data_moves)


def _key(recipe: str, lr: float, extra: dict[str, Any] | None = None) -> tuple[Any, ...]:
    return recipe, float(f"{lr:.6g}"), tuple(sorted((extra or {}).items()))


def moves(
    node: Node,
    recipes: list[str],
    step: float | None = None,
    data: DataReport | None = None,
    rates: dict[str, float] = DEFAULT_LR,
) -> list[Move]:
    """The moves from `node` not tried yet (a child with the same recipe, rate and train-row choices is a tried
    move). `step`: the learning-rate step an earlier run gained most with (`--memory`,
    agent.proposers.memory.best_step), tried first from a checkpoint. `data`: what the train rows called for
    (agent.proposers.data_moves): from the base, the supervised recipe with each data move comes first, and prompt-
    only recipes lead where most rows have no answer; a line keeps its own train-row choices."""
    tried = {
        _key(
            c.proposal.recipe,
            _lr(c, c.proposal.recipe, rates),
            carried(c.proposal.hyperparameters, c.proposal.recipe),
        )
        for c in node.children
    }
    supervised = "sft" if "sft" in recipes else recipes[0]
    rl = [r for r in RL_CYCLE if r in recipes and r != supervised]
    options: list[Move] = []
    if node.trial is None:  # drafts: each recipe at its default rate (supervised first), then at other rates
        order = [*rl, supervised] if data is not None and data.prompts_only else [supervised, *rl]
        for move in data.moves if data is not None and takes_row_moves(supervised) else ():
            lr = rates.get(supervised, 1e-4)
            options.append(
                Move(supervised, lr, "draft", f"a {supervised} line: {move.why}", dict(move.fields))
            )
        for factor, rate in DRAFT_RATES:
            options += [
                Move(r, rates.get(r, 1e-4) * factor, "draft", f"a {r} line from the base{rate}")
                for r in order
            ]
    else:
        recipe = node.trial.proposal.recipe
        lr = _lr(node.trial, recipe, rates)
        own = carried(node.trial.proposal.hyperparameters, recipe)
        if node.parent is not None and beats(node.trial, node.parent):  # still climbing: do not anneal yet
            options.append(
                Move(recipe, lr, "improve", "keep training at the same rate: it still climbs", own)
            )
        options += [Move(recipe, lr * factor, op, why, own) for factor, op, why in LR_MOVES]
        if step is not None:  # remembered: the step that gained most in an earlier run goes first
            options.insert(
                0,
                Move(
                    recipe,
                    lr * step,
                    "improve",
                    f"{step:g}x the rate, the step an earlier run's lines gained most with (--memory)",
                    own,
                ),
            )
        options += [
            Move(r, rates.get(r, 1e-4), "improve", f"a different learning signal ({r})", carried(own, r))
            for r in ([supervised, *rl] if recipe != supervised else rl)
            if r != recipe
        ]
    # the first of each (recipe, rate, choices): a remembered step may repeat one of the policy's own
    fresh: list[Move] = []
    for m in options:
        if _key(m.recipe, m.lr, m.extra) not in tried:
            fresh.append(m)
            tried.add(_key(m.recipe, m.lr, m.extra))
    return fresh


def done_reason(
    node: Node,
    recipes: list[str],
    k: int = K_CHILDREN,
    step: float | None = None,
    rates: dict[str, float] = DEFAULT_LR,
) -> str | None:
    """Why a node is saturated, or None while it is worth branching from."""
    if node.low >= CEILING:
        return f"{node.text()} is at the ceiling (CI low >= {CEILING})"
    scored = [c for c in node.children if c.status == "succeeded" and value(c) is not None]
    if len(scored) >= k and not any(beats(c, node) for c in scored):
        return f"{node.name}: {len(scored)} children, none beat {node.score:.3f} beyond noise"
    if not moves(node, recipes, step, rates=rates):
        return f"{node.name}: every move tried"
    return None


def closed(
    nodes: list[Node],
    recipes: list[str],
    k: int = K_CHILDREN,
    step: float | None = None,
    rates: dict[str, float] = DEFAULT_LR,
) -> dict[str | None, str | None]:
    """Why each node is done (None: open). A branch is a node and the descendants that did not beat it beyond
    noise, so closing a node closes them too; a descendant that did beat it starts a branch of its own."""
    reasons: dict[str | None, str | None] = {}
    for node in nodes:  # parents come before their children (trial order)
        reason = done_reason(node, recipes, k, step, rates)
        parent = node.parent
        if reason is None and parent is not None and node.trial is not None:
            parent_reason = reasons.get(parent.id)
            if parent_reason is not None and not beats(node.trial, parent):
                reason = f"{node.name}: no gain beyond noise over {parent.name}, whose branch is closed"
        reasons[node.id] = reason
    return reasons


def ucb(node: Node, total: int, c: float = UCB_C) -> float:
    """The node's upper confidence bound: its CI's upper end plus a bonus that shrinks with its children."""
    return node.high + c * math.sqrt(math.log(1 + total) / (1 + len(node.children)))


class TreeProposer(ProposerBase):
    """Picks a parent by UCB over open nodes, the first untried move from it, and stops when no node is open."""

    name = "tree"

    def __init__(
        self,
        max_steps: int | None = None,
        k: int = K_CHILDREN,
        c: float = UCB_C,
        name: str = "tree",
        numeric: NumericHalf | None = None,
    ) -> None:
        self.max_steps = max_steps
        self.k, self.c, self.name = k, c, name
        # with a numeric half: a draft's or an ablation's numbers (rate, schedule, warm-up) come from Optuna
        self.numeric = numeric
        # with --memory: the best first move of earlier runs, and the rate step their lines gained most with
        self.remembered: tuple[str, dict[str, Any]] | None = None
        self.remembered_step: float | None = None

    def attach_run(self, run: RunView, trial_id: str) -> None:
        """Called by the loop before each proposal: with `--memory`, the best remembered first move of earlier
        runs on this benchmark and base model (agent.proposers.memory) becomes this run's first draft, and the
        learning-rate step their lines gained most with is each checkpoint's first move."""
        if self.numeric is not None:
            self.numeric.attach(run.paths.run_dir)
        if run.config.memory and self.remembered is None:
            from agent.proposers.memory import best_start, best_step

            self.remembered = best_start(run.config.home, run.config.benchmark, run.config.base_model)
            self.remembered_step = best_step(run.config.home, run.config.benchmark, run.config.base_model)

    def propose(self, context: ProposalContext) -> Proposal:
        seconds, budget = trial_budget(context, self.max_steps)
        recipes = context.recipes or ["sft", "grpo"]
        note = f" A reviewer rejected the last proposal: {context.feedback!r}." if context.feedback else ""
        if not context.trials and self.remembered is not None and self.remembered[0] in recipes:
            return self._remembered_draft(self.remembered, budget, seconds, note)
        nodes = build_tree(context)
        trials = context.trials
        last = trials[-1] if trials else None
        if last is not None and last.status in ("failed", "rejected") and last.proposal.operator != "debug":
            return self._debug(last, budget, seconds, note)
        at_ceiling = [n for n in nodes if n.low >= CEILING]
        if at_ceiling:
            raise SearchDone(f"score at its ceiling: {at_ceiling[0].text()}, CI low >= {CEILING}")
        rates = default_rates(context)  # the base model's, where the loop gives them
        reasons = closed(nodes, recipes, self.k, self.remembered_step, rates)
        open_nodes = [n for n in nodes if reasons[n.id] is None]
        if not open_nodes:
            raise SearchDone("every branch is done: " + "; ".join(r for r in reasons.values() if r))
        parent = max(open_nodes, key=lambda n: (ucb(n, len(trials), self.c), n.score))
        data = data_report(context.workspace, context.benchmark)
        move = moves(parent, recipes, self.remembered_step, data, rates)[0]
        numbers: dict[str, Any] = {"learning_rate": move.lr}
        if self.numeric is not None and move.operator in ("draft", "ablate"):
            numbers = self.numeric.suggest(context, move.recipe)  # the move says what, Optuna how much
            why_numbers = f" Numbers from Optuna: {numbers}."
        else:
            why_numbers = ""
        best = max(nodes, key=lambda n: n.score)
        runner_up = parent is not best
        revisit = (
            parent.trial is not None
            and not parent.children
            and sum(1 for t in trials if t.proposal.recipe == parent.trial.proposal.recipe) == 1
        )
        why = (
            f"UCB picks {parent.text()} (bound {ucb(parent, len(trials), self.c):.3f}"
            + (f"; a runner-up to {best.text()}, its CI is wider" if runner_up else "")
            + (
                f"; revisiting {parent.trial.proposal.recipe}, left after one trial"
                if revisit and parent.trial
                else ""
            )
            + f"). Move: {move.why}."
            + (f" Closed: {'; '.join(r for r in reasons.values() if r)}." if any(reasons.values()) else "")
        )
        return Proposal(
            hypothesis=f"{move.operator} from {parent.name}: {move.recipe} at learning rate "
            f"{numbers['learning_rate']:.3g} beats {parent.score:.3f} beyond noise.",
            rationale=why + why_numbers + note,
            recipe=move.recipe,
            hyperparameters={**numbers, **move.extra, **budget},
            parent=parent.id,
            operator=move.operator,
            estimated_cost_s=seconds,
        )

    @staticmethod
    def _remembered_draft(
        remembered: tuple[str, dict[str, Any]],
        budget: dict[str, float | int | None],
        seconds: float,
        note: str,
    ) -> Proposal:
        recipe, hyperparameters = remembered
        lr = float(hyperparameters.get("learning_rate", DEFAULT_LR.get(recipe, 1e-4)))
        return Proposal(
            hypothesis=f"draft from the base model: {recipe} at learning rate {lr:.3g}, the best first move an "
            "earlier run on this benchmark and model remembers, works again.",
            rationale="Memory across runs (--memory): start where an earlier run's best first trial started."
            + note,
            recipe=recipe,
            hyperparameters={"learning_rate": lr, **budget},
            parent=None,
            operator="draft",
            estimated_cost_s=seconds,
        )

    @staticmethod
    def _debug(
        last: TrialRecord, budget: dict[str, float | int | None], seconds: float, note: str
    ) -> Proposal:
        batch = int(last.proposal.hyperparameters.get("per_device_train_batch_size", 32))
        recipe = last.proposal.recipe if last.proposal.recipe in DEFAULT_LR else "sft"
        return Proposal(
            hypothesis=f"{last.trial_id} did not finish ({(last.error or last.status)[:160]}); the same move with "
            "half the learning rate and batch trains stably.",
            rationale="Debug a failed trial once before leaving its branch." + note,
            recipe=recipe,
            hyperparameters={
                "learning_rate": _lr(last, recipe) * 0.5,
                "per_device_train_batch_size": max(8, batch // 2),
                **carried(last.proposal.hyperparameters, recipe),  # the same move: its train-row choices too
                **budget,
            },
            parent=last.proposal.init_from,
            operator="debug",
            estimated_cost_s=seconds,
        )
