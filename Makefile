# Two commands do everything on a fresh machine with Python 3:
#   make demo   instruments a small workload and prints its metrics (console exporter)
#   make test   sets up, then runs lint, types, every test, two cells of the version
#               matrix, a benchmark smoke run and the docs build
#   make matrix every cell of the version matrix (noxfile.py)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test setup servers lint typecheck unit lowest-oldest latest-newest matrix stress \
	bench bench-smoke docs clean

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
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/ci.yml

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest

# The version matrix (noxfile.py): the unit tests with the dependencies at their
# lowest allowed versions (constraints/lowest.txt) and at the latest, on Python
# 3.10-3.13 (pyenv's are found; a Python that is missing is skipped, except
# under CI). Venvs are kept in .nox and reinstalled only when pyproject.toml or
# the constraints change. `make test` runs two cells: the lowest versions on the
# oldest Python, with the Linux-only direct reads off so that psutil's portable
# path runs everywhere, and the latest versions on the newest Python.
lowest-oldest: $(STAMP)
	@echo "==> unit tests: lowest allowed versions, Python 3.10, direct reads off (psutil's portable path)"
	OTEL_PYTHON_PROCESS_METRICS_DIRECT_READS=false $(BIN)/nox -s "unit-3.10(lowest)"

latest-newest: $(STAMP)
	@echo "==> unit tests: latest versions, Python 3.13"
	$(BIN)/nox -s "unit-3.13(latest)"

matrix: $(STAMP)
	@echo "==> unit tests: every cell of the version matrix (lowest and latest, Python 3.10-3.13)"
	$(BIN)/nox -s unit

# The hardening tests at the sizes of the issue (minutes); `make test` runs short variants.
stress: $(STAMP)
	PROCESS_METRICS_LONG=1 $(BIN)/python -m pytest -q tests/test_properties.py \
	  tests/test_faults.py tests/test_stress.py tests/test_fork_stress.py tests/test_fork.py

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

bench-smoke: $(STAMP)
	$(BIN)/python benchmarks/run.py --smoke

docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

test: setup servers lint typecheck unit lowest-oldest latest-newest bench-smoke docs

clean:
	rm -rf $(VENV) .nox docs/_build .pytest_cache .mypy_cache .ruff_cache .hypothesis
