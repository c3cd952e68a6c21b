# rlloop: `make demo` runs a research loop on embedded defaults; `make test` runs the whole test suite.
PYTHON ?= python3
VENV ?= .venv
# CPU build by default (a local wheel on the dev machines); GPU users: make TORCH_SPEC='torch==2.13.0' install-gpu
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
DEMO_ARGS ?=

.PHONY: demo test install install-dev sandbox-image lint typecheck clean-venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(BIN)/pip install -q -e '.[dev,ray]'
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
