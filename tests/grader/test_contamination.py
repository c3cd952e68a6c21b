"""Cheating is detected at each submission: test items in the trial's files, weights that copy the base model or an
earlier submission. The scanner is unit-tested on small strings; the service and the HTTP server run for real."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch

from grader.benchmarks import Sample, get_benchmark
from grader.benchmarks.registry import write_jsonl
from grader.config import EvalConfig, GraderConfig, IntegrityConfig
from grader.contamination import (
    ScanResult,
    TestItemIndex,
    contamination_flag,
    relative_distance_to_files,
    scan_folder,
    scan_text,
    sketch_distance,
    sketch_sizes,
    trial_folder,
    weights_sketch,
)
from grader.service import GraderService
from tests.grader.conftest import GraderProcess
from tests.grader.tiny import make_tiny_model

ARITH = [
    Sample(id="a0", prompt="37+58=", answer="95"),
    Sample(id="a1", prompt="84-66=", answer="18"),
    Sample(id="a2", prompt="12+12=", answer="24"),
]
LONG = [
    Sample(
        id=f"w{i}",
        prompt=f"Using the numbers [{i}, {i + 7}, {i + 13}], write an expression that equals {100 + i}. "
        "Use + - * / and parentheses, each number at most once.\nExpression:",
        answer=f"({i} + {i + 7}) * {i + 13}",
    )
    for i in range(4)
]


def _found(index: TestItemIndex, text: str) -> set[int]:
    result = ScanResult()
    scan_text(index, text, "f.txt", result)
    return set(result.found)


# --- the scanner on small strings -----------------------------------------------------------------------------
def test_short_items_are_found_as_whole_prompt_plus_answer() -> None:
    index = TestItemIndex.build(ARITH)
    assert _found(index, "lots of data\n37+58=95\n") == {0}
    assert _found(index, "q: 37+58= 95 and 84-66=\n18") == {0, 1}  # answer after whitespace or a newline
    assert _found(index, '{"prompt": "12+12=", "answer": "24"}\n') == {2}  # JSON lines read as their strings
    chat = {"messages": [{"role": "user", "content": "37+58="}, {"role": "assistant", "content": "95"}]}
    assert _found(index, json.dumps(chat)) == {0}


def test_short_items_need_whole_tokens_and_their_answer() -> None:
    index = TestItemIndex.build(ARITH)
    assert _found(index, "137+58=951 and 84-66=180") == set()  # inside longer numbers is not the item
    assert _found(index, "37+58=96 84-66=\n12+12=") == set()  # prompts without their answers
    assert _found(index, '{"id": "t", "prompt": "37+58=", "answer": "94"}') == set()


def test_long_items_by_13_grams_ignoring_a_shared_template() -> None:
    index = TestItemIndex.build(LONG)
    assert not index.short_by_prefix and index.ngram_owner
    template = "Use + - * / and parentheses, each number at most once.\nExpression:"
    assert _found(index, template * 50) == set()  # the prompt template all items share tells nothing
    copied = f"{LONG[2].prompt} {LONG[2].answer}"
    assert _found(index, f"header\n{copied}\nfooter") == {2}
    assert _found(index, json.dumps({"text": copied.upper()})) == {2}  # case and JSON escapes do not hide it
    assert _found(index, LONG[1].prompt[:60]) == set()  # a short fragment is not the item


def test_threshold_evidence_and_trial_folder(tmp_path: Path) -> None:
    config = IntegrityConfig(min_items=2, min_fraction=0.5)
    index = TestItemIndex.build(ARITH)
    assert index.threshold(config) == 2
    trial = tmp_path / "trials" / "t02"
    (trial / "output").mkdir(parents=True)
    (trial / "output" / "model.safetensors").write_text("37+58=95 84-66=18 12+12=24")  # weights are skipped
    (trial / "data.txt").write_text("37+58=95\n")
    (trial / "train.py").write_text("# 84-66=18\n")
    folder, label_root = trial_folder(trial / "output", [tmp_path / "trials"])
    assert folder == trial and label_root == tmp_path
    result = scan_folder(index, folder, label_root, config)
    assert set(result.found) == {0, 1} and result.files_read == 2
    flag = contamination_flag(index, result, "trials/t02", config)
    assert flag is not None and flag.check == "contamination" and flag.found == 2 and flag.total == 3
    assert "2 of 3 hidden test items found in trials/t02" in flag.evidence
    assert "trials/t02/data.txt: 1" in flag.evidence and "'37+58=95'" in flag.evidence
    (trial / "train.py").unlink()
    assert contamination_flag(index, scan_folder(index, folder, label_root, config), "t", config) is None


def test_reading_is_bounded(tmp_path: Path) -> None:
    index = TestItemIndex.build(ARITH)
    (tmp_path / "big.txt").write_text("x " * 600 + "37+58=95")
    config = IntegrityConfig(max_file_bytes=1024)
    result = scan_folder(index, tmp_path, tmp_path, config)
    assert result.bytes_read == 1024 and not result.found  # the item lies past the first 1024 bytes


def test_the_real_arith_train_and_valid_files_do_not_flag(tmp_path: Path) -> None:
    bench = get_benchmark("arith")
    index = TestItemIndex.build(bench.load("test"))
    trial = tmp_path / "t01"
    trial.mkdir()
    write_jsonl(trial / "train.jsonl", bench.load("train"))
    write_jsonl(trial / "valid.jsonl", bench.load("valid"))
    result = scan_folder(index, trial, tmp_path, IntegrityConfig())
    assert len(result.found) < index.threshold(IntegrityConfig())
    assert contamination_flag(index, result, "t01", IntegrityConfig()) is None
    write_jsonl(trial / "stolen.jsonl", bench.load("test")[:100])
    flag = contamination_flag(
        index, scan_folder(index, trial, tmp_path, IntegrityConfig()), "t01", IntegrityConfig()
    )
    assert flag is not None and flag.found is not None and flag.found >= 100


# --- weights ----------------------------------------------------------------------------------------------------
def _state(path: Path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    return dict(AutoModelForCausalLM.from_pretrained(str(path)).state_dict())


def _noised(src: Path, dst: Path, scale: float, seed: int = 0) -> Path:
    """A copy of `src` with Gaussian noise of `scale` times each tensor's RMS added: defeats an exact hash."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    weights = load_file(str(dst / "model.safetensors"))
    generator = torch.Generator().manual_seed(seed)
    noised = {}
    for key, value in weights.items():
        rms = float(value.float().pow(2).mean().sqrt()) or 1.0
        noised[key] = value + scale * rms * torch.randn(value.shape, generator=generator, dtype=value.dtype)
    save_file(noised, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def _sft(base: Path, out: Path, steps: int = 50) -> Path:
    """A genuine 50-step SFT of `base` on arith train items (AdamW, lr 1e-3), saved like a trial's output."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model = AutoModelForCausalLM.from_pretrained(str(base))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train = get_benchmark("arith").load("train")
    for step in range(steps):
        texts = [f"{s.prompt}{s.answer}" for s in train[step * 16 : (step + 1) * 16]]
        batch = tokenizer(texts, return_tensors="pt", padding=True)
        labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def test_distance_catches_base_plus_noise_but_not_training(tmp_path: Path, tiny_base: Path) -> None:
    files = [tiny_base / "model.safetensors"]
    eps = IntegrityConfig().copy_epsilon
    assert relative_distance_to_files(_state(tiny_base), files) == 0.0
    noisy = _noised(tiny_base, tmp_path / "noisy", 1e-5)
    distance = relative_distance_to_files(_state(noisy), files)
    assert distance is not None and 0.0 < distance < eps
    trained = _sft(tiny_base, tmp_path / "trained")
    distance = relative_distance_to_files(_state(trained), files)
    assert distance is not None and distance > 10 * eps
    other = make_tiny_model(tmp_path / "other", seed=5)
    assert (relative_distance_to_files(_state(other), files) or 0.0) > 0.1  # norm weights (all 1) are shared


def test_sketches_see_near_duplicates(tmp_path: Path, tiny_base: Path) -> None:
    layout, base = weights_sketch(_state(tiny_base))
    noisy_layout, noisy = weights_sketch(_state(_noised(tiny_base, tmp_path / "n", 1e-5)))
    assert layout == noisy_layout
    close = sketch_distance(noisy, base)
    assert close is not None and close < IntegrityConfig().near_duplicate_epsilon
    _, other = weights_sketch(_state(make_tiny_model(tmp_path / "o", seed=9)))
    assert (sketch_distance(other, base) or 0.0) > 0.1
    assert sketch_distance(b"", base) is None


def test_a_fine_tune_that_leaves_most_weights_alone_is_not_a_copy_and_a_cast_copy_is(
    tmp_path: Path, tiny_base: Path
) -> None:
    """A pretrained model's fine-tune moves a few tensors and leaves the rest (SmolLM2-135M after 27 SFT steps at
    5e-5: 0.00099 over all weights, 0.0059 in its most-moved tensor), where noise and casts move every tensor alike:
    the copy checks go by the most-moved tensor."""
    from safetensors.torch import load_file, save_file

    files = [tiny_base / "model.safetensors"]
    eps = IntegrityConfig().copy_epsilon
    weights = load_file(str(files[0]))
    shutil.copytree(tiny_base, tmp_path / "tuned")
    tuned = dict(weights)
    floats = [k for k in tuned if tuned[k].is_floating_point()]
    name = min(floats, key=lambda k: float(tuned[k].double().norm()))  # the tensor with the least weight
    tuned[name] = tuned[name] * (1 + 2 * eps)  # moved twice the threshold; every other tensor untouched
    save_file(tuned, str(tmp_path / "tuned" / "model.safetensors"))
    total = math.sqrt(sum(float((tuned[k] - weights[k]).double().norm()) ** 2 for k in weights))
    assert (
        total / math.sqrt(sum(float(w.double().norm()) ** 2 for w in weights.values())) < eps
    )  # one norm: a "copy"
    assert (relative_distance_to_files(_state(tmp_path / "tuned"), files) or 0.0) > eps
    shutil.copytree(tiny_base, tmp_path / "cast")
    cast = {k: v.half().float() if v.is_floating_point() else v for k, v in weights.items()}
    save_file(cast, str(tmp_path / "cast" / "model.safetensors"))
    distance = relative_distance_to_files(_state(tmp_path / "cast"), files)
    assert distance is not None and distance < eps
    state, tuned_state = _state(tiny_base), _state(tmp_path / "tuned")
    _, base_sketch = weights_sketch(state)
    _, tuned_sketch = weights_sketch(tuned_state)
    assert (sketch_distance(tuned_sketch, base_sketch, sketch_sizes(tuned_state)) or 0.0) > eps


# --- the service, in process: its own test items, best skips flagged ------------------------------------------
@pytest.mark.slow
def test_service_scans_with_its_hidden_test_items_and_best_skips_flagged(
    tmp_path: Path, tiny_base: Path
) -> None:
    torch.set_num_threads(1)
    config = GraderConfig(
        run_id="svc",
        benchmark="arith",
        base_model=tiny_base,
        private_dir=tmp_path / "private",
        token="t" * 16,
        allowed_roots=[tmp_path / "ws"],
        eval=EvalConfig(limit=10),
        torch_threads=1,
    )
    service = GraderService(config)
    service.start()
    try:
        assert service.ready, service.startup_error
        index = service.test_index
        assert index is not None and index.total == len(service.samples) == 10
        trial = tmp_path / "ws" / "t01"
        trial.mkdir(parents=True)
        write_jsonl(trial / "train.jsonl", get_benchmark("arith").load("train"))  # the real train file
        clean = scan_folder(index, trial, tmp_path, config.integrity)
        assert contamination_flag(index, clean, "t01", config.integrity) is None
        shutil.copy(service.private_dir / "test.jsonl", trial / "notes.jsonl")
        leaked = contamination_flag(
            index, scan_folder(index, trial, tmp_path, config.integrity), "t", config.integrity
        )
        assert leaked is not None and leaked.found == 10

        flag = json.dumps([{"check": "contamination", "evidence": "10 of 10"}])
        with service.store.transaction() as db:
            honest = service.store.insert(
                db, model_path="/a", content_hash="a", status="done", public_score=0.4
            )
            service.store.insert(
                db, model_path="/b", content_hash="b", status="done", public_score=0.9, flags=flag
            )
        best = service.best()
        assert best is not None and best.id == honest.id  # the flagged 0.9 is never best
        views = {v["submission_id"]: v for v in service.scores()["submissions"]}
        assert [v["flagged"] for v in views.values()] == [False, True]
    finally:
        service.stop()


# --- over HTTP --------------------------------------------------------------------------------------------------
def _by_id(scores: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {s["submission_id"]: s for s in scores["submissions"]}


@pytest.mark.slow
def test_submissions_are_flagged_over_http(grader_factory: Any, tiny_base: Path) -> None:
    grader: GraderProcess = grader_factory("integrity", public_fraction=0.5)
    grader.start()
    ws = grader.workspace
    trained = _sft(tiny_base, ws / "t01" / "output")
    first = grader.submit(trained)
    assert first.status_code == 200, first.text
    honest = first.json()
    assert honest["flagged"] is False and honest["flags"] == [] and honest["is_copy"] is False

    # t02: another real model, but the trial's folder holds the hidden test items the grader evaluates
    cheat_out = make_tiny_model(ws / "t02" / "output", seed=21)
    items = [json.loads(line) for line in (grader.private_dir / "test.jsonl").read_text().splitlines()]
    (ws / "t02" / "data.txt").write_text("".join(f"{i['prompt']}{i['answer']}\n" for i in items))
    cheat = grader.submit(cheat_out).json()
    assert cheat["flagged"] is True
    (flag,) = cheat["flags"]
    assert flag["check"] == "contamination" and flag["found"] == 40 and flag["total"] == 40
    assert "40 of 40 hidden test items found in workspace/t02/data.txt" in flag["evidence"]
    assert cheat["best"]["submission_id"] == honest["submission_id"]  # whatever its score, never best

    # t03: the base model plus noise small enough to evade an exact hash
    noisy = _noised(tiny_base, ws / "t03" / "output", 1e-5)
    copy = grader.submit(noisy).json()
    assert copy["flagged"] is True and copy["is_copy"] is True
    assert [f["check"] for f in copy["flags"]] == ["base_copy"]
    assert "relative L2 distance" in copy["flags"][0]["evidence"] and copy["flags"][0]["value"] < 1e-3

    # t04: t01's checkpoint plus noise: a near-duplicate resubmission
    again = grader.submit(_noised(trained, ws / "t04" / "output", 1e-5, seed=3)).json()
    checks = {f["check"]: f for f in again["flags"]}
    assert (
        set(checks) == {"near_duplicate"}
        and checks["near_duplicate"]["of_submission"] == honest["submission_id"]
    )

    scores = grader.get("/scores")
    views = _by_id(scores)
    assert views[honest["submission_id"]]["flagged"] is False
    assert views[cheat["submission_id"]]["flags"][0]["check"] == "contamination"
    assert views[copy["submission_id"]]["flags"][0]["check"] == "base_copy"
    assert scores["best"]["submission_id"] == honest["submission_id"]
    assert grader.get("/best")["submission_id"] == honest["submission_id"]
    assert math.isclose(views[honest["submission_id"]]["score"], honest["score"])
    final = httpx.post(f"{grader.url}/finalize", headers=grader.auth, timeout=60).json()
    flagged = {f["submission_id"] for f in final["flagged_submissions"]}
    assert flagged == {cheat["submission_id"], copy["submission_id"], again["submission_id"]}
    assert final["best_submission_id"] == honest["submission_id"]
