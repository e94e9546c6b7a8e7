# Two entry points, each setting up everything on a fresh machine:
#   make train   a short HCA training on an embedded local Ray
#   make test    the test suite (what CI runs, via .ci/run)
# and the edit loop's tier (markers in pyproject.toml, README "Tests"):
#   make test-fast   every test not marked learning, cluster, benchmark or slow
#   make test-slow   only those
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch first and pinned: 2.13.0 is the CPU wheel; a looser spec pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $@

SLOW_TIERS := learning or cluster or benchmark or slow
# Two pytest-xdist workers, one test file each at a time (module-level caches such as
# test_learning's A2C references stay in one process): most tests train with one torch
# thread, so a second worker uses the second core. `make test PARALLEL=` runs serially.
PARALLEL ?= -n 2 --dist loadfile

.PHONY: setup train test test-fast test-slow
setup: $(BIN)/.installed

train: $(BIN)/.installed
	$(BIN)/hca-rllib train --env CartPole-v1 --stop-timesteps 100000 --output runs/quickstart/$(shell date +%Y%m%d-%H%M%S)

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q $(PARALLEL)

test-fast: $(BIN)/.installed
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not ($(SLOW_TIERS))"

test-slow: $(BIN)/.installed
	$(BIN)/python -m pytest -q $(PARALLEL) -m "$(SLOW_TIERS)"

# The whole suite with RLlib's own sampler and learner path as the defaults
# (HCA_RLLIB_PATHS=rllib: every config not naming a path takes RLlib's runner and
# learner connectors). Not part of `make test`; `make test-rllib-paths TIER=fast` for the
# fast tier only.
test-rllib-paths: $(BIN)/.installed
	HCA_RLLIB_PATHS=rllib $(BIN)/python -m pytest -q $(PARALLEL) $(if $(filter fast,$(TIER)),-m "not ($(SLOW_TIERS))",)
