# Two commands do everything on a fresh machine with Python 3:
#   make demo   instruments a small workload and prints its metrics (console exporter)
#   make test   sets up, then runs lint, types, every test, a benchmark smoke run, the docs
#               build and a check of the built docs in a headless browser
# `make test` also needs apt-get, dpkg-deb and the Debian archive (README, "Two commands").
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# One line before each phase of `make test`, so that the log says what runs.
,      := ,
say     = @printf '\n==> %s\n' "$(1)"

.PHONY: demo test setup servers browser lint typecheck unit compat stress bench bench-smoke \
	docs docs-render clean

$(STAMP): pyproject.toml
	$(call say,setup: $(VENV) with the otlp$(,) test and docs extras)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[otlp,test,docs]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/console_demo.py

servers:
	$(call say,real servers for the end-to-end tests (scripts/get-servers.sh))
	bash scripts/get-servers.sh

browser:
	$(call say,headless browser for the docs check (scripts/get-browser.sh))
	bash scripts/get-browser.sh

lint: $(STAMP)
	$(call say,lint (ruff))
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(call say,types (mypy --strict))
	$(BIN)/mypy

# Every test but the browser check of the built docs, which `docs-render` runs.
unit: $(STAMP)
	$(call say,unit and end-to-end tests (Python $(shell $(BIN)/python -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)))
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/python -m pytest --ignore=tests/test_docs_render.py

# The oldest supported Python (3.10), where the machine has it: the unit tests only
# (the version-neutral stress tests, 40 s, run once, in `unit`).
compat:
	$(call say,unit tests (Python 3.10$(,) the oldest supported))
	@py=$$(for c in python3.10 $$HOME/.pyenv/versions/3.10*/bin/python3.10; do \
	  "$$c" -c 'import sys' >/dev/null 2>&1 && echo "$$c" && break; done); \
	if [ -n "$$py" ]; then \
	  "$$py" -m venv .venv-py310 && \
	  .venv-py310/bin/python -m pip install --quiet -e '.[otlp]' pytest 'hypothesis>=6.100' && \
	  .venv-py310/bin/python -m pytest -q -p no:cacheprovider --ignore=tests/e2e \
	    --ignore=tests/test_docs.py --ignore=tests/test_docs_render.py \
	    --ignore=tests/test_examples.py --ignore=tests/test_stress.py; \
	else echo "compat: python3.10 not found, skipped"; fi

# The hardening tests at the sizes of the issue (minutes); `make test` runs short variants.
stress: $(STAMP)
	PROCESS_METRICS_LONG=1 $(BIN)/python -m pytest -q tests/test_properties.py \
	  tests/test_faults.py tests/test_stress.py tests/test_fork_stress.py tests/test_fork.py

# The full run (about 12 minutes on 2 cores): results, plots (the bench extra) and the docs page.
$(VENV)/.installed-bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $@

bench: $(VENV)/.installed-bench
	$(BIN)/python benchmarks/run.py

bench-smoke: $(STAMP)
	$(call say,benchmark smoke run (every phase a few times; asserts exact counts only))
	$(BIN)/python benchmarks/run.py --smoke

docs: $(STAMP)
	$(call say,docs (sphinx$(,) warnings are errors))
	$(BIN)/sphinx-build -W --keep-going -b html docs docs/_build/html

# The pages that `docs` built, in headless Chromium at 1280 and 390 px.
docs-render: $(STAMP) docs
	$(call say,docs in a browser (headless Chromium$(,) 1280 and 390 px))
	DOCS_HTML=docs/_build/html $(BIN)/python -m pytest -q tests/test_docs_render.py

test: setup servers browser lint typecheck unit compat bench-smoke docs docs-render

clean:
	rm -rf $(VENV) .venv-py310 docs/_build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis
