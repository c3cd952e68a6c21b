"""A trial's own time, and the learning rate that follows it.

A trial is bounded by steps (`max_steps`), by wall seconds (`max_seconds`: from the trial's start, imports and
loading included, to its checkpoint saved), or by both. `TrialClock` turns the wall budget into a training window
once training begins: what is left of `max_seconds` after start-up, less what saving will take and what the host
keeps back for itself afterwards (`reserved_seconds`). `lr_factor` gives the schedule's multiplier of the peak rate
at a point of the trial, measured as the larger of the steps done and the window's seconds spent, so a time-boxed
trial warms up, decays and cools down over the seconds it has, not over a step count it will never reach.

Every recipe follows it: TRL's through `trainers.runtime` (the rate set before each optimizer step), the
hand-written loops through `trainers.onpolicy.Session`.
"""

from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Literal, Protocol

from trainers.result import TrainerSetupError

if TYPE_CHECKING:  # the host imports this module for TRIAL_STARTED_ENV: no torch at import time
    import torch

ScheduleType = Literal["linear", "cosine", "constant", "constant_with_warmup"]
TRIAL_STARTED_ENV = "RLLOOP_TRIAL_STARTED_AT"  # the host's clock (epoch seconds) when it launched the trial
LAUNCH_SKEW_S = 120.0  # a launch time further than this before the process began is another clock's: ignored
SAVE_BYTES_PER_S = 300e6  # what saving a checkpoint is budgeted at (safetensors, local disk)
SAVE_FIXED_S = 0.25


class ScheduleError(TrainerSetupError):
    """The trial's budget cannot be honoured: start-up spent it before training could begin (the CLI: exit 2)."""


class ScheduleSettings(Protocol):
    """The fields of a trainer config that say how its rate moves and when its trial ends (`TrainerConfig`)."""

    lr_scheduler_type: ScheduleType
    warmup_ratio: float
    warmup_steps: int | None
    cooldown_ratio: float
    max_steps: int | None
    max_seconds: float | None
    schedule_from: float
    schedule_to: float


def schedule_problems(config: ScheduleSettings) -> list[str]:
    """Why this schedule cannot be followed as asked, one reason a line (empty: it can)."""
    kind, warmup_ratio, cooldown_ratio = config.lr_scheduler_type, config.warmup_ratio, config.cooldown_ratio
    warmup_steps, max_steps = config.warmup_steps, config.max_steps
    problems = []
    if max_steps is None and config.max_seconds is None:
        problems.append("a trial needs an end: set max_steps, max_seconds or both")
    if warmup_ratio + cooldown_ratio >= 1.0:
        problems.append(
            f"warmup_ratio ({warmup_ratio}) + cooldown_ratio ({cooldown_ratio}) leave no time at the peak rate; "
            "keep their sum below 1"
        )
    if warmup_steps is not None and max_steps is not None and warmup_steps >= max_steps:
        problems.append(
            f"the warm-up ({warmup_steps} steps) is as long as the whole trial (max_steps {max_steps}); "
            "use warmup_ratio, or fewer warm-up steps"
        )
    if config.schedule_from >= config.schedule_to:
        problems.append(
            f"schedule_from ({config.schedule_from}) must be before schedule_to ({config.schedule_to}): a trial "
            "covers a part of its line's schedule, from one point to a later one"
        )
    if cooldown_ratio > 0 and kind in ("linear", "cosine"):
        problems.append(
            f"cooldown_ratio applies to constant schedules; {kind} already decays over the whole trial "
            "(set cooldown_ratio to 0, or lr_scheduler_type to constant for warm-up, stable, decay)"
        )
    return problems


