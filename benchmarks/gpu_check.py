"""The prepared GPU check: on one GPU, in a few minutes and with nothing downloaded, does rlloop really train there?

Needs Python, a CUDA PyTorch, transformers, peft and rlloop's own packages (no TRL, no vLLM, no Docker, no network).
It builds a Qwen2-architecture model from a config (the Qwen2.5-0.5B shape, random weights, about 0.5B parameters,
a character tokenizer made here), then:

- times SFT steps (a plain causal-LM loop: the TRL recipe is not needed for the figure) and GRPO-style and OPO
  steps through rlloop's own on-policy code (`trainers.onpolicy`, `trainers.losses`): tokens/s and MFU against the
  GPU's dense bf16 peak (n/a for a GPU not in PEAK_TFLOPS, or on CPU);
- runs every registered recipe for one step on a micro model and prints the device and dtype its metrics.json
  recorded (recipes needing TRL say n/a when it is missing; coach needs an LLM endpoint);
- scores the SFT checkpoint through the real grading server, started as a research run starts it
  (`agent.run.grading.GraderProcess`, HF engine), on the GPU its device plan gives it;
- runs `rlloop run --trial-gpus 1 --sandbox local --base-model tiny-arith --loop-n 1` end to end.

It prints one figure per line, `name value` (or `name n/a (why)`), and exits 1 if a step failed, 3 if only packages
were missing for some (`missing_packages` names them: bring their wheels), 0 when every part ran. `--dry-run` does the
same on CPU with tiny sizes (and `--trial-gpus 0`), so the whole path is a test (tests/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "trainers").is_dir() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # a source checkout; an installed rlloop wheel works too

import torch  # noqa: E402

# Dense (no sparsity) bf16 tensor-core peaks in TFLOPS, by a substring of torch.cuda.get_device_name(); the first
# match wins, so longer names come first.
PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2500.0),
    ("B200", 2250.0),
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("H800", 989.0),
    ("GH200", 989.0),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.0),
    ("L40", 181.0),
    ("L4", 121.0),
    ("A10G", 70.0),
    ("A10", 125.0),
    ("A6000", 155.0),
    ("RTX 4090", 165.0),
    ("RTX 3090", 71.0),
)
TRL_RECIPES = ("sft", "dpo", "grpo")
FAILED: list[str] = []
MISSING: set[str] = set()  # packages a part needed and this machine lacks
RLLOOP_PACKAGES = ("agent", "grader", "sandbox", "tasks", "trainers", "benchmarks")


class PackagesMissing(RuntimeError):
    """A part needs packages this machine lacks: its figures are n/a (not a failure), naming the wheels to bring."""

    def __init__(self, packages: list[str]) -> None:
        MISSING.update(packages)
        super().__init__(f"missing packages: {', '.join(packages)}; bring their wheels (docs/gpu-check.md)")


@dataclass(frozen=True)
class Sizes:
    """Model shape and workload of one check."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    sft_batch: int
    sft_len: int
    sft_steps: int
    rl_prompts: int
    rl_group: int
    rl_new_tokens: int
    rl_steps: int
    grade_limit: int
    e2e_trial_steps: int
    e2e_eval_limit: int


# Qwen2.5-0.5B's shape (494M parameters with tied embeddings); random weights, built here.
FULL = Sizes(896, 24, 14, 2, 4864, 151936, 16, 512, 8, 8, 8, 128, 3, 200, 30, 200)
DRY = Sizes(64, 2, 4, 2, 128, 512, 2, 32, 2, 2, 2, 4, 1, 16, 2, 16)


def figure(name: str, value: object) -> None:
    print(f"{name} {value}", flush=True)


def not_available(name: str, why: str) -> None:
    print(f"{name} n/a ({why})", flush=True)


def step(name: str, names: tuple[str, ...], run: Callable[[], None]) -> None:
    """Run one part of the check; a failure prints its figures as n/a with the error, and the check exits 1."""
    try:
        run()
    except PackagesMissing as exc:
        for figure_name in names:
            not_available(figure_name, str(exc))
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.startswith(RLLOOP_PACKAGES):
            raise
        missing = PackagesMissing([exc.name.split(".")[0]])
        for figure_name in names:
            not_available(figure_name, str(missing))
    except Exception as exc:  # noqa: BLE001 - every failure is reported, the check goes on
        traceback.print_exc(file=sys.stderr)
        FAILED.append(name)
        why = f"{name} failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
        for figure_name in names:
            not_available(figure_name, why)


