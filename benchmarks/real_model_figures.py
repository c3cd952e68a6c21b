"""What a real pretrained model costs on this machine: SmolLM2-135M-Instruct (the built-in `smollm2-135m-instruct`) on
a benchmark in its chat template, with the recipe defaults that fit it (trainers/model_fit.py).

    .venv/bin/python benchmarks/real_model_figures.py [--home DIR] [--benchmark arith] [--steps 8] [--eval-n 100]
        [--recipes sft,dpo,grpo,...]

Prints, each part measured in a process of its own (its peak resident memory from the kernel's rusage):

- the model: fetched and converted on first use in this home (seconds), else found;
- SFT: `python -m trainers sft` at the fitted defaults for `--steps` steps: samples/s and tokens/s (the mean
  tokenized length of its rows, chat template and answer, times the rows it trained on), its start-up by part
  (imports, model, data), saving, and the fixed cost (wall seconds less training);
- generation: the grader's transformers engine scoring `--eval-n` valid samples as it scores a baseline (seconds,
  samples/s, the score), and `model.generate` at the grader's batch: new tokens/s;
- with `--recipes`: each named recipe for one step (`max_steps: 1`) at the fitted defaults: its wall seconds, its
  fixed cost and peak memory (what a slow test of every recipe costs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MODEL = "smollm2-135m-instruct"

GENERATE = r"""
import json, sys, time, torch
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer
from grader.benchmarks import get_benchmark
from grader.config import EvalConfig, pin_chat
from grader.evaluation import evaluate
from tasks.chat import ChatPrompts

model_path, benchmark_name, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
benchmark = get_benchmark(benchmark_name)
samples = benchmark.load("valid")[:n]
tokenizer = AutoTokenizer.from_pretrained(model_path)
config = pin_chat(EvalConfig(prompt_style="chat", engine="hf", limit=n), tokenizer)
result = evaluate(model_path, samples, benchmark, config)
chat = ChatPrompts.of(tokenizer, None)
model = AutoModelForCausalLM.from_pretrained(model_path).eval()
tokenizer.padding_side = "left"
texts = [chat.render(s.prompt) for s in samples[: config.batch_size]]
batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
budget = config.max_new_tokens or benchmark.max_new_tokens
started = time.monotonic()
with torch.no_grad():
    out = model.generate(**batch, max_new_tokens=budget, do_sample=False, pad_token_id=tokenizer.pad_token_id)
seconds = time.monotonic() - started
new = out[:, batch["input_ids"].shape[1]:]
made = int(((new != tokenizer.pad_token_id) | (new == tokenizer.eos_token_id)).sum())
print(json.dumps({"eval_seconds": result.seconds, "eval_n": result.n, "score": result.score,
                  "generate_seconds": seconds, "generate_batch": len(texts), "new_tokens": made,
                  "max_new_tokens": budget, "prompt_tokens": int(batch["attention_mask"].sum())}))
"""


def run_measured(
    command: list[str], env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run `command`; (its result, wall seconds, peak resident MiB from the kernel's rusage of that process)."""
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(command, proc.returncode, out.read(), err.read())
    return done, wall, usage.ru_maxrss / 1024


def write_rows(path: Path, benchmark: str, limit: int) -> Path:
    from tasks import get_benchmark

    with path.open("w") as handle:
        for sample in get_benchmark(benchmark).load("train")[:limit]:
            handle.write(
                json.dumps({"id": sample.id, "prompt": sample.prompt, "answer": sample.answer}) + "\n"
            )
    return path


