"""Pure loss and advantage functions shared by the hand-written recipes (OPO, OPCD, GAD, coach, OEL).

No models and no state here: every function maps tensors to tensors, so each one is unit-tested on small inputs
against values worked out by hand or in float64 (tests/trainers/test_losses.py). Shapes use B (sequences),
T (completion tokens), V (vocabulary) and G (completions per prompt, consecutive in the batch).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _grouped(values: torch.Tensor, group_size: int) -> torch.Tensor:
    """View a flat [B] tensor as [B / G, G]; prompts' completions are consecutive."""
    if values.dim() != 1:
        raise ValueError(f"expected a flat tensor of per-sequence values, got shape {tuple(values.shape)}")
    if group_size < 1 or values.numel() % group_size != 0:
        raise ValueError(f"batch of {values.numel()} is not a whole number of groups of {group_size}")
    return values.view(-1, group_size)


def group_advantages(
    rewards: torch.Tensor, group_size: int, *, scale_by_std: bool = True, eps: float = 1e-4
) -> torch.Tensor:
    """GRPO advantages: reward minus its group mean, divided by the group std (unbiased, as TRL) when
    `scale_by_std`; `scale_by_std=False` is Dr. GRPO (no std division, so easy and hard prompts weigh alike)."""
    grouped = _grouped(rewards, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_by_std:
        std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(grouped[:, :1])
        centred = centred / (std + eps)
    return centred.reshape(-1)


def opo_baseline(rewards: torch.Tensor, lengths: torch.Tensor, group_size: int) -> torch.Tensor:
    """OPO's optimal baseline per group, b = sum(l_i r_i) / sum(l_i), broadcast back to [B] (arXiv 2505.23585).

    It minimises the policy-gradient variance when a sequence's gradient norm grows with its length l_i.
    """
    r = _grouped(rewards, group_size).to(torch.float64)
    lens = _grouped(lengths, group_size).to(torch.float64)
    total = lens.sum(dim=1, keepdim=True)
    weighted = (lens * r).sum(dim=1, keepdim=True) / total.clamp(min=1.0)
    plain = r.mean(dim=1, keepdim=True)  # all-empty group: fall back to the plain mean
    baseline = torch.where(total > 0, weighted, plain)
    return baseline.expand_as(r).reshape(-1).to(rewards.dtype)


def opo_advantages(rewards: torch.Tensor, lengths: torch.Tensor, group_size: int) -> torch.Tensor:
    """r_i - b with OPO's length-weighted baseline; no division by the std."""
    return rewards - opo_baseline(rewards, lengths, group_size)


def policy_gradient_loss(
    token_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    normaliser: float | None = None,
) -> torch.Tensor:
    """Exactly on-policy REINFORCE: -sum_i A_i sum_t log p(y_it) / normaliser.

    With one optimiser step per rollout batch the PPO ratio is 1, so clipping is a no-op and this is the whole
    loss. `normaliser` defaults to the number of unmasked tokens; pass a constant (B * max_new_tokens) for the
    Dr. GRPO / OPO convention that does not favour short or long answers.
    """
    mask_f = mask.to(token_logprobs.dtype)
    per_sequence = (token_logprobs * mask_f).sum(dim=1)
    denominator = float(normaliser) if normaliser is not None else float(mask_f.sum().clamp(min=1.0))
    return -(advantages.detach() * per_sequence).sum() / denominator


def _masked_mean(per_token: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return per_token.mean()
    mask_f = mask.to(per_token.dtype)
    return (per_token * mask_f).sum() / mask_f.sum().clamp(min=1.0)


def topk_reverse_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    top_k: int = 256,
    renormalise: bool = False,
) -> torch.Tensor:
    """Reverse KL(student || teacher) summed over the student's top-k tokens at each position, masked mean.

    sum_{v in topk(p_s)} p_s(v) (log p_s(v) - log p_t(v)); k is capped by the vocabulary. With `renormalise`
    both distributions are renormalised over the top-k set first (a proper KL between two k-way distributions).
    Gradients flow to the student only. Logits are [B, T, V]; mask is [B, T].
    """
    k = max(1, min(int(top_k), student_logits.shape[-1]))
    student_logp = F.log_softmax(student_logits.float(), dim=-1)
    teacher_logp = F.log_softmax(teacher_logits.detach().float(), dim=-1)
    top_student, index = student_logp.topk(k, dim=-1)
    top_teacher = teacher_logp.gather(-1, index)
    if renormalise:
        top_student = top_student - torch.logsumexp(top_student, dim=-1, keepdim=True)
        top_teacher = top_teacher - torch.logsumexp(top_teacher, dim=-1, keepdim=True)
    per_token = (top_student.exp() * (top_student - top_teacher)).sum(dim=-1)
    return _masked_mean(per_token, mask)


def forward_kl(
    teacher_logits: torch.Tensor, student_logits: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Forward KL(teacher || student) over the full vocabulary, masked mean over positions (off-policy OPCD)."""
    teacher_logp = F.log_softmax(teacher_logits.detach().float(), dim=-1)
    student_logp = F.log_softmax(student_logits.float(), dim=-1)
    per_token = (teacher_logp.exp() * (teacher_logp - student_logp)).sum(dim=-1)
    return _masked_mean(per_token, mask)


def bradley_terry_loss(preferred_scores: torch.Tensor, other_scores: torch.Tensor) -> torch.Tensor:
    """-log sigma(D(preferred) - D(other)), mean over pairs: GAD's discriminator loss (teacher preferred)."""
    return -F.logsigmoid(preferred_scores - other_scores).mean()
