"""Property (e) of the research ladder: can the default recipe, run once with the whole budget, be beaten at all by
what the policies' move set can express?

    .venv/bin/python benchmarks/ladder_oracle.py [--rungs arith-noisy,...] [--seeds 3] [--jobs 2]
        [--a-schedule linear|default] [--out results.json] [--resume runs.jsonl] [--smoke]

On a rung where (a), the default recipe at its defaults with the whole budget in one trial, is already the best
configuration the policies can reach, a search can only tie it minus what looking costs. So each rung carries a
small oracle grid (`GRIDS`): whole-budget configurations and routes (recipe, rate, data moves such as
`filter_by_verifier` or `answer_format`, stages such as SFT then RFT) that a policy could propose, measured here,
not searched. Every entry and (a) are run with the same seeds; each stage is one `python -m trainers <recipe>` on the
rung's public train split (step-bounded, so TRL's linear schedule applies), the final checkpoint scored by the
grader's own evaluation on the first `eval_limit` problems (or games) of the rung's hidden test split (`--test-seed`,
the ladder's). Trials never see that split: they read train.jsonl only; the scoring is this process's.

(a) runs the rung's first recipe with its config class's defaults and `budget_steps` steps; `--a-schedule linear`
(the default here) sets the linear decay with the recipe's own warm-up, the careful default of the "trials that
train as asked" issue; `--a-schedule default` keeps the config class's current `lr_scheduler_type`. The line above
each rung's table says which ran, so the figures can be measured again when the default changes.

Per rung it prints (a) mean ± SE, each entry's mean ± SE with its gain over (a) paired by seed (points and SE), its
CPU seconds against (a)'s, with its training and wall seconds beside (an entry whose mean CPU seconds exceed (a)'s
by more than `BUDGET_SLACK` is marked over budget and cannot be the best), and the verdict: (e) holds when the best entry beats
(a) by at least `E_POINTS` and by at least `E_SE` standard errors, taking the larger of the paired SE and the
unpaired one. The best is chosen on these same runs, so its gain is slightly flattering. Compute is the trials'
CPU seconds (user + system of each one-thread `python -m trainers` process, from the kernel's accounting of that
child): what a trial costs whatever else the shared machine runs, start-up included, so a two-stage route pays a
trial's fixed cost (imports, data, model load, save) twice. Training and wall seconds, which the machine's load
inflates, are printed beside.

`--resume FILE` appends every finished run to FILE (one JSON object a line) and reuses the ones already there with
the same rung, entry, stages, seed and test set (delete the file to measure again after a change in the trainers).
`--smoke` (the suite's check that it runs end to end): two seeds of a two-entry grid of 3-step trials on 40 test
problems, nothing concluded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from research_ladder import RUNGS, Rung  # noqa: E402

E_POINTS, E_SE = 0.10, 3.0  # (e): the best entry beats (a) by at least this many points and standard errors
# an entry may use this much more CPU than (a): the steps are fixed, the seconds vary a little from run to run
BUDGET_SLACK = 0.10
A_NAME = "(a) default"


@dataclass(frozen=True)
class Stage:
    """One trial of a route: a recipe and the hyperparameters a proposal would give it."""

    recipe: str
    hyperparameters: tuple[tuple[str, Any], ...]

    def config(self) -> dict[str, Any]:
        return dict(self.hyperparameters)


def stage(recipe: str, **hyperparameters: Any) -> Stage:
    return Stage(recipe, tuple(sorted(hyperparameters.items())))


@dataclass(frozen=True)
class Route:
    """A grid entry: one or more stages, each continuing from the previous one's checkpoint."""

    name: str
    stages: tuple[Stage, ...]

    def key(self) -> str:
        blob = json.dumps([[s.recipe, s.config()] for s in self.stages], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def route(name: str, *stages: Stage) -> Route:
    return Route(name, stages)


@dataclass(frozen=True)
class Grid:
    """A rung's oracle: (a)'s step count (about the rung's whole budget of training on this machine) and the
    entries it is measured against."""

    budget_steps: int
    routes: tuple[Route, ...]
    why: str = ""


def sft(steps: int, lr: float = 1e-3, **more: Any) -> Stage:
    return stage("sft", max_steps=steps, learning_rate=lr, lr_scheduler_type="linear", **more)


def rft(steps: int, lr: float = 1e-3, **more: Any) -> Stage:
    return stage("rft", max_steps=steps, learning_rate=lr, **more)


GRIDS: dict[str, Grid] = {
    # the original rungs: the default recipe is about right there; their figures show what search costs
    "arith": Grid(
        800,
        (
            route("sft lr 5e-4", sft(800, 5e-4)),
            route("sft lr 2e-3", sft(800, 2e-3)),
            route("sft lr 3e-3", sft(800, 3e-3)),
        ),
        "the default recipe's own task",
    ),
    # game turns are longer rows: about 60 s of training is 180 steps on frozenlake, 160 on sokoban1 (0.31 and 0.38 CPU
    # s a step, measured at 400 steps)
    "frozenlake": Grid(
        180,
        (route("sft lr 5e-4", sft(180, 5e-4)), route("sft lr 2e-3", sft(180, 2e-3))),
        "the default recipe's own task",
    ),
    "sokoban1": Grid(
        160,
        (route("sft lr 5e-4", sft(160, 5e-4)), route("sft lr 2e-3", sft(160, 2e-3))),
        "the default recipe's own task",
    ),
    # 40% of the demonstrations are near misses; the verifier is exact
    "arith-noisy": Grid(
        800,
        (
            route("sft, rows filtered by the verifier", sft(800, filter_by_verifier=True)),
            route("sft filtered, lr 2e-3", sft(800, 2e-3, filter_by_verifier=True)),
            route("rft from the base model", rft(100, checker="verifier")),
            route(
                "sft filtered 400, then rft", sft(400, filter_by_verifier=True), rft(60, checker="verifier")
            ),
        ),
        "wrong demonstrations: filter by the verifier, or sample and verify",
    ),
    # 256 labelled prompts, 11,744 without an answer
    "arith-few": Grid(
        800,
        (
            route("sft 100 steps (stop early)", sft(100)),
            route("sft 100, then rft on all prompts", sft(100), rft(100, checker="verifier")),
            route("sft 100, then rft lr 3e-4", sft(100), rft(100, 3e-4, checker="verifier")),
            route("rft from the base model", rft(100, checker="verifier")),
            route("rft from the base model, 170 steps", rft(170, checker="verifier")),
            route("sft 100, then rft 130 steps lr 3e-4", sft(100), rft(130, 3e-4, checker="verifier")),
            route(
                "sft 100, then grpo on all prompts",
                sft(100),
                stage("grpo", max_steps=300, learning_rate=1e-4),
            ),
        ),
        "few labels, many prompts: SFT on the few, then learn from the prompts",
    ),
    # answers written as sentences, graded as a bare number
    "arith-verbose": Grid(
        800,
        (
            route("sft on the final numbers", sft(800, answer_format="final_number")),
            route("sft on the final numbers, lr 2e-3", sft(800, 2e-3, answer_format="final_number")),
            # the bare numbers are half as long as the sentences: 1,600 steps cost about (a)'s 800
            route(
                "sft on the final numbers, lr 2e-3, 1600 steps", sft(1600, 2e-3, answer_format="final_number")
            ),
        ),
        "data in a format the grader does not parse: reformat",
    ),
    # sentences, 40% of them slips: a reformat and a filter at once (each alone leaves the other defect)
    "arith-messy": Grid(
        800,
        (
            route(
                "sft on the final numbers of the rows the verifier accepts",
                sft(800, answer_format="final_number", filter_by_verifier=True),
            ),
            route("the same, lr 2e-3", sft(800, 2e-3, answer_format="final_number", filter_by_verifier=True)),
            route(
                "the same, lr 2e-3, 1600 steps",
                sft(1600, 2e-3, answer_format="final_number", filter_by_verifier=True),
            ),
            route("sft on the final numbers only", sft(800, answer_format="final_number")),
            route("sft on the verifier's rows only", sft(800, filter_by_verifier=True)),
        ),
        "two defects at once: reformat and filter together",
    ),
}
SMOKE = Grid(
    3,
    (
        route("sft lr 2e-3", sft(3, 2e-3)),
        route("sft 2, then rft", sft(2), rft(1, checker="score", warmup_steps=0)),
    ),
)


@dataclass
class RunFigures:
    """One (entry, seed): the test score of its final checkpoint, and what it cost."""

    rung: str
    entry: str
    key: str
    seed: int
    score: float
    n: int
    train_s: float
    wall_s: float
    cpu_s: float
    steps: list[int] = field(default_factory=list)
    test: str = ""

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def default_route(rung: Rung, grid: Grid, schedule: str) -> Route:
    """(a): the rung's first recipe at its config class's defaults, `grid.budget_steps` steps; with `schedule`
    "linear", decayed linearly after the recipe's own warm-up."""
    recipe = rung.recipes.split(",")[0]
    more = {"lr_scheduler_type": "linear"} if schedule == "linear" else {}
    return route(A_NAME, stage(recipe, max_steps=grid.budget_steps, **more))


def describe_default(rung: Rung, grid: Grid, schedule: str) -> str:
    """(a)'s config as it ran: the fields that set its rate, read from the recipe's config class."""
    from trainers.registry import get_recipe

    recipe = rung.recipes.split(",")[0]
    fields = get_recipe(recipe).config_class.model_fields
    rate = fields["learning_rate"].default
    steps = fields["warmup_steps"].default if "warmup_steps" in fields else None
    ratio = fields["warmup_ratio"].default if "warmup_ratio" in fields else 0.0
    warm = f"{steps} steps" if steps is not None else f"{ratio:.0%} of the steps"
    kind = "linear" if schedule == "linear" else fields["lr_scheduler_type"].default
    return (
        f"{recipe} at its defaults (lr {rate:g}, warm-up {warm}, {kind} schedule), {grid.budget_steps} steps"
    )


def train_file(work: Path, benchmark: str) -> Path:
    """The benchmark's public train split as a run's workspace holds it (data/train.jsonl)."""
    from tasks import get_benchmark
    from tasks.registry import write_jsonl

    path = work / "data" / benchmark / "train.jsonl"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(path, get_benchmark(benchmark).load("train"))
    return path


def run_route(
    work: Path, rung_name: str, rung: Rung, model: Path, entry: Route, seed: int, data: Path, test: TestSet
) -> RunFigures:
    """Each stage a `python -m trainers` process from the previous stage's checkpoint; the last one scored."""
    from trainers.registry import get_recipe

    folder = work / "runs" / rung_name / f"{entry.key()}-{seed}"
    start, train_s, wall_s, cpu_s, steps = model, 0.0, 0.0, 0.0, []
    for index, step in enumerate(entry.stages):
        out = folder / f"stage{index}"
        threads = (
            {"torch_threads": 1}
            if "torch_threads" in get_recipe(step.recipe).config_class.model_fields
            else {}
        )
        config = {
            **step.config(),
            "model_path": str(start),
            "train_file": str(data),
            "output_dir": str(out),
            "benchmark": rung.benchmark,
            "seed": seed,
            **threads,
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        config_path = folder / f"stage{index}.json"
        config_path.write_text(json.dumps(config))
        log = folder / f"stage{index}.log"
        began = time.monotonic()
        code, cpu = run_measured(
            [sys.executable, "-m", "trainers", step.recipe, "--config", str(config_path)], log
        )
        wall_s += time.monotonic() - began
        cpu_s += cpu
        if code != 0:
            raise RuntimeError(
                f"{rung_name} / {entry.name} / seed {seed}: stage {index} ({step.recipe}) failed "
                f"(exit {code}): {log.read_text()[-600:]}"
            )
        metrics = json.loads((out / "metrics.json").read_text())
        train_s += float(metrics["train_seconds"])
        steps.append(int(metrics["steps"]))
        start = out
    score = test.score(start)
    return RunFigures(
        rung_name,
        entry.name,
        entry.key(),
        seed,
        score,
        test.n,
        round(train_s, 1),
        round(wall_s, 1),
        round(cpu_s, 1),
        steps,
        test.label,
    )


def run_measured(command: list[str], log: Path) -> tuple[int, float]:
    """Run `command` (one thread, output to `log`); return its exit code and the CPU seconds it used (user + system,
    from the kernel's accounting of that one child: what the trial cost, whatever else the machine was running)."""
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_utime + usage.ru_stime


class TestSet:
    """The rung's hidden test problems (the first `limit` of the split `seed` draws), scored as the grader does."""

    _lock = threading.Lock()

    def __init__(self, benchmark: str, seed: int, limit: int) -> None:
        from grader.benchmarks import get_benchmark

        self.benchmark = get_benchmark(benchmark, seed)
        self.samples = self.benchmark.load("test")[:limit]
        self.n = len(self.samples)
        self.label = f"{benchmark} test seed {seed}, first {self.n}"

    def score(self, checkpoint: Path) -> float:
        import torch

        from grader.config import EvalConfig
        from grader.evaluation import evaluate

        with self._lock:  # one evaluation at a time keeps each on one core
            torch.set_num_threads(1)
            return float(evaluate(checkpoint, self.samples, self.benchmark, EvalConfig(engine="hf")).score)


def mean_se(values: Sequence[float]) -> tuple[float, float]:
    mean = statistics.fmean(values) if values else float("nan")
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return mean, se


@dataclass
class Comparison:
    """An entry against (a): gain in points, paired and unpaired SE, budget, and what the verdict reads."""

    entry: str
    mean: float
    se: float
    gain: float
    paired_se: float
    unpaired_se: float
    train_s: float
    wall_s: float
    cpu_s: float
    cpu_ratio: float
    n: int

    @property
    def se_used(self) -> float:
        """The larger of the paired and unpaired SE (the paired one from 3 seeds is itself rough)."""
        values = [v for v in (self.paired_se, self.unpaired_se) if v == v]
        return max(values) if values else float("nan")

    @property
    def in_budget(self) -> bool:
        return self.cpu_ratio <= 1.0 + BUDGET_SLACK

    @property
    def gain_in_se(self) -> float:
        se = self.se_used
        return self.gain / se if se and se == se else float("nan")


def compare(runs: Sequence[RunFigures], baseline: Sequence[RunFigures], entry: str) -> Comparison:
    """`runs` of one entry against (a)'s runs, paired by seed."""
    a = {r.seed: r for r in baseline}
    paired = [r for r in runs if r.seed in a]
    mean, se = mean_se([r.score for r in runs])
    a_mean, a_se = mean_se([r.score for r in baseline])
    diffs = [r.score - a[r.seed].score for r in paired]
    gain, paired_se = mean_se(diffs)
    unpaired = math.sqrt(se**2 + a_se**2) if se == se and a_se == a_se else float("nan")
    a_cpu = statistics.fmean(r.cpu_s for r in baseline) if baseline else float("nan")
    cpu = statistics.fmean(r.cpu_s for r in runs)
    return Comparison(
        entry,
        mean,
        se,
        gain if diffs else mean - a_mean,
        paired_se,
        unpaired,
        statistics.fmean(r.train_s for r in runs),
        statistics.fmean(r.wall_s for r in runs),
        cpu,
        cpu / a_cpu if a_cpu else float("nan"),
        len(runs),
    )


def verdict(comparisons: Sequence[Comparison]) -> tuple[Comparison | None, bool | None]:
    """The best entry within budget by mean test score, and whether (e) holds for it (None: not measurable)."""
    eligible = [c for c in comparisons if c.in_budget]
    if not eligible:
        return None, None
    best = max(eligible, key=lambda c: c.mean)
    if best.se_used != best.se_used:
        return best, None
    return best, best.gain >= E_POINTS and best.gain_in_se >= E_SE


def report(name: str, rung: Rung, grid: Grid, schedule: str, runs: Sequence[RunFigures]) -> list[str]:
    """The rung's lines: (a), every entry, and the verdict."""
    by_entry: dict[str, list[RunFigures]] = {}
    for run in runs:
        by_entry.setdefault(run.entry, []).append(run)
    baseline = by_entry.get(A_NAME, [])
    a_mean, a_se = mean_se([r.score for r in baseline])
    test = baseline[0].test if baseline else "n/a"
    lines = [
        f"{name} x {rung.base_model} ({grid.why}); test: {test}",
        f"  (a) = {describe_default(rung, grid, schedule)}",
        f"  {A_NAME:<40} {a_mean:.3f} ± {a_se:.3f}  CPU {statistics.fmean(r.cpu_s for r in baseline):.0f} s, "
        f"training {statistics.fmean(r.train_s for r in baseline):.0f} s, "
        f"wall {statistics.fmean(r.wall_s for r in baseline):.0f} s  (n={len(baseline)})"
        if baseline
        else f"  {A_NAME}: not measured",
    ]
    comparisons = [compare(by_entry[e.name], baseline, e.name) for e in grid.routes if by_entry.get(e.name)]
    for c in comparisons:
        budget = "" if c.in_budget else f"  OVER BUDGET (> {1 + BUDGET_SLACK:.2f}x (a)'s CPU seconds)"
        lines.append(
            f"  {c.entry:<40} {c.mean:.3f} ± {c.se:.3f}  vs (a) {100 * c.gain:+.1f} points, paired SE "
            f"{100 * c.paired_se:.1f}, unpaired {100 * c.unpaired_se:.1f} -> {c.gain_in_se:.1f} SE  "
            f"CPU {c.cpu_s:.0f} s ({c.cpu_ratio:.2f}x), training {c.train_s:.0f} s, wall {c.wall_s:.0f} s{budget}  (n={c.n})"
        )
    best, holds = verdict(comparisons)
    if best is None:
        lines.append("  (e): n/a (no entry within budget measured)")
    else:
        state = "n/a (one seed)" if holds is None else "HOLDS" if holds else "fails"
        lines.append(
            f"  (e) {state}: best within budget '{best.entry}' minus (a) = {100 * best.gain:+.1f} points = "
            f"{best.gain_in_se:.1f} SE (needs >= {100 * E_POINTS:.0f} points and >= {E_SE:g} SE)"
        )
    return lines


def load_resume(path: Path | None) -> dict[tuple[str, str, int, str], RunFigures]:
    if path is None or not path.exists():
        return {}
    found = {}
    for line in path.read_text().splitlines():
        if line.strip():
            run = RunFigures(**json.loads(line))
            found[(run.rung, run.key, run.seed, run.test)] = run
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rungs", default=",".join(name for name in GRIDS if name in RUNGS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, one thread each")
    parser.add_argument("--test-seed", type=int, default=20261201, help="the ladder's hidden test set")
    parser.add_argument("--a-schedule", choices=["linear", "default"], default="linear")
    parser.add_argument(
        "--entries", default=None, help="only the grid entries whose names contain one of these"
    )
    parser.add_argument("--home", type=Path, default=None, help="RLLOOP_HOME for the built-in models")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=None, help="every run's figures and the report, as JSON")
    parser.add_argument(
        "--resume", type=Path, default=None, help="a JSONL of finished runs, appended and reused"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="end to end only: 3-step trials, 40 test problems"
    )
    args = parser.parse_args(argv)
    names = args.rungs.split(",")
    unknown = [n for n in names if n not in GRIDS or n not in RUNGS]
    if unknown:
        parser.error(f"no oracle grid or ladder rung for {unknown}: choose from {', '.join(GRIDS)}")
    grids = {name: GRIDS[name] for name in names}
    rungs = {name: RUNGS[name] for name in names}
    if args.smoke:
        names, args.seeds = ["arith"], 2
        grids = {"arith": SMOKE}
        rungs = {"arith": Rung("arith", "tiny-arith", "sft", trial_seconds=4, trials=2, eval_limit=40)}
    wanted = [w.strip() for w in args.entries.split(",")] if args.entries else None
    home = (args.home or Path(tempfile.mkdtemp(prefix="rlloop-oracle-home-"))).resolve()
    work = (args.work or Path(tempfile.mkdtemp(prefix="rlloop-oracle-"))).resolve()
    from agent.run.models import resolve_base_model

    models = {m: resolve_base_model(m, home) for m in sorted({r.base_model for r in rungs.values()})}
    done = load_resume(args.resume)
    write_lock = threading.Lock()
    report_lines: list[str] = []
    every: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        rung, grid = rungs[name], grids[name]
        entries = [default_route(rung, grid, args.a_schedule)] + [
            e for e in grid.routes if wanted is None or any(w in e.name for w in wanted)
        ]
        test = TestSet(rung.benchmark, args.test_seed, rung.eval_limit)
        data = train_file(work, rung.benchmark)
        plan = [
            (entry, seed) for seed in range(args.seeds) for entry in entries
        ]  # seed-major: entries interleaved
        runs: list[RunFigures] = []
        todo = []
        for entry, seed in plan:
            cached = done.get((name, entry.key(), seed, test.label))
            if cached is not None:
                cached.entry = entry.name
                runs.append(cached)
            else:
                todo.append((entry, seed))
        print(f"{name}: {len(todo)} runs to go, {len(runs)} reused", flush=True)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = {
                pool.submit(
                    run_route, work, name, rung, models[rung.base_model], entry, seed, data, test
                ): entry
                for entry, seed in todo
            }
            for future in as_completed(futures):
                figures = future.result()
                runs.append(figures)
                print(
                    f"  {name} / {figures.entry} / seed {figures.seed}: test {figures.score:.3f}, CPU "
                    f"{figures.cpu_s} s, training {figures.train_s} s, wall {figures.wall_s} s, steps {figures.steps}",
                    flush=True,
                )
                if args.resume is not None:
                    with write_lock, args.resume.open("a") as handle:
                        handle.write(json.dumps(figures.as_json()) + "\n")
        runs.sort(key=lambda r: (r.entry, r.seed))
        lines = report(name, rung, grid, args.a_schedule, runs)
        print("\n".join(lines), flush=True)
        report_lines += lines
        every[name] = [r.as_json() for r in runs]
    print("\n".join(["", *report_lines]))
    if args.out:
        args.out.write_text(
            json.dumps({"args": vars(args), "runs": every, "report": report_lines}, default=str)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
