"""Multi-turn text games (frozenlake, sokoban on textarena): splits, scoring, and the grader's play loop.

The play loop is driven by policies that implement the grader's `GenerationEngine` protocol: an expert that reads
the board in each prompt and solves it, a stubborn one, one that never answers in the game's format, and the
real tiny transformers model through `evaluate` and through the grading server over HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.benchmarks import MultiTurnBenchmark, describe_benchmarks, get_benchmark
from grader.benchmarks.base import Sample
from grader.benchmarks.frozenlake import FrozenLakeBenchmark
from grader.benchmarks.sokoban import SokobanBenchmark, rows_from_board, solve_room
from grader.benchmarks.textgames import TextArenaGameBenchmark, parse_move
from grader.config import EvalConfig
from grader.evaluation import evaluate, run_evaluation
from tests.grader.conftest import GraderProcess

SMALL = {"test": 12, "valid": 4, "train": 8}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLLOOP_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def frozenlake() -> FrozenLakeBenchmark:
    return FrozenLakeBenchmark(split_sizes={"test": 60, "valid": 20, "train": 40})


@pytest.fixture
def sokoban() -> SokobanBenchmark:
    return SokobanBenchmark(split_sizes=SMALL)


@pytest.fixture(params=["frozenlake", "sokoban"])
def game(
    request: pytest.FixtureRequest, frozenlake: FrozenLakeBenchmark, sokoban: SokobanBenchmark
) -> TextArenaGameBenchmark:
    return frozenlake if request.param == "frozenlake" else sokoban


class ExpertPolicy:
    """Reads the compact board in every prompt and answers an optimal move, as a perfect model would."""

    name = "expert"

    def __init__(self, benchmark: TextArenaGameBenchmark) -> None:
        self.benchmark = benchmark
        self.calls: list[int] = []

    def move(self, prompt: str) -> str:
        rows = TextArenaGameBenchmark.board_rows(prompt)
        if isinstance(self.benchmark, FrozenLakeBenchmark):
            return self.benchmark.optimal_from_prompt(prompt)[0]
        parsed = rows_from_board(rows)
        assert parsed, f"no board in\n{prompt}"
        plan = solve_room(*parsed)
        assert plan, f"the expert found no solution for\n{prompt}"
        return plan[0]

    def generate(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str], config: EvalConfig
    ) -> list[str]:
        self.calls.append(len(prompts))
        return [f"[{self.move(p)}]\nand some text after the stop string" for p in prompts]


class FixedReply:
    """Answers the same text every turn."""

    name = "fixed"

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.prompts: list[str] = []
        self.budgets: set[tuple[int, tuple[str, ...]]] = set()

    def generate(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str], config: EvalConfig
    ) -> list[str]:
        self.prompts += prompts
        self.budgets.add((max_new_tokens, tuple(stop)))
        return [self.reply] * len(prompts)


def test_games_are_builtin_multi_turn_benchmarks() -> None:
    names = {info.name: info.source for info in describe_benchmarks()}
    assert names["frozenlake"] == "builtin" and names["sokoban"] == "builtin"
    for name in ("frozenlake", "sokoban"):
        bench = get_benchmark(name)
        assert isinstance(bench, MultiTurnBenchmark) and bench.max_turns > 1
    assert not isinstance(get_benchmark("arith"), MultiTurnBenchmark)


def test_splits_are_seeded_disjoint_and_every_game_winnable(game: TextArenaGameBenchmark) -> None:
    test, valid, train = game.load("test"), game.load("valid"), game.load("train")
    assert len(test) == game.split_sizes["test"]
    # train/valid hold expert turns: one sample per move of an optimal plan, first turns start the games
    first_turns = [s for s in train + valid if s.meta["turn"] == 0]
    assert len(first_turns) == game.split_sizes["train"] + game.split_sizes["valid"]
    assert all(s.answer in {"[up]", "[down]", "[left]", "[right]"} for s in train + valid)
    # no starting position is shared between splits (the compact board is the whole state)
    assert not {s.prompt for s in test} & {s.prompt for s in first_turns}
    assert not {s.meta["seed"] for s in test} & {s.meta["seed"] for s in first_turns}
    # every held-out game is won by replaying the expert's plan through textarena, in exactly that many turns
    for sample in test:
        session = game.start_game(sample)
        assert session.prompt("default") == sample.prompt
        plan = sample.answer.split()
        for move in plan:
            assert not session.done
            session.step(move)
        assert (
            session.done and session.success() and session.turns == len(plan) == sample.meta["optimal_turns"]
        )
        assert len(plan) <= game.max_turns
    # a second instance reads the same games back from the disk cache, unchanged
    again = type(game)(split_sizes=game.split_sizes).load("test")
    assert [s.model_dump() for s in again] == [s.model_dump() for s in test]


def test_a_reply_scores_when_its_move_is_optimal(frozenlake: FrozenLakeBenchmark) -> None:
    turns = frozenlake.load("train")
    two_way = next(s for s in turns if "," in str(s.meta["optimal"]))
    for move in str(two_way.meta["optimal"]).split(","):
        assert frozenlake.score(f"I go [{move}]", two_way) == 1.0
    wrong = next(m for m in ("up", "down", "left", "right") if m not in str(two_way.meta["optimal"]))
    assert frozenlake.score(f"[{wrong}]", two_way) == 0.0
    assert frozenlake.score("down", two_way) == 0.0  # textarena needs the brackets
    assert parse_move("[ S ]") == "down" and parse_move("[w] then [d]") == "up"


def test_trainers_score_from_the_prompt_alone(game: TextArenaGameBenchmark) -> None:
    """Trainers see only id/prompt/answer: the board in the prompt gives the same optimal moves as the meta."""
    turns = game.load("train")
    assert any("," in str(s.meta["optimal"]) for s in turns)  # positions with more than one best move exist
    for sample in turns:
        bare = Sample(id=sample.id, prompt=sample.prompt, answer=sample.answer)
        optimal = sorted(str(sample.meta["optimal"]).split(","))
        assert sample.answer.strip("[]") in optimal
        assert sorted(game.optimal_from_prompt(bare.prompt)) == optimal
        assert game.score(sample.answer, bare) == 1.0
        for move in {"up", "down", "left", "right"} - set(optimal):
            assert game.score(f"[{move}]", bare) == 0.0


def test_an_expert_policy_wins_every_game_in_batched_turns(game: TextArenaGameBenchmark) -> None:
    test = game.load("test")
    expert = ExpertPolicy(game)
    result = run_evaluation(expert, test, game, EvalConfig(bootstrap_resamples=200))
    assert result.score == 1.0 and result.n == len(test) and result.ci_low == result.ci_high == 1.0
    assert result.turns == [s.meta["optimal_turns"] for s in test]
    assert max(result.turns) > 1  # the model really plays several turns
    # one generate call per turn over the games still running: the batch shrinks as games are won
    assert len(expert.calls) == max(result.turns) and expert.calls[0] == len(test)
    assert expert.calls == sorted(expert.calls, reverse=True)


def test_losing_policies_score_zero(frozenlake: FrozenLakeBenchmark) -> None:
    test = frozenlake.load("test")
    config = EvalConfig(bootstrap_resamples=200)
    # never in the game's format: textarena allows one invalid move, the second ends the game
    babble = run_evaluation(FixedReply("hello"), test, frozenlake, config)
    assert babble.score == 0.0 and set(babble.turns) == {2}
    # walking one way: into a wall or a hole, or out of turns; never to a goal in the opposite corner
    stubborn = run_evaluation(FixedReply("[up]"), test, frozenlake, config)
    assert stubborn.score == 0.0 and all(1 <= t <= frozenlake.max_turns for t in stubborn.turns)


def test_textarena_format_is_the_growing_transcript(frozenlake: FrozenLakeBenchmark) -> None:
    game = frozenlake.start_game(frozenlake.load("test")[0])
    first = game.prompt("textarena")
    assert "Welcome to Frozen Lake!" in first and first.count("Current Board") == 1
    game.step("[nonsense]")
    second = game.prompt("textarena")
    assert (
        second.startswith(first.rstrip("\n")) and "invalid move" in second and "[Player] [nonsense]" in second
    )
    assert frozenlake.turn_budget("textarena") == (1024, []) and frozenlake.turn_budget("default") == (
        8,
        ["\n"],
    )
    policy = FixedReply("I think about it.\nThen I go [down], not [up].")  # reasoning across lines is kept
    result = run_evaluation(
        policy, frozenlake.load("test")[:3], frozenlake, EvalConfig(prompt_format="textarena")
    )
    assert result.n == 3 and all("Welcome to Frozen Lake!" in p for p in policy.prompts)
    assert policy.budgets == {(1024, ())}
    assert any("[Player] I think about it.\nThen I go [down]" in p for p in policy.prompts)


def test_games_refuse_few_shot_and_unknown_formats(frozenlake: FrozenLakeBenchmark) -> None:
    test = frozenlake.load("test")[:2]
    with pytest.raises(ValueError, match="few-shot prompting is not supported"):
        run_evaluation(FixedReply("[up]"), test, frozenlake, EvalConfig(few_shot=1))
    with pytest.raises(ValueError, match="no prompt format 'cot'"):
        run_evaluation(FixedReply("[up]"), test, frozenlake, EvalConfig(prompt_format="cot"))
    with pytest.raises(ValueError, match="training turn, not a game"):
        frozenlake.start_game(frozenlake.load("train")[0])


def test_a_corrupt_cache_is_regenerated(tmp_path: Path) -> None:
    bench = FrozenLakeBenchmark(split_sizes={"test": 5, "valid": 2, "train": 2})
    cache = tmp_path / "cache" / "games" / f"{bench.cache_key()}.json"
    cache.parent.mkdir(parents=True)
    cache.write_text("{not json")
    samples = bench.load("train")
    cached = json.loads(cache.read_text())
    assert cached["train"][0]["id"] == samples[0].id
    # the disk cache (readable by whoever shares the home folder) never holds test games
    assert set(cached) == {"train", "valid"} and len(bench.load("test")) == 5


def test_test_games_follow_the_seed_and_avoid_public_positions(game: TextArenaGameBenchmark) -> None:
    first = game.load("test")
    other = type(game)(split_sizes=game.split_sizes, test_seed=99).load("test")  # type: ignore[call-arg]
    assert {s.prompt for s in first} != {s.prompt for s in other}
    public = {s.prompt for s in game.load("train") + game.load("valid") if s.meta["turn"] == 0}
    assert not {s.prompt for s in other} & public and len(other) == game.split_sizes["test"]


@pytest.mark.slow
def test_the_tiny_model_plays_through_evaluate(tiny_base: Path) -> None:
    bench = FrozenLakeBenchmark(split_sizes={"test": 30, "valid": 5, "train": 5})
    result = evaluate(tiny_base, bench.load("test"), bench, EvalConfig(batch_size=32))
    assert result.engine == "hf" and result.n == 30 and len(result.turns) == 30
    assert 0.0 <= result.ci_low <= result.score <= result.ci_high <= 1.0
    assert all(1 <= t <= bench.max_turns for t in result.turns)


@pytest.fixture
def game_grader(tmp_path: Path, tiny_base: Path) -> Iterator[GraderProcess]:
    grader = GraderProcess(tmp_path / "g", tiny_base, benchmark="frozenlake", public_fraction=0.5)
    yield grader
    grader.stop()


@pytest.mark.slow
def test_grading_server_scores_games(game_grader: GraderProcess) -> None:
    from tests.grader.tiny import make_tiny_model

    game_grader.start()
    health = game_grader.get("/health")
    assert health["ready"] is True and health["n"] == 20 and 0.0 <= health["baseline_score"] <= 1.0
    hidden = (game_grader.private_dir / "test.jsonl").read_text()
    # the held-out games (and the expert plans) live in the grader's own folder
    assert '"id": "frozenlake-test-0"' in hidden
    response = game_grader.submit(make_tiny_model(game_grader.workspace / "trial-1", seed=5))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["n"] == 20 and body["ci_low"] <= body["score"] <= body["ci_high"]
