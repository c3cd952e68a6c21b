"""The games' hidden test split: games drawn from seeds that only the run's secret seed picks.

A test game's layout is one `tasks.textgames` reserves for test (where the game has a `test_modulus`) and its
starting position is never one of train's or valid's, so the split is disjoint from both by construction. The games
are kept in memory per (game, seed), never in the shared disk cache a sandbox might read.
"""

from __future__ import annotations

import itertools
import random
import threading

from grader.benchmarks.base import HiddenTestHalf
from tasks.base import Sample
from tasks.textgames import MOVES, Layout, TextArenaGame, TextArenaGameBenchmark, parse_move

__all__ = [
    "MOVES",
    "HeldTestGames",
    "Layout",
    "TextArenaGame",
    "TextArenaGameBenchmark",
    "draw_test_games",
    "parse_move",
]

# Far from the public seeds (12-13 million), inside every generator's accepted seed range.
_SEED_RANGE = (100_000_000, 2**32 - 100_000_000)
_lock = threading.Lock()
_drawn: dict[tuple[str, int], list[Sample]] = {}


def draw_test_games(bench: TextArenaGameBenchmark, seed: int) -> list[Sample]:
    """`bench.split_sizes["test"]` winnable games, from seeds that start where `seed` says."""
    key = (bench.cache_key(), seed)
    with _lock:
        if key not in _drawn:
            public_starts = {
                s.prompt
                for split in ("valid", "train")
                for s in bench.load(split)
                if s.meta.get("turn") == 0  # type: ignore[arg-type]
            }

            def accept(layout: Layout) -> bool:
                if bench.test_modulus is not None and not bench.reserved(layout):
                    return False
                return bench.compact_prompt(bench.new_env(layout)) not in public_starts

            first = random.Random(seed).randrange(*_SEED_RANGE)
            games = bench.collect_games(
                "test", itertools.count(first), bench.split_sizes["test"], accept, set()
            )
            _drawn[key] = [bench.game_sample("test", i, *game) for i, game in enumerate(games)]
        return list(_drawn[key])


class HeldTestGames(HiddenTestHalf):
    """Mixed in before a public game benchmark: the grader's copy, whose test split is the games of `test_seed`."""

    def test_samples(self) -> list[Sample]:
        return draw_test_games(self, self.test_seed)  # type: ignore[arg-type]
