"""trainers.losses on small tensors, checked against hand-worked values and float64 references."""

from __future__ import annotations

import math

import pytest
import torch

from trainers import losses


def test_group_advantages_match_hand_values() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0])
    adv = losses.group_advantages(rewards, group_size=3, eps=0.0)
    # group 1: mean 1/3, unbiased std sqrt(1/3); group 2: mean 2/3, same std
    std = math.sqrt(1 / 3)
    expected = torch.tensor([2 / 3 / std, -1 / 3 / std, -1 / 3 / std, -2 / 3 / std, 1 / 3 / std, 1 / 3 / std])
    torch.testing.assert_close(adv, expected)


def test_dr_grpo_skips_std_and_constant_group_gives_zero() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5])
    torch.testing.assert_close(
        losses.group_advantages(rewards, 2, scale_by_std=False), torch.tensor([0.5, -0.5, 0.0, 0.0])
    )
    scaled = losses.group_advantages(rewards, 2)
    assert scaled[2].item() == 0.0 and scaled[3].item() == 0.0


def test_group_size_must_divide_batch() -> None:
    with pytest.raises(ValueError, match="groups of 4"):
        losses.group_advantages(torch.zeros(6), 4)


def test_opo_baseline_is_length_weighted_mean() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0, 2.0])
    lengths = torch.tensor([3, 1, 2, 2])
    baseline = losses.opo_baseline(rewards, lengths, 2)
    # group 1: (3*1 + 1*0) / 4 = 0.75; group 2: (2*0 + 2*2) / 4 = 1.0
    torch.testing.assert_close(baseline, torch.tensor([0.75, 0.75, 1.0, 1.0]))
    adv = losses.opo_advantages(rewards, lengths, 2)
    torch.testing.assert_close(adv, torch.tensor([0.25, -0.75, -1.0, 1.0]))
    # the length-weighted advantages sum to zero within a group: sum l_i (r_i - b) = 0
    assert abs(float((lengths[:2] * adv[:2]).sum())) < 1e-6


def test_opo_baseline_empty_group_falls_back_to_mean() -> None:
    baseline = losses.opo_baseline(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), 2)
    torch.testing.assert_close(baseline, torch.tensor([0.5, 0.5]))


def test_policy_gradient_loss_and_gradient() -> None:
    logp = torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -0.2, -9.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv = torch.tensor([2.0, -1.0])
    loss = losses.policy_gradient_loss(logp, adv, mask)
    # -(2 * (-1.5) + (-1) * (-9.3)) / 5 tokens
    assert loss.item() == pytest.approx(-(2 * -1.5 + -1 * -9.3) / 5)
    loss.backward()
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.4, -0.4, 0.0], [0.2, 0.2, 0.2]]))
    constant = losses.policy_gradient_loss(logp, adv, mask, normaliser=10.0)
    assert constant.item() == pytest.approx(-(2 * -1.5 + -1 * -9.3) / 10)


def _reference_topk_reverse_kl(s: torch.Tensor, t: torch.Tensor, k: int, renorm: bool) -> float:
    """Loop-by-loop float64 reference."""
    total, count = 0.0, 0
    for b in range(s.shape[0]):
        for pos in range(s.shape[1]):
            ps = torch.softmax(s[b, pos].double(), -1)
            pt = torch.softmax(t[b, pos].double(), -1)
            idx = torch.argsort(ps, descending=True)[:k]
            qs, qt = ps[idx], pt[idx]
            if renorm:
                qs, qt = qs / qs.sum(), qt / qt.sum()
            total += float((qs * (qs.log() - qt.log())).sum())
            count += 1
    return total / count


@pytest.mark.parametrize("renormalise", [False, True])
@pytest.mark.parametrize("k", [2, 5, 500])
def test_topk_reverse_kl_matches_float64_reference(k: int, renormalise: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(2, 3, 5, generator=gen)
    t = torch.randn(2, 3, 5, generator=gen)
    got = losses.topk_reverse_kl(s, t, top_k=k, renormalise=renormalise)
    assert got.item() == pytest.approx(_reference_topk_reverse_kl(s, t, min(k, 5), renormalise), rel=1e-5)


def test_full_vocab_reverse_kl_is_zero_for_equal_and_positive_otherwise() -> None:
    s = torch.tensor([[[1.0, 2.0, 3.0]]])
    assert losses.topk_reverse_kl(s, s.clone(), top_k=3).item() == pytest.approx(0.0, abs=1e-7)
    t = torch.tensor([[[3.0, 2.0, 1.0]]])
    p = torch.softmax(s[0, 0].double(), -1)
    q = torch.softmax(t[0, 0].double(), -1)
    assert losses.topk_reverse_kl(s, t, top_k=3).item() == pytest.approx(float((p * (p / q).log()).sum()))


def test_topk_reverse_kl_mask_and_gradient_reach_student_only() -> None:
    s = torch.randn(1, 2, 4, requires_grad=True)
    t = torch.randn(1, 2, 4, requires_grad=True)
    masked = losses.topk_reverse_kl(s, t, torch.tensor([[1, 0]]), top_k=4)
    first = losses.topk_reverse_kl(s[:, :1], t[:, :1], top_k=4)
    assert masked.item() == pytest.approx(first.item())
    masked.backward()
    assert s.grad is not None and t.grad is None


def test_forward_kl_matches_definition() -> None:
    t = torch.tensor([[[0.0, 1.0], [2.0, 0.0]]])
    s = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    expected = 0.0
    for pos in range(2):
        p = torch.softmax(t[0, pos].double(), -1)
        q = torch.softmax(s[0, pos].double(), -1)
        expected += float((p * (p / q).log()).sum())
    assert losses.forward_kl(t, s).item() == pytest.approx(expected / 2)
    assert losses.forward_kl(t, s, torch.tensor([[0, 1]])).item() == pytest.approx(
        float((torch.softmax(t[0, 1].double(), -1) * (torch.softmax(t[0, 1].double(), -1) / 0.5).log()).sum())
    )


def test_bradley_terry_loss() -> None:
    preferred = torch.tensor([2.0, 0.0])
    other = torch.tensor([0.0, 0.0])
    expected = (math.log(1 + math.exp(-2.0)) + math.log(2.0)) / 2
    assert losses.bradley_terry_loss(preferred, other).item() == pytest.approx(expected)
    # a discriminator that separates the pair more gets a lower loss
    assert losses.bradley_terry_loss(torch.tensor([5.0]), torch.tensor([0.0])) < losses.bradley_terry_loss(
        torch.tensor([1.0]), torch.tensor([0.0])
    )