def lr_factor(
    progress: float,
    *,
    kind: str,
    warmup: float,
    cooldown: float = 0.0,
    floor: float = 0.0,
) -> float:
    """The multiplier of the peak rate at `progress` (0: the trial's start, 1: its end). `warmup` and `cooldown`
    are shares of the trial; `floor` is where a decay ends (a share of the peak)."""
    p = min(max(progress, 0.0), 1.0)
    if warmup > 0 and p < warmup:
        return p / warmup
    if kind in ("linear", "cosine"):
        after = (p - warmup) / (1.0 - warmup) if warmup < 1.0 else 1.0
        shape = 1.0 - after if kind == "linear" else 0.5 * (1.0 + math.cos(math.pi * after))
        return floor + (1.0 - floor) * shape
    if cooldown > 0 and p > 1.0 - cooldown:  # constant, then a linear cool-down to the floor
        return floor + (1.0 - floor) * (1.0 - p) / cooldown
    return 1.0


def process_started_at() -> float:
    """When this process began, on the wall clock (Linux: from /proc; elsewhere: now). Its start is counted in
    clock ticks since boot; the time since boot comes from CLOCK_BOOTTIME, not /proc/stat's btime, which is whole
    seconds (a start up to a second too early made a trial's wall seconds longer than the trial)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        since_start = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - since_start
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


def trial_started_at() -> float:
    """The trial's start: the host's launch time when it gave one (the sandbox's start-up is the trial's too; the
    `python -m trainers` CLI gives its own process start otherwise), else now: a recipe called in a longer-lived
    process starts its trial when it is called. A launch time in the future, or long before this process began, is
    another machine's clock and is not used."""
    raw = os.environ.get(TRIAL_STARTED_ENV)
    try:
        launched = float(raw) if raw else None
    except ValueError:
        launched = None
    if launched is None:
        return time.time()
    process = process_started_at()
    if (
        process - LAUNCH_SKEW_S <= launched <= time.time() + 1.0
    ):  # a warm interpreter's go comes after its start
        return launched
    return process


_MARKS: dict[str, float] = {}


def mark(name: str) -> None:
    """Note that a part of the trial's start-up ended now (`startup_parts` in metrics.json: where its seconds went)."""
    _MARKS.setdefault(name, time.time())


def startup_parts(started_at: float, until: float) -> dict[str, float]:
    """Seconds of each start-up part, in order: the sandbox and interpreter's start (`launch`, when the host gave
    its launch time), then each `mark` since the previous one, and `other` up to `until` (training's start)."""
    parts: dict[str, float] = {}
    previous = started_at
    process = process_started_at()
    if started_at < process <= until:
        parts["launch"] = process - started_at
        previous = process
    for name, at in sorted(_MARKS.items(), key=lambda item: item[1]):
        if previous <= at <= until:
            parts[name] = at - previous
            previous = at
    parts["other"] = max(0.0, until - previous)
    return {name: round(seconds, 3) for name, seconds in parts.items()}


def save_seconds(model: torch.nn.Module, optimizer_bytes: int = 0) -> float:
    """What saving `model` (and `optimizer_bytes` of optimizer state) is budgeted to take."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return SAVE_FIXED_S + (weights + optimizer_bytes) / SAVE_BYTES_PER_S


class TrialClock:
    """A trial's budget in wall seconds and steps, and how far through its training it is.

    `begin_training(save_s)` opens the window: from now to the trial's start + `max_seconds` - `reserved_seconds`
    - `save_s`. `progress(step)` is the larger of step / max_steps and the window's share spent; `expired(step)`
    says the trial must stop (and save) now.
    """

    def __init__(
        self,
        max_seconds: float | None,
        max_steps: int | None,
        *,
        reserved_seconds: float = 0.0,
        started_at: float | None = None,
    ) -> None:
        self.max_seconds = max_seconds
        self.max_steps = max_steps
        self.reserved_seconds = reserved_seconds
        self.started_at = trial_started_at() if started_at is None else started_at
        self.train_started: float | None = None
        self.window_s: float | None = None

    def begin_training(self, save_s: float = SAVE_FIXED_S) -> None:
        """Start the training window; ScheduleError when start-up already spent the budget."""
        now = time.time()
        self.train_started = now
        if self.max_seconds is None:
            return
        window = self.started_at + self.max_seconds - self.reserved_seconds - save_s - now
        if window <= 0:
            spent = now - self.started_at
            raise ScheduleError(
                f"max_seconds={self.max_seconds:g} leaves no time to train: start-up and loading took {spent:.1f} s, "
                f"saving needs about {save_s:.1f} s and the host keeps {self.reserved_seconds:.1f} s; give the trial "
                f"more than {spent + save_s + self.reserved_seconds:.0f} s"
            )
        self.window_s = window

    @property
    def training_elapsed(self) -> float:
        return 0.0 if self.train_started is None else time.time() - self.train_started

    @property
    def startup_seconds(self) -> float:
        """From the trial's start to the training window's (imports, data, model load)."""
        return 0.0 if self.train_started is None else self.train_started - self.started_at

    def progress(self, step: int) -> float:
        """How far through its training the trial is before step `step` (0-based), in [0, 1]."""
        shares = [step / self.max_steps] if self.max_steps else []
        if self.window_s:
            shares.append(self.training_elapsed / self.window_s)
        return min(max(shares, default=0.0), 1.0)

    def expired(self, step: int) -> bool:
        """The trial must end now: its steps are done, or its window's seconds are spent."""
        if self.max_steps is not None and step >= self.max_steps:
            return True
        return self.window_s is not None and self.training_elapsed >= self.window_s


