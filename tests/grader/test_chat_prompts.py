"""Chat prompts in the grader: rendered with the BASE model's template, pinned into the eval identity (template hash,
stop tokens), generation stopped at the end-of-turn token, and a submission that ships its own template flagged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grader.benchmarks import get_benchmark
from grader.config import EvalConfig, GraderConfig, IntegrityConfig, pin_chat
from grader.engines import HFEngine
from grader.evaluation import build_prompts, run_evaluation
from grader.service import GraderService
from tasks.chat import ChatPrompts, ChatTemplateError


def test_plain_identity_is_unchanged_and_chat_fields_change_it(tiny_chat_dir: Path) -> None:
    plain = EvalConfig()
    assert (
        plain.identity() == "65cd7a88826b452a"
    )  # the identity plain configs had before chat prompts existed
    tok = AutoTokenizer.from_pretrained(tiny_chat_dir)
    chat = pin_chat(EvalConfig(prompt_style="chat"), tok)
    assert chat.stop_tokens == ("<|im_end|>",)
    assert chat.chat_template_sha256 == ChatPrompts.of(tok).sha256
    identities = {
        plain.identity(),
        chat.identity(),
        chat.model_copy(update={"chat_template_sha256": "0" * 64}).identity(),
        chat.model_copy(update={"stop_tokens": ("<|endoftext|>",)}).identity(),
        pin_chat(EvalConfig(prompt_style="chat", system_prompt="Be brief."), tok).identity(),
    }
    assert len(identities) == 5
    with pytest.raises(ValueError, match="chat_template_sha256 does not match"):
        pin_chat(EvalConfig(prompt_style="chat", chat_template_sha256="0" * 64), tok)
    with pytest.raises(ValueError, match="need prompt_style='chat'"):
        EvalConfig(system_prompt="x")


def test_chat_prompts_wrap_the_benchmarks_prompt_in_the_base_template(tiny_chat_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_chat_dir)
    bench = get_benchmark("gsm8k")
    samples = bench.load("valid")[:2]  # type: ignore[arg-type]
    plain = build_prompts(bench, samples, EvalConfig())
    chat = build_prompts(bench, samples, EvalConfig(prompt_style="chat", system_prompt="Think."), tok)
    for p, c in zip(plain, chat, strict=True):
        assert (
            c
            == f"<|im_start|>system\nThink.<|im_end|>\n<|im_start|>user\n{p}<|im_end|>\n<|im_start|>assistant\n"
        )
    with pytest.raises(ValueError, match="base model's tokenizer"):
        build_prompts(bench, samples, EvalConfig(prompt_style="chat"))
    other = AutoTokenizer.from_pretrained(tiny_chat_dir)
    other.chat_template = "{{ messages[0]['content'] }}"
    pinned = pin_chat(EvalConfig(prompt_style="chat"), tok)
    with pytest.raises(ValueError, match="not the one this eval config pins"):
        build_prompts(bench, samples, pinned, other)


def test_a_tokenizer_without_a_template_is_refused_in_one_line(tiny_model_dir: Path) -> None:
    with pytest.raises(ChatTemplateError, match="no chat template; use --prompt-format plain"):
        ChatPrompts.of(AutoTokenizer.from_pretrained(tiny_model_dir))


def test_generation_stops_at_the_end_of_turn_token_even_when_eos_is_another(tiny_chat_dir: Path) -> None:
    """A base (non-instruct) Qwen has eos <|endoftext|> while its template ends turns with <|im_end|>."""
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tiny_chat_dir)
    tok.eos_token = "<|endoftext|>"
    model = AutoModelForCausalLM.from_pretrained(tiny_chat_dir)
    config = pin_chat(EvalConfig(prompt_style="chat", limit=8), tok)
    assert config.stop_tokens == ("<|im_end|>", "<|endoftext|>")
    bench = get_benchmark("arith")
    samples = bench.load("valid")[:8]  # type: ignore[arg-type]
    prompts = build_prompts(bench, samples, config, tok)
    engine = HFEngine(model, tok)
    stopped = engine.generate(prompts, max_new_tokens=24, stop=[], config=config)
    unstopped = engine.generate(
        prompts, max_new_tokens=24, stop=[], config=config.model_copy(update={"stop_tokens": ()})
    )
    # without the end-of-turn stop the model runs on past its reply (a new turn); with it, it ends there
    assert any("user" in text or "assistant" in text for text in unstopped), unstopped
    assert all("user" not in t and "assistant" not in t for t in stopped), stopped
    assert sum(map(len, stopped)) < sum(map(len, unstopped))
    result = run_evaluation(engine, samples, bench, EvalConfig(prompt_style="chat", limit=8), tok)
    assert result.config_hash == config.identity()  # the result names the pinned template and stop tokens


def _service(tmp_path: Path, base: Path) -> GraderService:
    config = GraderConfig(
        run_id="chat",
        benchmark="arith",
        base_model=base,
        private_dir=tmp_path / "private",
        token="t" * 16,
        allowed_roots=[tmp_path / "ws"],
        eval=EvalConfig(prompt_style="chat", limit=12),
        # the two submissions below share their weights on purpose; only the template check may flag them
        integrity=IntegrityConfig(near_duplicate_epsilon=0.0),
        torch_threads=1,
    )
    service = GraderService(config)
    service.start()
    assert service.ready, service.startup_error
    return service


def _submit(service: GraderService, folder: Path) -> dict[str, object]:
    sub, future = service.accept(service.validate(str(folder)))
    assert future is not None
    return service.submit_response(future.result(timeout=300)).model_dump()


def test_a_submission_with_its_own_chat_template_is_flagged_and_scored_with_the_base_template(
    tmp_path: Path, tiny_chat_dir: Path
) -> None:
    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(tiny_chat_dir)
    with torch.no_grad():
        model.model.norm.weight.mul_(1.01)  # a fine-tune, not a copy of the base
    honest, swapped = tmp_path / "ws" / "honest", tmp_path / "ws" / "swapped"
    model.save_pretrained(honest)
    AutoTokenizer.from_pretrained(tiny_chat_dir).save_pretrained(honest)  # ships the base template: fine
    shutil.copytree(honest, swapped)  # same weights, its own template: a submission of its own, flagged
    # the template swap a PostTrainBench agent tried: the answer's format baked into the prompt
    (swapped / "chat_template.jinja").write_text(
        "{%- for m in messages %}{{ m['content'] }}{%- endfor %}{%- if add_generation_prompt %} {%- endif %}"
    )
    service = _service(tmp_path, tiny_chat_dir)
    try:
        assert service.config.eval.chat_template_sha256 is not None
        assert service.baseline is not None
        assert service.baseline.eval_config_hash == service.config.eval.identity()
        second = _submit(service, swapped)
        first = _submit(service, honest)
        assert first["duplicate_of"] is None and second["duplicate_of"] is None
        assert not first["flagged"]
        assert second["flagged"]
        flags = second["flags"]
        assert isinstance(flags, list) and [f["check"] for f in flags] == ["chat_template"]
        assert (
            second["score"] == first["score"]
        )  # same weights, same (base) template: the swap changed nothing
        assert service.best() is not None and service.best().id == first["submission_id"]  # type: ignore[union-attr]
    finally:
        service.stop()