def peak_tflops() -> float | None:
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(0)
    return next((peak for key, peak in PEAK_TFLOPS if key in name), None)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def mfu(flops: float, seconds: float) -> str:
    peak = peak_tflops()
    if peak is None:
        return "n/a (no bf16 peak known for this device)"
    return f"{flops / seconds / (peak * 1e12):.4f}"


def has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None and __import__(module) is not None
    except ImportError:
        return False


def missing_packages(*modules: str) -> list[str]:
    """The rlloop modules that cannot be imported here for want of a package: the package names (the modules
    themselves import fine otherwise). On the GPU machine these are the wheels to bring along (docs/gpu-check.md)."""
    lacking: list[str] = []
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and not exc.name.startswith(RLLOOP_PACKAGES):
                lacking.append(exc.name.split(".")[0])
            else:
                raise
    return sorted(set(lacking))


class Check:
    """The state the parts share: sizes, folders, the built model and the SFT checkpoint."""

    def __init__(self, sizes: Sizes, work: Path, dry_run: bool, base_models: Path | None = None) -> None:
        self.sizes = sizes
        self.base_models = base_models
        self.work = work
        self.dry_run = dry_run
        self.model_dir = work / "base"
        self.home = work / "home"
        self.params = 0
        self.checkpoint: Path | None = None

    # -- the model ---------------------------------------------------------------------------------------------
    def build(self) -> None:
        from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

        from trainers.device import placement
        from trainers.tiny import build_char_tokenizer

        s = self.sizes
        tokenizer = build_char_tokenizer()
        config = Qwen2Config(
            vocab_size=s.vocab,
            hidden_size=s.hidden,
            intermediate_size=s.intermediate,
            num_hidden_layers=s.layers,
            num_attention_heads=s.heads,
            num_key_value_heads=s.kv_heads,
            max_position_embeddings=2048,
            tie_word_embeddings=True,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        where = placement()
        started = time.perf_counter()
        torch.manual_seed(0)
        with torch.device(where.device):
            model: Any = Qwen2ForCausalLM(config)
            model = model.to(where.dtype)
        model.generation_config = GenerationConfig(
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        self.params = sum(p.numel() for p in model.parameters())
        model.save_pretrained(self.model_dir, safe_serialization=True)
        tokenizer.save_pretrained(self.model_dir)
        figure("model_params", self.params)
        figure("model_build_s", f"{time.perf_counter() - started:.1f}")

    def _load(self) -> tuple[Any, Any]:
        from trainers.runtime import load_model_and_tokenizer

        return load_model_and_tokenizer(self.model_dir)  # trainers.device's device and dtype

    def _train_flops(self, tokens: int, width: int) -> float:
        """6N per token plus attention's 12 * layers * hidden * width (PaLM's count)."""
        return tokens * (6.0 * self.params + 12.0 * self.sizes.layers * self.sizes.hidden * width)

    # -- SFT ---------------------------------------------------------------------------------------------------
    def sft(self) -> None:
        model, tokenizer = self._load()
        model.train()
        s = self.sizes
        device = next(model.parameters()).device
        expect_gpu(str(device), "the SFT model")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        ids = torch.randint(4, len(tokenizer), (s.sft_batch, s.sft_len), device=device)

        def one_step() -> None:
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        one_step()  # warm-up: kernels, allocator
        sync()
        started = time.perf_counter()
        for _ in range(s.sft_steps):
            one_step()
        sync()
        seconds = time.perf_counter() - started
        tokens = s.sft_batch * s.sft_len * s.sft_steps
        figure("sft_tokens_per_s", f"{tokens / seconds:.0f}")
        figure("sft_mfu", mfu(self._train_flops(tokens, s.sft_len), seconds))
        figure("sft_peak_memory_gb", f"{peak_memory_gb():.2f}")
        self.checkpoint = self.home / "runs" / "gpu-check" / "workspace" / "trials" / "t01" / "output"
        model.save_pretrained(self.checkpoint, safe_serialization=True)
        tokenizer.save_pretrained(self.checkpoint)

    # -- GRPO-style and OPO steps through rlloop's on-policy code ------------------------------------------------
    def rl(self, kind: str) -> None:
        from trainers import losses
        from trainers import onpolicy as op

        model, tokenizer = self._load()
        model.train()
        s = self.sizes
        optimizer = op.optimizer_for(model, 1e-6)
        prompts = [f"{i + 3}+{2 * i + 5}=" for i in range(s.rl_prompts)]
        batch = [p for p in prompts for _ in range(s.rl_group)]

        def one_step() -> tuple[int, int, float, float]:
            started = time.perf_counter()
            rollout = op.sample(model, tokenizer, batch, max_new_tokens=s.rl_new_tokens, temperature=1.0)
            sync()
            generated = time.perf_counter()
            # a reward with some spread (the share of digits), so advantages are not all zero
            rewards = torch.tensor(
                [sum(c.isdigit() for c in t) / max(len(t), 1) for t in rollout.texts],
                device=rollout.lengths.device,
            )
            if kind == "grpo":
                advantages = losses.group_advantages(rewards, s.rl_group)
                normaliser = None
            else:
                advantages = losses.opo_advantages(rewards, rollout.lengths, s.rl_group)
                normaliser = float(len(batch) * s.rl_new_tokens)
            op.policy_gradient_step(model, optimizer, rollout, advantages, normaliser, 1.0)
            sync()
            return (
                int(rollout.completion_mask.sum()),
                int(rollout.attention_mask.sum()),
                generated - started,
                time.perf_counter() - generated,
            )

        one_step()  # warm-up
        totals = [0.0, 0.0, 0.0, 0.0]
        width = 0
        for _ in range(s.rl_steps):
            for i, value in enumerate(one_step()):
                totals[i] += value
        gen_tokens, train_tokens, gen_s, train_s = totals
        width = int(train_tokens / max(len(batch) * s.rl_steps, 1))
        flops = gen_tokens * 2.0 * self.params + self._train_flops(int(train_tokens), width)
        figure(f"{kind}_tokens_per_s", f"{train_tokens / (gen_s + train_s):.0f}")
        figure(f"{kind}_generate_tokens_per_s", f"{gen_tokens / gen_s:.0f}")
        figure(f"{kind}_mfu", mfu(flops, gen_s + train_s))
        figure(f"{kind}_step_s", f"{(gen_s + train_s) / s.rl_steps:.2f}")

    # -- every recipe, one step ------------------------------------------------------------------------------------
    def recipes(self) -> None:
        from trainers.registry import list_recipes

        micro = self.work / "micro"
        train_file = self.work / "train.jsonl"
        _micro_model(micro)
        _arith_file(train_file, 8)
        trl = has("trl")
        for recipe in sorted(r.name for r in list_recipes()):
            name = f"recipe_{recipe}_device"
            if recipe in TRL_RECIPES and not trl:
                not_available(name, "needs trl, not installed here")
                continue
            if recipe == "coach":
                not_available(name, "needs an OpenAI-compatible coach endpoint")
                continue
            if recipe not in RECIPE_STEP:
                not_available(name, "no one-step config in benchmarks/gpu_check.py")
                continue
            run = functools.partial(_one_recipe_step, recipe, name, micro, train_file, self.work)
            step(recipe, (name,), run)

    # -- the grading server ----------------------------------------------------------------------------------------
    def grade(self) -> None:
        lacking = missing_packages("agent.run.grading", "grader.server", "fastapi", "uvicorn")
        if lacking:
            raise PackagesMissing(lacking)
        from agent.run.grading import GraderProcess
        from agent.run.workspace import RunPaths
        from sandbox.devices import plan_devices

        assert self.checkpoint is not None, "no SFT checkpoint to score (the SFT step failed)"
        paths = RunPaths(self.home, "gpu-check")
        grader = GraderProcess.load_or_create(
            paths,
            benchmark="arith",
            base_model=self.model_dir,
            max_submissions=3,
            min_interval_s=0.0,
            public_fraction=0.0,
            eval_limit=self.sizes.grade_limit,
            eval_batch_size=64,
            test_seed=0,
            isolation="none",
        )
        devices = plan_devices(0)
        figure("grade_gpu", devices.grader_gpu if devices.grader_gpu is not None else "none")
        started = time.perf_counter()
        try:
            health = grader.start(ready_timeout_s=300, devices=devices)
            figure("grade_baseline_s", f"{time.perf_counter() - started:.1f}")
            figure("grade_baseline_score", health.get("baseline_score"))
            started = time.perf_counter()
            # submissions come from a trial's output folder: the SFT checkpoint is put where a trial leaves one
            submitted = paths.trial_output("sft")
            shutil.rmtree(submitted, ignore_errors=True)
            shutil.copytree(self.checkpoint, submitted)
            answer = grader.submit(submitted, timeout_s=300)
            figure("grade_submit_s", f"{time.perf_counter() - started:.1f}")
            figure("grade_score", answer.score)
        finally:
            grader.stop()

    # -- one research run, end to end --------------------------------------------------------------------------
    def e2e(self) -> None:
        lacking = missing_packages("agent.loop.driver", "agent.cli", "grader.server", "fastapi", "uvicorn")
        if lacking:
            raise PackagesMissing(lacking)
        from sandbox.namespaces import probe

        isolation = probe()
        sandbox = "local" if isolation.isolated else "auto"
        figure(
            "e2e_sandbox", sandbox if isolation.isolated else f"auto (local unisolated: {isolation.reason})"
        )
        home = self.work / "e2e-home"
        if self.base_models is not None and (self.base_models / "tiny-arith" / "config.json").is_file():
            # built beforehand (it trains on the CPU): the lent GPU's minutes go to what needs the GPU
            shutil.copytree(self.base_models / "tiny-arith", home / "models" / "tiny-arith")
            figure("e2e_base_model", "carried")
        elif self.dry_run:
            # tiny-arith takes minutes to build on two busy cores: the micro model stands in for it
            shutil.copytree(self.work / "micro", home / "models" / "tiny-arith")
        gpus = "0" if self.dry_run else "1"
        command = [sys.executable, "-m", "agent.cli", "run", "--trial-gpus", gpus, "--sandbox", sandbox]
        command += [
            "--base-model",
            "tiny-arith",
            "--loop-n",
            "1",
            "--recipes",
            "opo",
            "--run-id",
            "gpu-check",
        ]
        command += [
            "--trial-steps",
            str(self.sizes.e2e_trial_steps),
            "--eval-limit",
            str(self.sizes.e2e_eval_limit),
        ]
        command += ["--timeout", "6m", "--quiet"]
        env = {**os.environ, "RLLOOP_HOME": str(home)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=420)
        figure("e2e_wall_s", f"{time.perf_counter() - started:.1f}")
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
            raise RuntimeError(f"rlloop run exited {done.returncode}: {' | '.join(tail)}")
        from agent.status.runs import read_state

        run_dir = home / "runs" / "gpu-check"
        state = read_state(run_dir)
        (trial,) = state["trials"]
        figure("e2e_trial_status", trial["status"])
        figure("e2e_baseline_score", state.get("baseline_score"))
        figure("e2e_trial_score", trial.get("score"))
        figure("e2e_trial_valid", trial.get("valid_score"))
        figure("e2e_trial_train_s", (trial.get("train_metrics") or {}).get("train_seconds"))
        figure("e2e_trial_wall_s", trial.get("duration_s"))
        if trial.get("submission_note"):
            figure("e2e_trial_note", str(trial["submission_note"]).replace("\n", " "))
        if trial["status"] != "succeeded":
            raise RuntimeError(f"the trial {trial['status']}: {trial.get('error')}")
        metrics = json.loads((run_dir / "trials" / "t01" / "output" / "metrics.json").read_text())
        figure("e2e_trial_device", f"{metrics.get('device')}/{metrics.get('dtype')}")
        expect_gpu(str(metrics.get("device")), "the research run's trial (given --trial-gpus 1)")


RECIPE_STEP: dict[str, dict[str, Any]] = {
    name: {
        "max_steps": 1,
        "logging_steps": 1,
        "max_train_samples": 8,
        "per_device_train_batch_size": 2,
        **extra,
    }
    for name, extra in dict[str, dict[str, Any]](
        {
            "sft": {},
            "dpo": {},
            "grpo": {"num_generations": 2, "max_completion_length": 3},
            "opo": {"num_generations": 2, "max_new_tokens": 3},
            "opcd": {"num_generations": 1, "max_new_tokens": 3, "context": "Add. ", "top_k": 4},
            "opcd_offpolicy": {"num_generations": 1, "max_new_tokens": 3, "context": "Add. ", "top_k": 4},
            "gad": {"num_generations": 2, "max_new_tokens": 3, "sft_warmup_steps": 1, "max_steps": 1},
            "oel": {"num_generations": 1, "max_new_tokens": 3, "rounds": 1, "episodes_per_round": 2},
            # random weights are never right: it samples on the device, then stops after its empty rounds
            "rft": {"num_generations": 2, "max_new_tokens": 3, "prompts_per_round": 2, "warmup_steps": 0},
        }
    ).items()
}
RECIPE_STEP["oel"]["extractor"] = "feedback"


def _micro_model(folder: Path) -> None:
    """A random two-layer char-level Llama: what the one-step recipe runs and the dry-run's loop train."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainers.tiny import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def _arith_file(path: Path, count: int) -> None:
    from tasks import get_benchmark

    samples = get_benchmark("arith").load("train")[:count]  # type: ignore[arg-type]
    path.write_text(
        "".join(json.dumps({"id": s.id, "prompt": s.prompt, "answer": s.answer}) + "\n" for s in samples)
    )


def _one_recipe_step(recipe: str, name: str, model: Path, train_file: Path, work: Path) -> None:
    from trainers.registry import get_recipe

    entry = get_recipe(recipe)
    out = work / "recipes" / recipe
    config = entry.config_class.model_validate(
        {**RECIPE_STEP[recipe], "model_path": model, "train_file": train_file, "output_dir": out}
    )
    entry.run(config)
    metrics = json.loads((out / "metrics.json").read_text())
    figure(name, f"{metrics['device']}/{metrics['dtype']}")
    expect_gpu(str(metrics["device"]), f"the {recipe} recipe")


def expect_gpu(device: str, what: str) -> None:
    """On a GPU machine, training that ended up on the CPU is a failure of the check, not a figure."""
    if (
        torch.cuda.is_available()
        and os.environ.get("RLLOOP_DEVICE") != "cpu"
        and not device.startswith("cuda")
    ):
        raise RuntimeError(f"{what} trained on {device} although a CUDA device is visible")


def peak_memory_gb() -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else 0.0


def free_memory() -> None:
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _driver_version() -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else "none"


def environment() -> None:
    figure("torch", torch.__version__)
    figure("cuda_version", torch.version.cuda or "none")
    figure("gpu_driver", _driver_version())
    figure("cuda_available", int(torch.cuda.is_available()))
    figure(
        "device_name", torch.cuda.get_device_name(0).replace(" ", "_") if torch.cuda.is_available() else "cpu"
    )
    peak = peak_tflops()
    if peak is None:
        not_available("bf16_peak_tflops", "no GPU, or one not in PEAK_TFLOPS")
    else:
        figure("bf16_peak_tflops", peak)
    figure("trl_installed", int(has("trl")))
    figure("vllm_installed", int(has("vllm")))
    from trainers.device import placement

    figure("train_placement", placement().describe().replace(" ", "/"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dry-run", action="store_true", help="CPU, tiny sizes, the same code path (a test)."
    )
    parser.add_argument(
        "--work", type=Path, default=None, help="Scratch folder (default: a temp dir, removed)."
    )
    parser.add_argument("--skip-e2e", action="store_true", help="Leave out the end-to-end `rlloop run`.")
    parser.add_argument(
        "--base-models",
        type=Path,
        default=None,
        help="A folder holding a built tiny-arith (RLLOOP_HOME/models of another machine): the end-to-end run "
        "starts from it instead of building it on this machine's CPU.",
    )
    args = parser.parse_args(argv)
    if args.dry_run:
        os.environ["RLLOOP_DEVICE"] = "cpu"
        torch.set_num_threads(min(2, os.cpu_count() or 1))
    elif not torch.cuda.is_available():
        print(
            "error: no CUDA device visible to torch (a CPU build, or no GPU): run with --dry-run on CPU",
            file=sys.stderr,
        )
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="rlloop-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    check = Check(DRY if args.dry_run else FULL, work, args.dry_run, args.base_models)
    started = time.perf_counter()
    try:
        environment()
        step("build", ("model_params", "model_build_s"), check.build)
        step("sft", ("sft_tokens_per_s", "sft_mfu", "sft_peak_memory_gb"), check.sft)
        free_memory()  # the SFT model and optimizer went with the step's frame
        for kind in ("grpo", "opo"):
            names = tuple(f"{kind}_{n}" for n in ("tokens_per_s", "generate_tokens_per_s", "mfu", "step_s"))
            step(kind, names, functools.partial(check.rl, kind))
            free_memory()
        check.recipes()
        names = ("grade_gpu", "grade_baseline_s", "grade_baseline_score", "grade_submit_s", "grade_score")
        step("grade", names, check.grade)
        if args.skip_e2e:
            not_available("e2e_wall_s", "--skip-e2e")
        else:
            names = ("e2e_sandbox", "e2e_wall_s", "e2e_trial_status", "e2e_baseline_score", "e2e_trial_score")
            more = ("e2e_trial_valid", "e2e_trial_train_s", "e2e_trial_wall_s", "e2e_trial_device")
            step("e2e", (*names, *more), check.e2e)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    figure("total_s", f"{time.perf_counter() - started:.1f}")
    figure("missing_packages", ",".join(sorted(MISSING)) or "none")
    figure("failed", ",".join(FAILED) or "none")
    return 1 if FAILED else 3 if MISSING else 0


if __name__ == "__main__":
    sys.exit(main())
