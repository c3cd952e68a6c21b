"""OPCD on verl: the on-policy reverse-KL distillation signal as a verl advantage estimator, and its reward file.

verl computes the reference's log-probs of every sampled token and, with `algorithm.use_kl_in_reward=True`,
`kl_penalty=kl` and a fixed `kl_coef` of 1, puts -(log p_student(y_t) - log p_teacher(y_t)) into the token rewards
(the task reward is 0: `zero_reward.py`). The `opcd` estimator registered here keeps that reward per token as the
advantage (no reward-to-go, no whitening), so verl's policy gradient -A_t grad log p_student(y_t) is, in expectation
over the sampled token, the gradient of reverse KL(student || teacher) at each position: the same objective as
`trainers.losses.topk_reverse_kl` with k = the vocabulary (tests/trainers/test_verl_ext.py checks this).
"""

from __future__ import annotations

from typing import Any

import torch
from verl.trainer.ppo.core_algos import register_adv_est

NAME = "opcd"


@register_adv_est(NAME)  # type: ignore[untyped-decorator]
def compute_opcd_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None, **_: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token advantages = the token rewards (-(log p_s - log p_t) under the plan's KL settings), masked;
    returns (advantages, returns) as every verl estimator does."""
    advantages = token_level_rewards * response_mask
    return advantages, advantages
