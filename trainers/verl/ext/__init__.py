"""rlloop's verl extension modules: what the families need beyond stock verl (0.9.1), imported by verl itself.

The plans set VERL_USE_EXTERNAL_MODULES=trainers.verl.ext.opcd (through Ray's runtime_env), and verl imports the
modules it names whenever verl is imported (verl/__init__.py), in the driver and in every worker; that import
registers the `opcd` advantage estimator in verl's registry. `benchmark_reward.py` and `zero_reward.py` are verl
reward-function files (reward.custom_reward_function.path). `data.py` prepares the off-policy stages' parquet
files on the CPU and needs no verl; `opcd` needs verl installed (`make verl-env` puts it in .venv/verl-site).
"""

MODULES = ("trainers.verl.ext.opcd",)  # what VERL_USE_EXTERNAL_MODULES names
