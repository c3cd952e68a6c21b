"""The games' valid split as games: each valid game starts on its expert game's first board and its plan wins."""

from __future__ import annotations

import pytest

from tasks import get_benchmark


@pytest.mark.parametrize("name", ["frozenlake", "sokoban", "sokoban1"])
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


def test_sokoban1_is_sokoban_with_one_box_and_its_own_games() -> None:
    one, three = get_benchmark("sokoban1"), get_benchmark("sokoban")
    assert one.settings()["num_boxes"] == 1 and three.settings()["num_boxes"] == 3
    assert one.cache_key() != three.cache_key()
    for game in one.valid_games()[:20]:
        board = "\n".join(one.board_rows(game.prompt))
        assert board.count("X") + board.count("*") == 1, game.prompt
        assert 1 <= int(game.meta["optimal_turns"]) <= one.max_turns
