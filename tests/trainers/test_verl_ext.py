"""rlloop's verl extension modules (trainers/verl/ext) with verl 0.9.1 installed: verl itself imports them (through
VERL_USE_EXTERNAL_MODULES, as the plans set it), and the OPCD signal verl computes with the plan's own settings (KL
in the reward, the `opcd` advantage estimator, the vanilla policy loss) has, in expectation over the sampled token,
the gradient of rlloop's reverse-KL loss (trainers.losses.topk_reverse_kl with k = the vocabulary). The CPU data
steps of the off-policy stage (no verl needed) turn rows into what verl's generation server and SFT trainer read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from tests.trainers import verl_validate
from trainers.losses import topk_reverse_kl
from trainers.verl.ext import MODULES, data
from trainers.verl.plan import plan


@pytest.fixture(scope="module")
def verl() -> Any:
    reason = verl_validate.missing_reason()
    if reason:
        if verl_validate.REQUIRED:
            pytest.fail(reason)
        pytest.skip(reason)
    return verl_validate.load()


def test_verl_imports_the_extensions_it_is_told_to(verl: Any) -> None:
    """A fresh interpreter with only the variable the plan sets: `import verl` registers rlloop's estimator."""
    (stage,) = plan("opcd", stage="on-policy", env={}).stages
    (setting,) = [o for o in stage.overrides if "VERL_USE_EXTERNAL_MODULES=" in o]
    modules = setting.split("=", 1)[1]
    assert modules.split(",") == list(MODULES)
    code = "import verl\nfrom verl.trainer.ppo import core_algos\nprint(sorted(core_algos.ADV_ESTIMATOR_REGISTRY))"
    env = {
        **os.environ,
        "VERL_USE_EXTERNAL_MODULES": modules,
        "PYTHONPATH": f"{verl_validate.ROOT}{os.pathsep}{verl_validate.SITE}",
        "OMP_NUM_THREADS": "1",
    }
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'opcd'" in out.stdout.splitlines()[-1]  # stock verl has no `opcd` (its AdvantageEstimator names)


def test_opcd_on_verl_has_the_gradient_of_rlloops_reverse_kl(verl: Any) -> None:
    """One position, every vocabulary token as a sampled response (weighted by the student's probability): verl's
    KL-in-reward, the `opcd` estimator and the vanilla policy loss, with the plan's config, give the gradient of
    topk_reverse_kl(k = V); a sampled-token mean is thus an unbiased estimate of it."""
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import apply_kl_penalty, compute_advantage
    from verl.utils.config import omega_conf_to_dataclass

    import trainers.verl.ext.opcd  # noqa: F401  (registers `opcd`, as verl's import does)

    (stage,) = plan("opcd", stage="on-policy", env={}).stages
    ((_, config),) = verl_validate.check_command(stage.command)
    algorithm = omega_conf_to_dataclass(config.algorithm)
    torch.manual_seed(0)
    vocab = 11
    student_logits = torch.randn(1, 1, vocab, dtype=torch.float64, requires_grad=True)
    teacher_logits = torch.randn(1, 1, vocab, dtype=torch.float64)
    student = torch.log_softmax(student_logits, -1)[0, 0]  # [V]
    teacher = torch.log_softmax(teacher_logits, -1)[0, 0]
    log_prob = student.unsqueeze(-1)  # [B = V responses, T = 1]: response v is token v
    mask = torch.ones(vocab, 1, dtype=torch.float64)
    batch = DataProto.from_dict(
        tensors={
            "old_log_probs": log_prob.detach(),
            "ref_log_prob": teacher.unsqueeze(-1),
            "token_level_scores": torch.zeros(vocab, 1, dtype=torch.float64),  # zero_reward.py
            "response_mask": mask,
        }
    )
    batch, _ = apply_kl_penalty(
        batch, kl_ctrl=core_algos.get_kl_controller(algorithm.kl_ctrl), kl_penalty=algorithm.kl_penalty
    )
    batch = compute_advantage(batch, adv_estimator=algorithm.adv_estimator, config=algorithm)
    advantages = batch.batch["advantages"]
    assert torch.allclose(advantages[:, 0], -(student - teacher).detach())
    loss_fn = core_algos.get_policy_loss_fn(config.actor_rollout_ref.actor.policy_loss.loss_mode)
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    weights = student.detach().exp().unsqueeze(-1)  # the expectation over the sampled token
    loss, _ = loss_fn(log_prob.detach(), log_prob, advantages, weights, "token-mean", actor)
    (verl_grad,) = torch.autograd.grad(loss, student_logits)
    reference = topk_reverse_kl(student_logits, teacher_logits, top_k=vocab)
    (rlloop_grad,) = torch.autograd.grad(reference, student_logits)
    assert torch.allclose(verl_grad, rlloop_grad, atol=1e-10), (verl_grad, rlloop_grad)
    assert rlloop_grad.abs().max() > 1e-3  # not a trivial agreement at zero


def test_off_policy_rows_become_what_verl_reads(tmp_path: Path) -> None:
    experience = tmp_path / "experience.json"
    experience.write_text('["check the units", {"text": "answer last"}]', encoding="utf-8")
    train = tmp_path / "train.parquet"
    prompts = [[{"role": "user", "content": "2+2?"}], [{"role": "user", "content": "3+3?"}]]
    pd.DataFrame({"prompt": prompts, "data_source": ["arith", "arith"]}).to_parquet(train)
    teacher = tmp_path / "with_context.parquet"
    data.main(["add-context", "--context", str(experience), "--input", str(train), "--output", str(teacher)])
    read = pd.read_parquet(teacher)
    first = list(read["prompt"][0])
    assert first[0] == {"role": "system", "content": "- check the units\n- answer last"}
    assert list(first[1:]) == prompts[0] and list(read["student_prompt"][1]) == prompts[1]
    read["responses"] = [["4", "four"], ["6"]]  # what main_generation_server adds (rollout.n per prompt)
    generated, rows = tmp_path / "trajectories.parquet", tmp_path / "sft.parquet"
    read.to_parquet(generated)
    data.main(["to-sft", "--input", str(generated), "--output", str(rows)])
    messages = [list(m) for m in pd.read_parquet(rows)["messages"]]
    assert messages == [
        [*prompts[0], {"role": "assistant", "content": "4"}],
        [*prompts[0], {"role": "assistant", "content": "four"}],
        [*prompts[1], {"role": "assistant", "content": "6"}],
    ]  # the student's prompt, without the context
    with pytest.raises(SystemExit):
        data.main(["to-sft", "--input", str(train), "--output", str(rows)])  # no responses column


def test_benchmark_reward_is_the_benchmarks_score() -> None:
    from tasks import get_benchmark
    from trainers.verl.ext.benchmark_reward import compute_score

    bench = get_benchmark("arith")
    sample = bench.load("valid")[0]
    assert compute_score("arith", sample.answer, sample.answer) == bench.score(sample.answer, sample) == 1.0
    assert compute_score("arith", "no", sample.answer) == 0.0