class LearningRate:
    """The schedule of one trial: the peak rate of each optimizer, scaled by `lr_factor` at each step.

    A trial may cover only a part of its line's schedule (`span`, from `schedule_from` to `schedule_to`): a line of
    continued trials splits one warm-up and one decay between them, so k trials train as one run of their total
    length would, instead of warming up and decaying k times. Shares (warm-up, cool-down) are then of the line."""

    def __init__(
        self,
        clock: TrialClock,
        *,
        kind: str,
        warmup_ratio: float,
        warmup_steps: int | None,
        cooldown_ratio: float,
        min_lr_ratio: float,
        span: tuple[float, float] = (0.0, 1.0),
    ) -> None:
        self.clock = clock
        self.kind = kind
        self.warmup_ratio = warmup_ratio
        self.warmup_steps = warmup_steps
        self.cooldown = cooldown_ratio
        self.floor = min_lr_ratio
        self.span = span
        self.last_factor = 0.0
        self.last_progress = 0.0
        self.skip_warmup = False

    def line_progress(self, progress: float) -> float:
        """Where in its line's schedule the trial is at `progress` of its own training."""
        start, end = self.span
        return start + progress * (end - start)

    def factor(self, step: int) -> float:
        """The multiplier for step `step` (0-based): warm-up by steps when `warmup_steps` is set, else by share."""
        progress = self.clock.progress(step)
        warmup = self.warmup_ratio
        if self.warmup_steps is not None:  # 0: no warm-up at all, not the ratio's
            warmup = 0.0
            # a ramp in this trial's own steps: only a trial that starts its line warms up
            if step < self.warmup_steps and not self.skip_warmup and self.span[0] == 0.0:
                self.last_progress, self.last_factor = progress, step / self.warmup_steps
                return self.last_factor
        line = self.line_progress(progress)
        # a continued optimizer skips the ramp (its moments are warm), not the warm-up's share of the schedule:
        # the decay after it keeps the shape one uninterrupted run has
        value = lr_factor(
            max(line, warmup) if self.skip_warmup else line,
            kind=self.kind,
            warmup=warmup,
            cooldown=self.cooldown,
            floor=self.floor,
        )
        self.last_progress, self.last_factor = progress, value
        return value

    def apply(self, step: int, *optimizers: torch.optim.Optimizer) -> float:
        """Set every parameter group's rate for step `step` (each group's peak remembered on first use)."""
        value = self.factor(step)
        for optimizer in optimizers:
            for group in optimizer.param_groups:
                peak = group.setdefault("peak_lr", group["lr"])
                group["lr"] = peak * value
        return value

    def figures(self) -> dict[str, float]:
        """What metrics.json reports of the schedule: where it ended, so a proposer sees whether it happened."""
        figures = {
            "schedule_progress": round(self.last_progress, 4),
            "lr_factor_last": round(self.last_factor, 6),
        }
        if self.span != (0.0, 1.0):
            figures["line_progress"] = round(self.line_progress(self.last_progress), 4)
        return figures
