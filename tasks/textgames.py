"""Multi-turn text games on `textarena`: seeded games, two prompt formats, and an expert for training data.

`frozenlake` and `sokoban` are textarena's FrozenLake and Sokoban environments, played the way the
experiential-learning papers play them: the model sees the board, replies with a move in brackets ("[down]"),
textarena applies it (its own rules, rewards and one-invalid-move allowance), and this repeats until the game is won,
lost, or `max_turns` replies have been made. A game scores 1.0 when won and 0.0 otherwise; the benchmark's score is
the success rate over seeded held-out games.

Splits: every game comes from a seed and no starting position appears in two splits. The train and valid splits come
from fixed public seeds and hold the *turns* of an optimal expert (a breadth-first solver) replayed through textarena:
the prompt the model would see at that turn and the expert's move. Their games never include a layout reserved for
test by the public rule `reserved_for_test` (where `test_modulus` is set). The test split holds games, which the
grader draws from its run's secret seed (grader/benchmarks/textgames.py); this module cannot load it.
A trainer can SFT on them as they are, and `score()` rewards any optimal move, so a trainer can also do RL on them,
all without textarena in the sandbox.

Prompt formats: "default" is a compact board (one character per cell) and a move cue. It is Markov (the board is the
whole state) and fits small context windows. "textarena" is textarena's own transcript (rules, every board and
message so far) as its LLMObservationWrapper writes it, for large models.

Sokoban rooms take textarena ~0.2 s each to generate, so splits are cached on disk (`RLLOOP_CACHE_DIR`, default
`~/.cache/rlloop`), keyed by the game's settings and the textarena version. Only train and valid are cached there.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import itertools
import json
import logging
import os
import random
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from tasks.atomic import atomic_write_text
from tasks.base import Sample, Split, public_split, reserved_for_test

log = logging.getLogger(__name__)

MOVES = ("up", "down", "left", "right")
_ALIASES = {"w": "up", "a": "left", "s": "down", "d": "right"}
# textarena's own action pattern: the first bracketed move in the reply counts.
_MOVE = re.compile(r"\[\s*(up|down|left|right|w|a|s|d)\s*\]", re.IGNORECASE)
_PUBLIC_SPLITS: tuple[Split, ...] = ("valid", "train")
_SPLIT_SEED_BASE = {"valid": 12_000_000, "train": 13_000_000}
_cache_lock = threading.Lock()
_memory_cache: dict[str, dict[str, list[Sample]]] = {}

Layout = dict[str, Any]  # JSON-able description of a game's starting position


def parse_move(reply: str) -> str | None:
    """The move textarena would read from `reply` ("[down]", "[s]"), or None."""
    match = _MOVE.search(reply)
    if match is None:
        return None
    raw = match.group(1).lower()
    return _ALIASES.get(raw, raw)


def cache_dir() -> Path:
    explicit = os.environ.get("RLLOOP_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlloop"


def textarena_version() -> str:
    try:
        return importlib.metadata.version("textarena")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(
            "the multi-turn game benchmarks need the textarena package: pip install 'textarena>=0.7.4,<0.8'"
        ) from None


@contextlib.contextmanager
def _global_random_untouched() -> Iterator[None]:
    """textarena seeds Python's global `random` on reset; keep that from leaking into the caller's randomness."""
    state = random.getstate()
    try:
        yield
    finally:
        random.setstate(state)


class TextArenaGame:
    """One game in play, on a textarena env restored to a sample's layout."""

    def __init__(self, benchmark: TextArenaGameBenchmark, layout: Layout) -> None:
        from textarena.wrappers import LLMObservationWrapper

        self.benchmark = benchmark
        self.env = benchmark.new_env(layout)
        self._transcript_view = LLMObservationWrapper(self.env)
        self._transcript: str = self._transcript_view.get_observation()[1]
        self.turns = 0
        self.done = False

    def prompt(self, prompt_format: str) -> str:
        if prompt_format == "textarena":
            return self._transcript.lstrip("\n") + "\n"
        return self.benchmark.compact_prompt(self.env)

    def step(self, reply: str) -> None:
        if self.done:
            raise RuntimeError("the game is over; start a new one")
        finished, _ = self.env.step(reply)
        self.turns += 1
        self.done = bool(finished) or self.turns >= self.benchmark.max_turns
        if not self.done:
            self._transcript = self._transcript_view.get_observation()[1]

    def success(self) -> bool:
        rewards = self.env.state.rewards or {}
        return bool(self.env.state.done) and float(rewards.get(0, 0.0)) >= 1.0


