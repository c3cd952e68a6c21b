"""`tasks` is what a trial may see: it imports neither the grader nor the agent, and it never yields a test split."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tasks
from tasks import HeldOutSplitError, get_benchmark
from tasks.registry import BUILTINS

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("grader", "agent")


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in {"import_module", "__import__"}
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


@pytest.mark.parametrize("package", ["tasks", "trainers"])
def test_trial_packages_never_import_the_grader_or_the_agent(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no Python files under {ROOT / package}"
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in files
        for line, module in _imported_modules(path)
        if module.split(".")[0] in FORBIDDEN
    ]
    assert offenders == []


def test_the_walker_sees_every_import_form(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text(
        "import grader.benchmarks\nfrom agent import cli\ndef f():\n    from grader.answers import x\n"
        "import importlib\nimportlib.import_module('grader.service')\nfrom . import sibling\n"
    )
    found = sorted(m for _, m in _imported_modules(sample))  # ast.walk is breadth-first: compare as sets
    assert found == ["agent", "grader.answers", "grader.benchmarks", "grader.service", "importlib"]


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_builtin_refuses_its_test_split(name: str) -> None:
    bench = get_benchmark(name)
    with pytest.raises(HeldOutSplitError, match=f"the test split of {name} is held by the grader only"):
        bench.load("test")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        bench.load("dev")  # type: ignore[arg-type]
    assert isinstance(bench, tasks.Benchmark)


def test_public_splits_load_and_score(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    arith = get_benchmark("arith")
    train = arith.load("train")
    assert len(train) == 12000 and arith.score(train[0].answer, train[0]) == 1.0
    # a folder definition with a test.jsonl beside it: tasks still refuses to read it
    folder = tmp_path / "defs" / "echo"
    folder.mkdir(parents=True)
    (folder / "benchmark.yaml").write_text("name: echo\ndescription: Say it back.\n")
    (folder / "scoring.py").write_text("def score(completion, sample):\n    return 1.0\n")
    for split in ("train", "test"):
        (folder / f"{split}.jsonl").write_text('{"id": "e-0", "prompt": "hi", "answer": "hi"}\n')
    monkeypatch.setenv("RLLOOP_BENCHMARKS_DIR", str(tmp_path / "defs"))
    echo = get_benchmark("echo")
    assert [s.id for s in echo.load("train")] == ["e-0"]
    with pytest.raises(HeldOutSplitError, match="test split of echo"):
        echo.load("test")
