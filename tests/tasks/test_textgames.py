"""The games' valid split as games: each valid game starts on its expert game's first board and its plan wins."""

from __future__ import annotations

import pytest

from tasks import get_benchmark


@pytest.mark.parametrize("name", ["frozenlake", "sokoban"])
def test_valid_games_start_on_the_expert_games_first_boards_and_their_plans_win(name: str) -> None:
    bench = get_benchmark(name)
    turns = bench.load("valid")
    games = bench.valid_games()
    firsts = [t for t in turns if t.meta.get("turn") == 0]
    assert [g.prompt for g in games] == [t.prompt for t in firsts]
    assert sum(int(g.meta["optimal_turns"]) for g in games) == len(turns)
    for game_sample in games[:20]:
        game = bench.start_game(game_sample)
        for move in game_sample.answer.split():
            game.step(move)
        assert game.success(), game_sample.id
