"""`opcd_offpolicy`: the off-policy baseline of OPCD (forward KL on teacher-generated sequences); see opcd.py."""

from __future__ import annotations

from trainers.algorithms.opcd import OPCDOffPolicyConfig, run_offpolicy
from trainers.registry import Recipe

RECIPE = Recipe(
    name="opcd_offpolicy",
    description="Off-policy context distillation baseline: forward KL on teacher-generated sequences.",
    config_class=OPCDOffPolicyConfig,
    run=run_offpolicy,
)
