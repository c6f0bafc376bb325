# Two commands do everything on a fresh machine with Python 3:
#   make demo   instruments a small workload and prints its metrics (console exporter)
#   make test   sets up, then runs lint, types, every test, a benchmark smoke run and the docs build
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test setup servers lint typecheck unit compat stress bench bench-smoke docs clean \
	mutants mutants-score

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[otlp,test,docs]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/console_demo.py

servers:
	bash scripts/get-servers.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest

# The oldest supported Python (3.10), where the machine has it: the unit tests only
# (the version-neutral stress tests, 40 s, run once, in `unit`).
compat:
	@py=$$(for c in python3.10 $$HOME/.pyenv/versions/3.10*/bin/python3.10; do \
	  "$$c" -c 'import sys' >/dev/null 2>&1 && echo "$$c" && break; done); \
	if [ -n "$$py" ]; then \
	  "$$py" -m venv .venv-py310 && \
	  .venv-py310/bin/python -m pip install --quiet -e '.[otlp]' pytest 'hypothesis>=6.100' && \
	  .venv-py310/bin/python -m pytest -q -p no:cacheprovider --ignore=tests/e2e \
	    --ignore=tests/test_docs.py --ignore=tests/test_examples.py \
	    --ignore=tests/test_stress.py; \
	else echo "compat: python3.10 not found, skipped"; fi

# The hardening tests at the sizes of the issue (minutes); `make test` runs short variants.
stress: $(STAMP)
	PROCESS_METRICS_LONG=1 $(BIN)/python -m pytest -q tests/test_properties.py \
	  tests/test_faults.py tests/test_stress.py tests/test_fork_stress.py tests/test_fork.py

# Mutation testing (mutmut) of src/ with the unit tests: a fresh run, then the
# score and where the survivors cluster. Not part of `make test`: about 20
# minutes on 2 CPUs. `$(BIN)/mutmut run` alone resumes a run; `$(BIN)/mutmut
# browse` shows each survivor.
mutants: $(STAMP)
	rm -rf mutants
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/mutmut run
	$(BIN)/python scripts/mutation_score.py

mutants-score: $(STAMP)
	$(BIN)/python scripts/mutation_score.py --list

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

bench-smoke: $(STAMP)
	$(BIN)/python benchmarks/run.py --smoke

docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

test: setup servers lint typecheck unit compat bench-smoke docs

clean:
	rm -rf $(VENV) .venv-py310 docs/_build .pytest_cache .mypy_cache .ruff_cache .hypothesis mutants
