# Two commands do everything on a fresh machine with Python 3:
#   make demo   instruments a small workload and prints its metrics (console exporter)
#   make test   sets up, then runs lint, types, every test, three cells of the version
#               matrix, the quick compatibility cell, a benchmark smoke run, the docs
#               build and a check of the built docs in a headless browser
#   make matrix every cell of the version matrix (noxfile.py)
#   make compat other projects' test suites without the package and with it (hours)
#   make check  the edit-test loop: lint, types and the unit tests that need no servers
# `make test` also needs apt-get, dpkg-deb and the Debian archive (README, "Two commands").
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# A passing run reads green: each pytest run's skip reasons and the tracebacks of
# its expected failures go to a file in $(TEST_LOGS) (tests/conftest.py), named at
# the end of that run and of `make test`; failures, errors and warnings stay.
TEST_LOGS := $(abspath .test-logs)
export PROCESS_TESTS_LOG_DIR := $(TEST_LOGS)
# One line before each phase of `make test`, so that the log says what runs.
,      := ,
say     = @printf '\n==> %s\n' "$(1)"

.PHONY: demo test check setup servers pythons browser lint typecheck unit lowest-oldest latest-newest \
	free-threaded matrix stress bench bench-app bench-smoke docs docs-render clean \
	mutants mutants-score compat compat-quick

$(STAMP): pyproject.toml
	$(call say,setup: $(VENV) with the otlp$(,) test and docs extras)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[otlp,test,docs]'
	touch $(STAMP)

setup: $(STAMP)

# `make demo` has a small venv of its own: the package and the SDK, whose console
# exporter it prints with; wheels only, so that no C compiler is needed
# (tests/test_demo_env.py checks what it installs).
DEMO_VENV         ?= .venv-demo
DEMO_REQUIREMENTS := -e . 'opentelemetry-sdk>=1.28,<2'

$(DEMO_VENV)/.installed: pyproject.toml
	$(call say,demo setup: $(DEMO_VENV) with the package and opentelemetry-sdk (wheels only))
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
	  --only-binary=:all: $(DEMO_REQUIREMENTS)
	touch $@

demo: $(DEMO_VENV)/.installed
	$(DEMO_VENV)/bin/python examples/console_demo.py

servers:
	$(call say,real servers for the end-to-end tests (scripts/get-servers.sh))
	bash scripts/get-servers.sh

# Pythons that pyenv lacks (scripts/get-pythons.sh): 3.14 and 3.15 from Debian sid, and a
# free-threaded 3.13t built from source. One `VERSION PATH` line each; cached in
# .cache/pythons (PYTHONS_CACHE_DIR), where noxfile.py finds them.
pythons:
	$(call say,Pythons 3.14$(,) 3.15 and a free-threaded 3.13t (scripts/get-pythons.sh))
	bash scripts/get-pythons.sh

browser:
	$(call say,headless browser for the docs check (scripts/get-browser.sh))
	bash scripts/get-browser.sh

lint: $(STAMP)
	$(call say,lint (ruff))
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/ci.yml

typecheck: $(STAMP)
	$(call say,types (mypy --strict))
	$(BIN)/mypy

# The edit-test loop (CONTRIBUTING.md): lint, types, the README's generated blocks and the
# unit tests that need no server (the examples and the supervisor tests run gunicorn, uvicorn,
# Celery and uWSGI), browser or other Python; not the hardening tests, nor the benchmarks' own
# runs; the property tests at a fifth of their examples; in two pytest processes side by side
# (scripts/check_tests.py). `make test` stays the full gate, and what CI runs.
CHECK_LEAVES_OUT := --ignore=tests/e2e --ignore=tests/test_docs_render.py \
	--ignore=tests/test_pythons.py --ignore=tests/test_stress.py --ignore=tests/test_fork_stress.py \
	--ignore=tests/test_examples.py --ignore=tests/test_children_gunicorn.py \
	--ignore=tests/test_runtime_benchmarks.py

