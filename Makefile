# The two commands a fresh machine needs: `make demo` (a program in a sandbox, calling the
# example host tools) and `make test` (lint, types, the whole suite, as CI runs it). Each
# creates .venv and installs what it needs. While working: `make check` (lint, types and
# the suite's fast tier, under a minute of tests on two quiet cores: tests/conftest.py).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make demo` needs the package alone: no test, lint or benchmark tools.
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test check lint typecheck pytest pytest-fast test-nonroot bench upstreams clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[mcp,agent,test,dev,bench]'
	touch $(STAMP) $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e .
	touch $(DEMO_STAMP)

# The second program fails on purpose (a call the tool denies): the demo shows how a failure
# looks, says so, and succeeds only if it failed as it should (exit code 1, kind denied).
demo: $(DEMO_STAMP)
	$(BIN)/sandbox run examples/programs/concurrent.py --tools examples/tools.py --max-calls 20
	@echo "demo: next, examples/programs/failure.py, which fails on purpose (a denied call):"
	@$(BIN)/sandbox run examples/programs/failure.py --tools examples/tools.py; \
	code=$$?; if [ $$code -eq 1 ]; then \
	  echo "demo: failure.py failed as intended (exit code 1: the program failed)"; \
	else \
	  echo "demo: failure.py should exit 1, it exited $$code" >&2; exit 1; \
	fi

test: lint typecheck pytest

check: lint typecheck pytest-fast

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# pytest exits 5 when it collects no tests; that must fail CI, not pass silently, so it is
# left as a failure here on purpose.
# Tests run in four worker processes (pytest-xdist): a test waits on its children most of
# the time, so more workers than cores still help. On two cores, the whole suite took 498 s
# with two workers and 379 s with four (same commit, same machine). WORKERS=0: in this one.
WORKERS ?= 4
PYTEST := $(BIN)/python -m pytest -n $(WORKERS) --dist worksteal

pytest: $(STAMP)
	$(PYTEST) $(PYTEST_ARGS)

pytest-fast: $(STAMP)
	SANDBOX_TESTS=fast $(PYTEST) $(PYTEST_ARGS)

# The confined, budget and hostile tests, as an ordinary user (CI: `.ci/run` makes one).
# It writes nothing into the checkout: no pytest cache, no bytecode, Hypothesis's examples
# in a temporary directory. Run as root, it would test nothing new: it refuses.
NONROOT_TESTS := tests/sandbox/test_nonroot.py tests/sandbox/test_confined.py \
	tests/sandbox/test_seccomp_confined.py tests/sandbox/test_between_runs.py \
	tests/sandbox/test_budget.py tests/sandbox/test_hostile.py \
	tests/sandbox/test_wire_hostile.py tests/sandbox/test_exit.py \
	tests/sandbox/test_program_size.py tests/sandbox/test_program_view.py \
	tests/sandbox/test_process_walls.py \
	tests/runner/test_namespaces.py tests/runner/test_relocate.py \
	tests/runner/test_landlock.py tests/runner/test_seccomp.py \
	tests/protocol/test_pipesize.py

test-nonroot: $(STAMP)
	@if [ "$$(id -u)" = 0 ]; then \
	  echo "test-nonroot: run it as an ordinary user (as root: runuser -u USER -- make test-nonroot)" >&2; \
	  exit 2; \
	fi
	scratch=$$(mktemp -d) && trap 'rm -rf "$$scratch"' EXIT && \
	PYTHONDONTWRITEBYTECODE=1 HYPOTHESIS_STORAGE_DIRECTORY=$$scratch/hypothesis \
	$(PYTEST) -p no:cacheprovider $(NONROOT_TESTS) $(PYTEST_ARGS)

# The real MCP servers tests/upstream runs programs against, at pinned versions, outside the
# checkout (tests/upstream/servers.py finds them there): three from npm (Node.js 18 or
# later) and mcp-server-time from PyPI, in a virtualenv of its own (it wants mcp 1).
UPSTREAMS ?= $(or $(SANDBOX_UPSTREAMS),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/sandbox/upstreams)
NPM_UPSTREAMS := @modelcontextprotocol/server-filesystem@2026.8.31 \
	@modelcontextprotocol/server-memory@2026.8.31 \
	@modelcontextprotocol/server-everything@2026.8.31
PYPI_UPSTREAMS := mcp-server-time==2026.10.19

upstreams:
	mkdir -p $(UPSTREAMS)
	npm install --prefix $(UPSTREAMS) --no-audit --no-fund --save-exact $(NPM_UPSTREAMS)
	test -x $(UPSTREAMS)/python/bin/python || $(PY) -m venv $(UPSTREAMS)/python
	$(UPSTREAMS)/python/bin/python -m pip install --quiet $(PYPI_UPSTREAMS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks.bench_wire

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
