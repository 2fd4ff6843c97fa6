# fedchain — two commands for a newcomer: `make demo` and `make test`.
# Each creates the project-local virtualenv (.venv) and installs pinned dependencies
# (requirements.lock; node tools from package-lock.json) when they are missing or stale.

PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ARGS   ?=
PYTEST_ARGS ?=
# Every package is type-checked strictly.
MYPY_TARGETS := protocol adapters aggregators consensus clients fedchain

.PHONY: setup setup-python setup-node demo test lint typecheck pytest compile compile-check clean

setup: setup-python setup-node

setup-python: $(STAMP)
$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.lock
	$(PY) -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	@touch $@

## Node tools (solc-js, OpenZeppelin, anvil; js-ipfs under tools/ipfs): idempotent, fast
## when up to date.
setup-node:
	scripts/install_tools.sh

## Run the demo on embedded defaults (in-process chain, on-disk content store).
demo: setup-python
	$(VENV)/bin/fedchain demo $(ARGS)

## Lint, format check, layer check (import-linter), type check, then the whole test suite.
test: setup lint typecheck pytest

lint: setup-python
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: setup-python
	$(VENV)/bin/mypy $(MYPY_TARGETS)

pytest: setup
	$(PY) -m pytest -n 2 --dist loadfile $(PYTEST_ARGS)

## Recompile contracts/*.sol into contracts/build (needs node_modules).
compile: setup
	$(PY) -m adapters.compile

compile-check: setup
	$(PY) -m adapters.compile --check

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache .hypothesis