check: $(STAMP)
	$(call say,check: lint$(,) types$(,) the README's generated blocks rewritten$(,) unit tests (no servers$(,) browser or other Pythons))
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python docs/_ext/readme_blocks.py
	PATH="$(abspath $(BIN)):$$PATH" PROCESS_METRICS_QUICK=1 $(BIN)/python scripts/check_tests.py \
		$(CHECK_LEAVES_OUT)

# Every test but the browser check of the built docs, which `docs-render` runs.
unit: $(STAMP)
	$(call say,unit and end-to-end tests (Python $(shell $(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)))
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest --ignore=tests/test_docs_render.py

# The version matrix (noxfile.py): the unit tests with the dependencies at their
# lowest allowed versions (constraints/lowest.txt) and at the latest, on Python
# 3.10-3.15 and the free-threaded 3.13t (pyenv's and `make pythons`' are found;
# a Python that is missing is skipped, except under CI). Venvs are kept in .nox
# and reinstalled only when pyproject.toml or the constraints change. `make test`
# runs three cells: the lowest versions on the oldest Python, with the Linux-only
# direct reads off so that psutil's portable path runs everywhere, the latest
# versions on the newest Python, and the latest on the free-threaded build.
lowest-oldest: $(STAMP)
	$(call say,unit tests: lowest allowed versions$(,) Python 3.10$(,) direct reads off (psutil's portable path))
	OTEL_PYTHON_PROCESS_METRICS_DIRECT_READS=false $(BIN)/nox -s "unit-3.10(lowest)"

latest-newest: $(STAMP) pythons
	$(call say,unit tests: latest versions$(,) Python 3.15)
	$(BIN)/nox -s "unit-3.15(latest)"

free-threaded: $(STAMP) pythons
	$(call say,unit tests: latest versions$(,) free-threaded Python 3.13t)
	$(BIN)/nox -s "unit-3.13t(latest)"

matrix: $(STAMP) pythons
	$(call say,unit tests: every cell of the version matrix (lowest and latest$(,) Python 3.10-3.15 and 3.13t))
	$(BIN)/nox -s unit

# The hardening tests at the sizes of the issue (minutes); `make test` runs short variants.
stress: $(STAMP)
	PROCESS_METRICS_LONG=1 $(BIN)/python -m pytest -q tests/test_properties.py \
	  tests/test_faults.py tests/test_stress.py tests/test_fork_stress.py tests/test_fork.py

# Other projects' test suites without the package and with it, every option on
# (scripts/compat.py, docs/compatibility.md): CPython's regression tests on every Python
# of the matrix, and the pytest suites of Flask, Starlette and anyio from their source
# distributions. It fails on a test that fails only with the package and on a warning
# the package logs. `compat-quick` is the cell of `make test`: the three suites that found
# faults (test_signal, test_threading, test_asyncio), on this venv's Python, in minutes;
# `make compat` runs the rest (hours on 2 cores), then those three again with each choice
# option at its other value. Output under .cache/compat/runs.
compat: $(STAMP) pythons
	$(call say,compatibility: CPython's suites and three frameworks' with and without the package)
	$(BIN)/python scripts/compat.py; status=$$?; \
	$(BIN)/python scripts/compat.py --quick --other-choices --out .cache/compat/runs-other-choices \
	  && exit $$status

compat-quick: $(STAMP)
	$(call say,compatibility: test_signal$(,) test_threading and test_asyncio with and without the package)
	$(BIN)/python scripts/compat.py --quick

# Mutation testing (mutmut) of src/ with the unit tests: a fresh run, then the
# score and where the survivors cluster. Not part of `make test`: hours on 2
# CPUs (docs/reliability.md). `$(BIN)/mutmut run` alone resumes a run,
# `$(BIN)/mutmut run NAME...` checks chosen mutants, and `$(BIN)/mutmut browse`
# shows each survivor.
mutants: $(STAMP)
	rm -rf mutants
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/mutmut run
	$(BIN)/python scripts/mutation_score.py

mutants-score: $(STAMP)
	$(BIN)/python scripts/mutation_score.py --list

# The full run: the cost per collection (about 12 minutes on 2 quiet cores), the
# instructions the package costs the application, between collections and per
# collection (benchmarks/instructions.py, about 40 minutes), and the heap; results,
# plots (the bench extra) and both docs pages. `bench-app` runs only the second part;
# `benchmarks/run.py --no-app-cost` skips the heap and the application-cost page.
# Valgrind counts the instructions (Debian's valgrind package; under CI=true, a run
# without a counter fails).
$(VENV)/.installed-bench: $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $@

bench: $(VENV)/.installed-bench
	$(BIN)/python benchmarks/run.py

bench-app: $(VENV)/.installed-bench
	$(BIN)/python benchmarks/app_cost.py

bench-smoke: $(VENV)/.installed-bench
	$(call say,benchmark smoke run (every phase a few times; asserts exact counts and instructions))
	$(BIN)/python benchmarks/run.py --smoke

docs: $(STAMP)
	$(call say,docs (sphinx$(,) warnings are errors))
	$(BIN)/sphinx-build -W --keep-going -q -b html docs docs/_build/html

# The pages that `docs` built, in headless Chromium at 1280 and 390 px.
docs-render: $(STAMP) docs
	$(call say,docs in a browser (headless Chromium$(,) 1280 and 390 px))
	DOCS_HTML=docs/_build/html $(BIN)/python -m pytest -q tests/test_docs_render.py

test: setup servers pythons browser lint typecheck unit lowest-oldest latest-newest free-threaded \
	compat-quick bench-smoke docs docs-render
	@printf '\n==> make test passed; skip reasons and expected failures: %s/\n' "$(TEST_LOGS)"

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(TEST_LOGS) .nox docs/_build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis mutants
