# Two commands do everything on a fresh machine with Python 3:
#   make demo   instruments a small workload and prints its metrics (console exporter)
#   make test   sets up, then runs lint, types, every test, a benchmark smoke run and the docs build
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test setup servers lint typecheck unit bench bench-smoke docs clean

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

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

bench-smoke: $(STAMP)
	$(BIN)/python benchmarks/run.py --smoke

docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

test: setup servers lint typecheck unit bench-smoke docs

clean:
	rm -rf $(VENV) docs/_build .pytest_cache .mypy_cache .ruff_cache
