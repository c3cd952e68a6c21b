"""Scale-out on a verl + Ray + vLLM cluster: plans of verl commands, input checks, and verl's extension modules.

Nothing here runs training or imports verl, except `ext` (imported by verl itself in its workers):

- `plan`: `plan(...)` -> `Plan`, the staged commands, their checklist and what is unresolved;
- `builders`: what a family builder reads and returns, the `FAMILIES` registry, the stage pieces families share;
- `families`: the built-in families' builders (grpo, opo, opcd, oel, gad, coach);
- `resolve`: roots, credentials, the GPU setup path and what each stage would start;
- `check_inputs`: experience lists, system prompts and data roots checked before any GPU time is spent;
- `cli`: the `rlloop plan` and `rlloop check-inputs` commands;
- `ext`: rlloop's verl extension modules (`VERL_USE_EXTERNAL_MODULES=trainers.verl.ext.opcd`, reward files, the
  off-policy stages' data steps).
"""
