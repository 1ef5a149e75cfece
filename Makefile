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

.PHONY: demo test check lint typecheck pytest pytest-fast bench clean

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
# Tests run in two worker processes (pytest-xdist): a test waits on its children most of
# the time, so two workers on two cores take about half as long. WORKERS=0: in this one.
WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(WORKERS) --dist worksteal

pytest: $(STAMP)
	$(PYTEST) $(PYTEST_ARGS)

pytest-fast: $(STAMP)
	SANDBOX_TESTS=fast $(PYTEST) $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks.bench_wire

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
