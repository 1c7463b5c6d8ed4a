# The two set-up commands of the README: `make demo` and `make test`.
# Each creates .venv from nothing with only Python 3.11+ on the machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_BASE := $(VENV)/.installed-base
STAMP_TEST := $(VENV)/.installed-test
PYTEST_ARGS ?=

.PHONY: demo test test-k8s k8s-binaries image lint typecheck bench clean mutation

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel

$(STAMP_BASE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[solvers,plots]"
	touch $@

# torch==2.13.0 resolves to the CPU wheel that lies on these machines.
$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[solvers,plots,kubernetes,dev,torch,ray]"
	touch $(STAMP_BASE) $@

demo: $(STAMP_BASE)
	$(BIN)/firepool demo

lint: $(STAMP_TEST)
	$(BIN)/ruff check src tests
	$(BIN)/mypy

typecheck: $(STAMP_TEST)
	$(BIN)/mypy

# The control plane's binaries are built first (once per machine, ~15 min cold on 2 cores),
# so a build failure reads as one; without `go` outside CI, tests/k8s skip.
test: $(STAMP_TEST)
	$(BIN)/ruff check src tests
	$(BIN)/mypy
	if command -v go >/dev/null || [ "$${CI:-}" = true ]; then bash tools/k8s/build.sh >/dev/null && bash tools/k8s/build-node.sh >/dev/null; fi
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The Kubernetes tests alone, against the session's own control plane (built once per machine
# by tools/k8s/build.sh) or the cluster FIREPOOL_TEST_KUBECONFIG names. `make test` runs them too.
test-k8s: $(STAMP_TEST)
	$(BIN)/python -m pytest -m k8s tests/k8s $(PYTEST_ARGS)

# The test cluster's binaries, built from Go modules into ~/.cache/firepool/k8s (not the tree).
k8s-binaries:
	bash tools/k8s/build.sh
	bash tools/k8s/build-node.sh

# The pool base image as an OCI archive, built here without docker or a registry (the agent,
# this interpreter and what it loads; config from deploy/docker/pool-base.Dockerfile). A node
# loads it with `ctr -n k8s.io images import build/pool-base.oci.tar` (docs/kubernetes.md).
image: $(STAMP_BASE)
	$(BIN)/firepool image build --output build/pool-base.oci.tar

# Mutation testing of the control plane's decision modules (not part of `make test`): one
# module at a time, one worker, then the score per file (docs/testing.md). ~6 min idle.
MUTATE := firepool.control.admission firepool.control.budgets firepool.control.dispatch \
	firepool.scheduling.utility firepool.control.scaler
mutation: $(STAMP_TEST)
	rm -rf mutants
	for module in $(MUTATE); do \
		$(BIN)/mutmut run --max-children 1 "$$module*" > /dev/null || exit 1; \
	done
	$(BIN)/python tools/mutation_score.py

clean:
	rm -rf mutants $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
