"""Built-in benchmarks (gsm8k, countdown) and the registry (entry points, definition folders)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from grader.benchmarks import (
    Benchmark,
    describe_benchmarks,
    get_benchmark,
    list_benchmarks,
    registry_problems,
)
from grader.benchmarks.countdown import check_solution, evaluate_expression
from grader.benchmarks.gsm8k import GSM8KBenchmark, GSM8KDataError, find_data_dir
from grader.benchmarks.registry import TEST_HALVES
from grader.benchmarks.secret import run_test_seed
from grader.config import EvalConfig
from grader.evaluation import build_prompts
from tasks.plugins import UnknownPluginError
from tasks.registry import BENCHMARKS, BUILTINS


@pytest.fixture(autouse=True)
def _no_user_benchmarks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLLOOP_BENCHMARKS_DIR", raising=False)


def test_gsm8k_loads_from_the_shared_folder() -> None:
    if find_data_dir() is None:
        pytest.skip("the shared GSM8K copy (../shared/data/gsm8k) is not on this machine")
    bench = get_benchmark("gsm8k")
    test, train, valid = bench.load("test"), bench.load("train"), bench.load("valid")
    assert len(test) == 1319 and len(valid) == 500 and len(train) + len(valid) == 7473
    assert not {s.id for s in train} & {s.id for s in valid}
    assert [s.id for s in bench.load("valid")] == [s.id for s in valid]  # fixed seed
    first = test[0]
    assert (
        first.answer == "18"
        and first.prompt.startswith("Question: Janet")
        and first.prompt.endswith("Answer:")
    )
    assert "<<" not in str(first.meta["solution"]) and str(first.meta["solution"]).endswith(
        "The answer is 18."
    )
    assert bench.score(" She makes 9 * 2 = $18.\nThe answer is $18.", first) == 1.0
    assert (
        bench.score("#### 1,8", first) == 0.0 and bench.score("16 eggs... 9 * 2 = 18\n#### 17", first) == 0.0
    )

    zero = build_prompts(bench, test[:2], EvalConfig(prompt_format="cot"))
    assert zero[0] == first.prompt + " Let's think step by step."
    few = build_prompts(bench, test[:2], EvalConfig(prompt_format="cot", few_shot=2))
    train_questions = {str(s.meta["question"]) for s in train}
    shots = few[0].split("\n\n")[:2]
    assert all(shot.split("\n")[0].removeprefix("Question: ") in train_questions for shot in shots)
    assert few[0].endswith(zero[0]) and first.prompt not in few[0][: -len(zero[0])]


def test_gsm8k_bad_folder_is_reported(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text('{"question": "q"}\n')
    (tmp_path / "test.jsonl").write_text("not json\n")
    with pytest.raises(GSM8KDataError, match="train.jsonl:1 lacks"):
        GSM8KBenchmark(data_dir=tmp_path).load("train")
    with pytest.raises(GSM8KDataError, match="test.jsonl:1 is not valid JSON"):
        GSM8KBenchmark(data_dir=tmp_path).load("test")


def test_countdown_reference_solutions_score_and_parser_is_safe() -> None:
    bench = get_benchmark("countdown")
    test = bench.load("test")
    assert len(test) == 500 and all(bench.score(s.answer, s) == 1.0 for s in test)
    train_keys = {(s.meta["numbers"], s.meta["target"]) for s in bench.load("train")}
    assert not any((s.meta["numbers"], s.meta["target"]) in train_keys for s in test)
    nums = [3, 5, 4]
    assert check_solution("(3 + 5) * 4", nums, 32)
    assert check_solution("<answer>4 * (5 + 3)</answer>", nums, 32)
    assert check_solution(" 5 * 4 + 3 = 23\nblah", nums, 23)
    assert not check_solution("(3 + 3) * 4", nums, 24)  # 3 used twice
    assert not check_solution("8 * 4", nums, 32)  # 8 not given
    assert not check_solution("3 / (5 - 5)", [3, 5, 5], 1)  # division by zero
    assert not check_solution("2 ** 5", [2, 5], 32)
    assert not check_solution("__import__('os').system('echo hi')", nums, 0)
    assert not check_solution("-3 + 5 * 4", nums, 17)  # unary minus is not allowed
    assert not check_solution("(3 + 5) * 4\n(1)", nums, 31)
    assert evaluate_expression("7 / 2")[0] * 2 == 7


@pytest.mark.parametrize(
    "name", ["arith", "countdown", "arith-noisy", "arith-few", "arith-verbose", "arith-messy"]
)
def test_procedural_test_splits_come_from_the_seed_and_never_overlap_train(name: str) -> None:
    first, again, other = (get_benchmark(name, seed).load("test") for seed in (7, 7, 8))
    assert [s.model_dump() for s in first] == [s.model_dump() for s in again]  # one seed, one test set
    assert {s.prompt for s in first} != {s.prompt for s in other}  # another seed, another set
    public = get_benchmark(name)
    seen = {s.prompt for split in ("train", "valid") for s in public.load(split)}  # type: ignore[arg-type]
    for test in (first, other):
        assert not {s.prompt for s in test} & seen and len({s.prompt for s in test}) == len(test)
        assert all(public.score(s.answer, s) == 1.0 for s in test)


def test_arith_variants_are_graded_on_arith_s_clean_test_split() -> None:
    arith = get_benchmark("arith", 11).load("test")
    for name in ("arith-noisy", "arith-few", "arith-verbose", "arith-messy"):
        test = get_benchmark(name, 11).load("test")
        assert [(s.prompt, s.answer) for s in test] == [(s.prompt, s.answer) for s in arith], name
        assert test[0].id == f"{name}-test-0"


def test_the_run_test_seed_is_made_once_and_kept(tmp_path: Path) -> None:
    seed = run_test_seed(tmp_path)
    assert run_test_seed(tmp_path) == seed and (tmp_path / "test_seed").stat().st_mode & 0o077 == 0
    assert run_test_seed(tmp_path, explicit=42) == 42 and run_test_seed(tmp_path) == seed
    other_run = tmp_path / "other-run"
    other_run.mkdir()
    assert run_test_seed(other_run) != seed  # 63 random bits per run
    (tmp_path / "test_seed").write_text("garbage")
    with pytest.raises(ValueError, match="does not hold an integer test seed"):
        run_test_seed(tmp_path)


def test_registry_builtins_and_unknown() -> None:
    assert {"arith", "gsm8k", "countdown"} <= set(list_benchmarks())
    sources = {info.name: info.source for info in describe_benchmarks()}
    assert sources["arith"] == "builtin" and sources["countdown"] == "builtin"
    with pytest.raises(UnknownPluginError, match="unknown benchmark 'nope': choose one of .*arith"):
        get_benchmark("nope")


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_builtin_has_the_graders_test_half(name: str) -> None:
    """One registration per built-in (tasks.registry); the grader finds its class that draws test by itself."""
    bench = get_benchmark(name, test_seed=1)
    assert type(bench) in TEST_HALVES and isinstance(bench, BUILTINS[name]) and bench.test_seed == 1  # type: ignore[attr-defined]


def _definition(folder: Path, yaml_text: str, module: str | None) -> None:
    folder.mkdir(parents=True)
    (folder / "benchmark.yaml").write_text(yaml_text)
    if module is not None:
        (folder / "scoring.py").write_text(module)


def test_registry_folder_good_broken_and_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "defs"
    _definition(
        root / "parity",
        'name: parity\ndescription: Even or odd?\nmodule: scoring.py\nmax_new_tokens: 4\nstop: ["\\n"]\n',
        "def score(completion, sample):\n    return 1.0 if completion.strip() == sample.answer else 0.0\n",
    )
    for split in ("train", "valid", "test"):
        rows = [
            {"id": f"p-{split}-{i}", "prompt": f"{i} is ", "answer": ["even", "odd"][i % 2]} for i in range(4)
        ]
        (root / "parity" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    _definition(root / "broken", "name: broken\ndescription: x\n", "def score(:\n")
    _definition(root / "badyaml", "name: [unclosed\n", None)
    monkeypatch.setenv("RLLOOP_BENCHMARKS_DIR", str(root))

    infos = {info.name: info for info in describe_benchmarks()}
    assert infos["parity"].source == "path" and infos["parity"].description == "Even or odd?"
    assert "broken" not in infos and "arith" in infos
    problems = registry_problems()
    assert any(str(root / "broken") in p and "SyntaxError" in p for p in problems)
    assert any(str(root / "badyaml") in p for p in problems)
    parity = get_benchmark("parity")
    assert isinstance(parity, Benchmark) and parity.stop == ["\n"] and parity.max_new_tokens == 4
    test = parity.load("test")
    assert len(test) == 4 and parity.score(" odd", test[1]) == 1.0 and parity.score("even", test[1]) == 0.0

    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("RLLOOP_BENCHMARKS_DIR", str(empty))
    assert any("holds no benchmark definitions" in p and str(empty) in p for p in registry_problems())


def test_registry_entry_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = tmp_path / "rlloop_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlloop-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[rlloop.benchmarks]\nplugin_bench = rlloop_plugin_mod:PluginBench\nbad_plugin = missing_mod:Nope\n"
    )
    (tmp_path / "rlloop_plugin_mod.py").write_text(
        "from grader.benchmarks.arith import ArithBenchmark\n"
        "class PluginBench(ArithBenchmark):\n    name = 'plugin_bench'\n    description = 'arith, as a plugin'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    BENCHMARKS.reload()  # entry points are read once per process: read them again with this one installed
    try:
        infos = {info.name: info for info in describe_benchmarks()}
        assert infos["plugin_bench"].source == "entry point"
        assert infos["plugin_bench"].description == "arith, as a plugin"
        assert get_benchmark("plugin_bench").load("test")[0].id == "arith-test-0"
        assert any("bad_plugin" in p and "missing_mod" in p for p in registry_problems())
    finally:
        sys.modules.pop("rlloop_plugin_mod", None)
        monkeypatch.undo()
        BENCHMARKS.reload()
