"""arith's variants: the same problems with data that are not what the default recipe needs, scored exactly by the
verifier (the result computed from the prompt), whatever the answer column holds."""

from __future__ import annotations

from tasks import Sample, get_benchmark
from tasks.arith import result_of
from tasks.arith_variants import (
    LABELLED_TRAIN,
    NOISE_MAX_OFFSET,
    NOISE_SHARE,
    VERBOSE_TEMPLATE,
    _rewritten,
)
from tasks.base import Verifier


def test_the_verifier_computes_the_result_from_the_prompt() -> None:
    arith = get_benchmark("arith")
    assert isinstance(arith, Verifier)
    assert result_of("37+58=") == "95" and result_of("72-19=") == "53" and result_of("What is 2+2?") is None
    assert arith.verify("95", "37+58=") == 1.0 and arith.verify("96", "37+58=") == 0.0
    assert arith.verify("4", "What is 2+2?") == 0.0  # not an arith prompt: never accepted


def test_noisy_answers_are_near_misses_on_a_fixed_share_and_never_change_a_score() -> None:
    clean, noisy = get_benchmark("arith"), get_benchmark("arith-noisy")
    for split in ("train", "valid"):
        rows, reference = noisy.load(split), clean.load(split)  # type: ignore[arg-type]
        assert [r.prompt for r in rows] == [r.prompt for r in reference]  # the same problems, in order
        wrong = [(r, c) for r, c in zip(rows, reference, strict=True) if r.answer != c.answer]
        assert abs(len(wrong) / len(rows) - NOISE_SHARE) < 0.05, (split, len(wrong))
        assert all(0 < abs(int(r.answer) - int(c.answer)) <= NOISE_MAX_OFFSET for r, c in wrong)
        assert all(int(r.answer) >= 0 for r, _ in wrong)
    first = [s.answer for s in noisy.load("train")]
    _rewritten.cache_clear()
    assert [
        s.answer for s in noisy.load("train")
    ] == first  # the same rows are wrong, the same way, every time
    row, right = next(
        (r, c) for r, c in zip(noisy.load("train"), clean.load("train"), strict=True) if r.answer != c.answer
    )
    assert (
        noisy.score(right.answer, row) == 1.0 and noisy.score(row.answer, row) == 0.0
    )  # the verifier decides


def test_few_keeps_the_first_answers_only_and_scores_unlabelled_prompts() -> None:
    few = get_benchmark("arith-few")
    train, valid = few.load("train"), few.load("valid")
    assert all(s.answer for s in train[:LABELLED_TRAIN]) and not any(s.answer for s in train[LABELLED_TRAIN:])
    assert not any(s.answer for s in valid) and len(train) == 12000
    blank = train[LABELLED_TRAIN]
    assert few.score(str(result_of(blank.prompt)), blank) == 1.0 and few.score("", blank) == 0.0


def test_verbose_answers_are_sentences_the_grader_would_not_parse() -> None:
    verbose, clean = get_benchmark("arith-verbose"), get_benchmark("arith")
    row, right = verbose.load("valid")[0], clean.load("valid")[0]
    assert row.answer == VERBOSE_TEMPLATE.format(answer=right.answer) and row.id == "arith-verbose-valid-0"
    assert verbose.score("The", row) == 0.0  # the grader cuts at the first space: what a verbose model writes
    assert verbose.score(right.answer, Sample(id="x", prompt=row.prompt, answer="")) == 1.0


def test_messy_answers_are_sentences_with_slips_and_the_verifier_still_decides() -> None:
    messy, clean = get_benchmark("arith-messy"), get_benchmark("arith")
    rows, reference = messy.load("train"), clean.load("train")
    assert all(r.answer.startswith("The answer is ") for r in rows)
    said = [r.answer.removeprefix("The answer is ").rstrip(".") for r in rows]
    wrong = sum(1 for s, c in zip(said, reference, strict=True) if s != c.answer)
    assert abs(wrong / len(rows) - NOISE_SHARE) < 0.05
    row, right = next((r, c) for r, c, s in zip(rows, reference, said, strict=True) if s != c.answer)
    assert messy.score(right.answer, row) == 1.0 and messy.score(row.answer, row) == 0.0