def mean_tokens(model: Path, rows: Path, limit: int = 400) -> float:
    """The mean length in tokens of a supervised row as SFT trains on it: the chat-rendered prompt and the answer
    with the end-of-turn token."""
    from transformers import AutoTokenizer

    from tasks.chat import ChatPrompts

    tokenizer = AutoTokenizer.from_pretrained(model)
    chat = ChatPrompts.of(tokenizer, None)
    lengths = []
    for line in rows.read_text().splitlines()[:limit]:
        row = json.loads(line)
        text = chat.render(row["prompt"]) + row["answer"] + (tokenizer.eos_token or "")
        lengths.append(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
    return sum(lengths) / len(lengths)


def train(
    recipe: str, model: Path, rows: Path, out: Path, steps: int, benchmark: str, env: dict[str, str]
) -> dict[str, Any]:
    """`python -m trainers <recipe>` for `steps` steps at the fitted defaults: its metrics, wall and memory."""
    from trainers.model_fit import fit_for

    config = {
        **fit_for(model).defaults(recipe),
        "model_path": str(model),
        "train_file": str(rows),
        "output_dir": str(out),
        "benchmark": benchmark,
        "prompt_format": "chat",
        "max_steps": steps,
        "logging_steps": 1,
        "save_optimizer_max_mb": 0,
    }
    config_file = out.with_suffix(".json")
    config_file.write_text(json.dumps(config))
    done, wall, rss = run_measured(
        [sys.executable, "-m", "trainers", recipe, "--config", str(config_file)], env
    )
    if done.returncode != 0:
        return {"error": (done.stdout + done.stderr).strip().splitlines()[-1:], "wall": wall, "rss_mib": rss}
    metrics = json.loads((out / "metrics.json").read_text())
    return {**metrics, "wall": wall, "rss_mib": rss, "config": config}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--home", type=Path, default=Path(os.environ.get("RLLOOP_HOME", ".rlloop")))
    parser.add_argument("--benchmark", default="arith")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--eval-n", type=int, default=100)
    parser.add_argument("--recipes", default="", help="recipes to run one step each (comma-separated)")
    args = parser.parse_args(argv)
    from agent.run.models import resolve_base_model

    started = time.monotonic()
    model = resolve_base_model(MODEL, args.home.resolve())
    print(f"model: {model} ({time.monotonic() - started:.0f} s to resolve; a first use fetches and converts)")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at start")
    with tempfile.TemporaryDirectory(prefix="real-model-") as scratch:
        folder = Path(scratch)
        rows = write_rows(folder / "train.jsonl", args.benchmark, 2000)
        tokens = mean_tokens(model, rows)
        sft = train("sft", model, rows, folder / "sft", args.steps, args.benchmark, env)
        if "error" in sft:
            print(f"sft failed: {sft['error']}")
            return 1
        batch = sft["config"]["per_device_train_batch_size"]
        per_s = sft["steps"] * batch / sft["train_seconds"]
        parts = ", ".join(f"{k} {v:.1f}" for k, v in (sft.get("startup_parts") or {}).items())
        print(
            f"sft ({args.steps} steps, batch {batch}, lr {sft['config']['learning_rate']:g}, threads: all): "
            f"{sft['train_seconds'] / sft['steps']:.2f} s a step, {per_s:.2f} samples/s, "
            f"{per_s * tokens:.0f} tokens/s ({tokens:.1f} tokens a row); start-up {sft['startup_seconds']:.1f} s "
            f"({parts}), save {sft['save_seconds']:.1f} s, fixed cost {sft['wall'] - sft['train_seconds']:.1f} s "
            f"of {sft['wall']:.1f} s wall; peak memory {sft['rss_mib']:.0f} MiB; loss {sft.get('train_loss')}"
        )
        done, wall, rss = run_measured(
            [sys.executable, "-c", GENERATE, str(model), args.benchmark, str(args.eval_n)], env
        )
        if done.returncode != 0:
            print(f"generation failed: {done.stderr.strip().splitlines()[-1:]}")
            return 1
        gen = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"grader, transformers engine, chat prompts: {gen['eval_n']} valid samples in {gen['eval_seconds']:.1f} "
            f"s ({gen['eval_n'] / gen['eval_seconds']:.2f} samples/s), score {gen['score']:.3f}; model.generate at "
            f"batch {gen['generate_batch']}: {gen['new_tokens']} new tokens in {gen['generate_seconds']:.1f} s "
            f"({gen['new_tokens'] / gen['generate_seconds']:.1f} tokens/s; up to {gen['max_new_tokens']} a sample, "
            f"{gen['prompt_tokens']} prompt tokens); that process's peak memory {rss:.0f} MiB, {wall:.0f} s wall"
        )
        for recipe in [r for r in args.recipes.split(",") if r]:
            one = train(recipe, model, rows, folder / recipe, 1, args.benchmark, env)
            if "error" in one:
                print(f"{recipe}: FAILED after {one['wall']:.0f} s: {one['error']}")
                continue
            print(
                f"{recipe} one step: {one['wall']:.0f} s wall (training {one.get('train_seconds', 0):.1f} s, "
                f"start-up {one.get('startup_seconds', 0):.1f} s), peak memory {one['rss_mib']:.0f} MiB"
            )
    print(f"load {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
