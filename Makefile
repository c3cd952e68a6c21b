# rlloop: `make demo` runs a research loop on embedded defaults; `make test` runs the whole test suite.
PYTHON ?= python3
VENV ?= .venv
# CPU build by default (a local wheel on the dev machines); GPU users: make TORCH_SPEC='torch==2.13.0' install-gpu
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
DEMO_ARGS ?=

.PHONY: demo test install install-dev sandbox-image lint typecheck clean-venv gpu-check

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

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

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

## test: the whole suite, Docker tests included (the engine and the trainer image are set up first)
test: $(VENV)/.installed-dev
	bash .ci/docker.sh
	bash .ci/chromium.sh
	$(BIN)/rlloop sandbox build
	$(BIN)/python -m pytest -q -p no:cacheprovider --timeout=1800

lint:
	$(BIN)/ruff check agent sandbox grader tasks trainers tests benchmarks
	$(BIN)/ruff format --check agent sandbox grader tasks trainers tests benchmarks

typecheck:
	$(BIN)/mypy

clean-venv:
	rm -rf $(VENV)
