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
MYPY_TARGETS := protocol adapters privacy aggregators consensus clients fedchain

.PHONY: setup setup-python setup-node setup-browser setup-slither demo dashboard docs docs-check test lint typecheck slither forge-test pytest compile compile-check clean

setup: setup-python setup-node setup-browser data reference

setup-python: $(STAMP)
$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements.lock
	$(PY) -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	@touch $@

## Node tools (solc-js, OpenZeppelin, anvil, forge; js-ipfs under tools/ipfs): idempotent, fast
## when up to date.
setup-node:
	scripts/install_tools.sh

## Debian's chromium for the dashboard's browser tests (apt-get when missing; fast when present).
setup-browser:
	scripts/install_browser.sh

## The web dashboard and control panel for the runs under runs/ (prints its URL).
dashboard: setup-python
	$(VENV)/bin/fedchain dashboard --runs runs $(ARGS)

## Run the demo on embedded defaults (in-process chain, on-disk content store).
demo: setup-python
	$(VENV)/bin/fedchain demo $(ARGS)

## The documentation site (mkdocs.yml, docs/), served on 127.0.0.1 and rebuilt on change.
DOCS_PORT ?= 8000
docs: setup-python
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:$(DOCS_PORT)

## The docs check: `mkdocs build --strict` into a temporary directory (a broken link or
## anchor, a page missing from the nav, a nav entry without its page fail), no external
## resource in the built site, every README link resolves and the README stays short.
docs-check: setup-python
	$(PY) scripts/check_docs.py

## Lint, format check, layer check (import-linter), type check, Slither, the Foundry contract
## tests, the docs check, then the test suite.
test: setup lint typecheck slither forge-test docs-check pytest

lint: setup-python
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: setup-python
	$(VENV)/bin/mypy $(MYPY_TARGETS)

pytest: setup
	$(PY) -m pytest -n 2 --dist loadfile $(PYTEST_ARGS)

## Slither (static analysis of the contract) in its own virtualenv: it pins web3 < 8, which
## the project's web3 8 excludes. Config: slither.config.json (solc-js through
## scripts/solc_wrapper.js); every High/Medium finding is fixed or silenced in place with its
## reason, so any new one fails here.
SLITHER_VENV ?= .venv-slither
SLITHER_STAMP := $(SLITHER_VENV)/.installed
setup-slither: $(SLITHER_STAMP)
$(SLITHER_STAMP): requirements-slither.lock
	@test -x $(SLITHER_VENV)/bin/python || $(PYTHON) -m venv $(SLITHER_VENV) || python3 -m venv $(SLITHER_VENV)
	$(SLITHER_VENV)/bin/pip install --disable-pip-version-check -q -r requirements-slither.lock
	@touch $@

slither: setup-node setup-slither
	$(SLITHER_VENV)/bin/slither contracts/FedChainTask.sol --fail-medium
	$(SLITHER_VENV)/bin/slither contracts/PrivacyRecords.sol --fail-medium
	$(SLITHER_VENV)/bin/slither contracts/OneStep.sol --fail-medium
	$(SLITHER_VENV)/bin/slither contracts/FaultGames.sol --fail-medium
	$(SLITHER_VENV)/bin/slither contracts/TaskDisputes.sol --fail-medium

## Foundry contract tests (contracts/test: unit, fuzz, handler-based invariants) with forge from
## node_modules (npm @foundry-rs/forge-linux-amd64), compiling through scripts/solc_wrapper.js;
## forge's project root is contracts/ (contracts/foundry.toml). The campaign size here keeps the
## target under ~2 minutes; scripts/invariant_campaign.sh runs a longer one.
FORGE ?= $(CURDIR)/node_modules/@foundry-rs/forge-linux-amd64/bin/forge
FORGE_FUZZ_RUNS ?= 256
FORGE_INVARIANT_RUNS ?= 32
FORGE_INVARIANT_DEPTH ?= 64
forge-test: setup-node
	cd contracts && FOUNDRY_FUZZ_RUNS=$(FORGE_FUZZ_RUNS) FOUNDRY_INVARIANT_RUNS=$(FORGE_INVARIANT_RUNS) \
		FOUNDRY_INVARIANT_DEPTH=$(FORGE_INVARIANT_DEPTH) $(FORGE) test

## Recompile contracts/*.sol into contracts/build (needs node_modules).
compile: setup
	$(PY) -m adapters.compile

compile-check: setup
	$(PY) -m adapters.compile --check

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache .hypothesis crytic-export .forge


.PHONY: data reference

## Fashion-MNIST (Debian's dataset-fashion-mnist, IDX files under /usr/share/datasets/).
data:
	scripts/install_data.sh

## ByzFL, the float reference the defence tests compare with (no dependencies pulled in).
reference: setup-python
	$(PY) -m pip install --disable-pip-version-check -q --no-deps -r requirements-reference.lock