class TextArenaGameBenchmark(ABC):
    """The shared machinery of textarena games; subclasses say how to make, restore, draw and solve one."""

    name: str
    description: str
    header: str  # first line of the compact prompt
    generator_version: ClassVar[int] = 2  # bump when layouts or expert turns change: it keys the disk cache
    # 1 in `test_modulus` layouts (by hash) is kept out of train/valid for the grader's test draw; None: the room
    # space is so large that the grader excludes train/valid positions from its draw instead.
    test_modulus: ClassVar[int | None] = 3
    max_new_tokens = 8  # the "default" format's reply: one bracketed move on one line
    stop = ["\n"]
    prompt_formats = ["default", "textarena"]
    # the "textarena" format's reply: room to reason, then move (textarena reads the first bracketed move)
    transcript_max_new_tokens = 1024
    max_turns: int
    default_split_sizes: ClassVar[dict[str, int]]  # games per split: test, valid, train

    def __init__(self, max_turns: int, split_sizes: dict[str, int] | None = None) -> None:
        self.max_turns = max_turns
        self.split_sizes = dict(split_sizes or self.default_split_sizes)

    # --- what a game must provide -------------------------------------------------------------------------------
    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """The env settings that define the game (part of the cache key)."""

    @abstractmethod
    def generate(self, seed: int) -> Layout:
        """Let textarena generate the game for `seed` and describe its starting position."""

    @abstractmethod
    def new_env(self, layout: Layout) -> Any:
        """A textarena env in `layout`'s starting position, without generating anew."""

    @abstractmethod
    def board(self, env: Any) -> str:
        """The compact board: one character per cell, one line per row."""

    @abstractmethod
    def solve(self, layout: Layout) -> list[str] | None:
        """A shortest winning move sequence, or None if there is none."""

    def optimal_moves(self, env: Any, expert_move: str) -> list[str]:
        """Every move as good as the expert's in `env`'s position (default: the expert's alone)."""
        return [expert_move]

    # --- the Benchmark protocol -----------------------------------------------------------------------------------
    def turn_budget(self, prompt_format: str) -> tuple[int, list[str]]:
        if prompt_format == "textarena":
            return self.transcript_max_new_tokens, []
        return self.max_new_tokens, list(self.stop)

    def compact_prompt(self, env: Any) -> str:
        return f"{self.header}\n{self.board(env)}\nMove:"

    def load(self, split: Split) -> list[Sample]:
        public_split(self.name, split)
        return list(self._splits()[split])

    def score(self, completion: str, sample: Sample) -> float:
        """One reply scores 1.0 when its move is an optimal move in the sample's position.

        The optimal moves come from the sample's meta, else from the board in its prompt (where the game can
        read one), else from the expert's next move in `answer`: trainers see only id, prompt and answer.
        """
        move = parse_move(completion)
        if move is None:
            return 0.0
        if "optimal" in sample.meta:
            optimal = str(sample.meta["optimal"]).split(",")
        else:
            optimal = self.optimal_from_prompt(sample.prompt) or [m for m in [parse_move(sample.answer)] if m]
        return 1.0 if move in optimal else 0.0

    def optimal_from_prompt(self, prompt: str) -> list[str]:
        """Every optimal move for the compact board in `prompt`, where the game can tell cheaply (else [])."""
        return []

    @staticmethod
    def board_rows(prompt: str) -> list[str]:
        """The compact board's rows from a "default"-format prompt (between the header line and "Move:")."""
        lines = prompt.rstrip().splitlines()
        return lines[1:-1] if len(lines) >= 3 and lines[-1].startswith("Move:") else []

    def start_game(self, sample: Sample) -> TextArenaGame:
        if "layout" not in sample.meta:
            raise ValueError(f"{sample.id} is a training turn, not a game; play samples from the test split")
        return TextArenaGame(self, json.loads(str(sample.meta["layout"])))

    # --- splits ---------------------------------------------------------------------------------------------------
    def cache_key(self) -> str:
        identity = json.dumps(
            {
                "game": self.name,
                "settings": self.settings(),
                "sizes": self.split_sizes,
                "generator": self.generator_version,
                "textarena": textarena_version(),
            },
            sort_keys=True,
        )
        return f"{self.name}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"

    def _splits(self) -> dict[str, list[Sample]]:
        key = self.cache_key()
        with _cache_lock:
            if key not in _memory_cache:
                _memory_cache[key] = self._read_cache(key) or self._write_cache(key, self._generate_splits())
            return _memory_cache[key]

    def _read_cache(self, key: str) -> dict[str, list[Sample]] | None:
        path = cache_dir() / "games" / f"{key}.json"
        try:
            raw = json.loads(path.read_text())
            return {split: [Sample.model_validate(s) for s in raw[split]] for split in _PUBLIC_SPLITS}
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring an unreadable game cache %s (%s); regenerating", path, exc)
            return None

    def _write_cache(self, key: str, splits: dict[str, list[Sample]]) -> dict[str, list[Sample]]:
        folder = cache_dir() / "games"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            text = json.dumps({split: [s.model_dump() for s in samples] for split, samples in splits.items()})
            atomic_write_text(folder / f"{key}.json", text)
        except OSError as exc:
            log.warning(
                "could not cache %s games under %s (%s); they will be generated again", self.name, folder, exc
            )
        return splits

    def reserved(self, layout: Layout) -> bool:
        """Whether `layout` is set aside for test candidates by the public rule (never in train or valid)."""
        if self.test_modulus is None:
            return False
        return reserved_for_test(self.name, json.dumps(layout, sort_keys=True), self.test_modulus)

    def collect_games(
        self, split: str, seeds: Iterable[int], count: int, accept: Callable[[Layout], bool], seen: set[str]
    ) -> list[tuple[int, Layout, list[str]]]:
        """The first `count` distinct winnable games among `seeds` whose layout `accept`s (adds them to `seen`)."""
        games: list[tuple[int, Layout, list[str]]] = []
        for tried, seed in enumerate(seeds):
            if len(games) >= count:
                break
            if tried > 20 * count * (self.test_modulus or 1):
                raise RuntimeError(
                    f"{self.name}: found only {len(games)} distinct {split} games; lower its split size"
                )
            try:
                with _global_random_untouched():
                    layout = self.generate(seed)
            except RuntimeError as exc:  # textarena gave up on this seed's room
                log.debug("%s: seed %d skipped (%s)", self.name, seed, exc)
                continue
            fingerprint = json.dumps(layout, sort_keys=True)
            if fingerprint in seen or not accept(layout):
                continue
            plan = self.solve(layout)
            if not plan or len(plan) > self.max_turns:  # unwinnable within the turn limit: not a fair game
                continue
            seen.add(fingerprint)
            games.append((seed, layout, plan))
        return games

    def _generate_splits(self) -> dict[str, list[Sample]]:
        log.info("generating %s games with textarena (cached afterwards)", self.name)
        seen: set[str] = set()
        out: dict[str, list[Sample]] = {}
        for split in _PUBLIC_SPLITS:
            seeds = itertools.count(_SPLIT_SEED_BASE[split])
            games = self.collect_games(
                split, seeds, self.split_sizes[split], lambda layout: not self.reserved(layout), seen
            )
            out[split] = [
                turn for i, game in enumerate(games) for turn in self._expert_turns(split, i, *game)
            ]
        return out

    def game_sample(self, split: str, index: int, seed: int, layout: Layout, plan: list[str]) -> Sample:
        env = self.new_env(layout)
        return Sample(
            id=f"{self.name}-{split}-{index}",
            prompt=self.compact_prompt(env),
            answer=" ".join(f"[{m}]" for m in plan),
            meta={"seed": seed, "layout": json.dumps(layout, sort_keys=True), "optimal_turns": len(plan)},
        )

    def valid_games(self) -> list[Sample]:
        """The valid split's games, each from its first board (its turn-0 sample's seed) with the expert's plan:
        what free validation plays, so that a search is steered by the test's own measure (games won). Single-turn
        accuracy is not that measure: tiny-lake answers 78% of valid turns optimally and wins 9% of games."""
        plans: dict[str, list[Sample]] = {}
        for turn in self.load("valid"):
            plans.setdefault(turn.id.rsplit("-t", 1)[0], []).append(turn)
        games = []
        for index, turns in enumerate(plans.values()):
            first = turns[0]
            seed = int(first.meta["seed"])  # type: ignore[arg-type]
            with _global_random_untouched():
                layout = self.generate(seed)
            game = self.game_sample("valid", index, seed, layout, [parse_move(t.answer) or "" for t in turns])
            if first.meta.get("turn") != 0 or game.prompt != first.prompt:
                raise RuntimeError(
                    f"{self.name}: valid game {first.id} does not start where its seed {seed} starts "
                    f"(textarena {textarena_version()}); clear {cache_dir()} to rebuild the splits"
                )
            games.append(game)
        return games

    def _expert_turns(
        self, split: str, index: int, seed: int, layout: Layout, plan: list[str]
    ) -> list[Sample]:
        """Replay the expert through textarena; each turn becomes a sample (and proves the plan wins)."""
        env = self.new_env(layout)
        turns: list[Sample] = []
        for turn, move in enumerate(plan):
            turns.append(
                Sample(
                    id=f"{self.name}-{split}-{index}-t{turn}",
                    prompt=self.compact_prompt(env),
                    answer=f"[{move}]",
                    meta={"seed": seed, "turn": turn, "optimal": ",".join(self.optimal_moves(env, move))},
                )
            )
            finished, _ = env.step(f"[{move}]")
            if finished and turn < len(plan) - 1:
                break
        rewards = env.state.rewards or {}
        if not (env.state.done and float(rewards.get(0, 0.0)) >= 1.0):
            raise RuntimeError(f"{self.name}: the expert's plan for seed {seed} does not win in textarena")
        return turns
