"""The documentation builds without warnings, and its generated pages tell the truth.

The reference tables are generated while the docs build (``docs/_ext``); these
tests check the built HTML against the package, and the migration table
against the real peer, ``opentelemetry-instrumentation-system-metrics``.
"""

from __future__ import annotations

import ast
import html
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from opentelemetry.instrumentation.process import ProcessMetricsOptions
from opentelemetry.instrumentation.process.catalog import attributes_of, cost_of
from opentelemetry.instrumentation.process.environment import ENV_VARS
from opentelemetry.instrumentation.process.metrics import METRICS, METRICS_BY_NAME

from .support.loading import load_file

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent

pytest.importorskip("sphinx", reason="the docs extra is not installed")


def load(path: Path) -> ModuleType:
    return load_file(path, f"docs_{path.stem}")


migration_map = load(DOCS / "_ext" / "migration_map.py")
process_docs = load(DOCS / "_ext" / "process_docs.py")
readme_blocks = load(DOCS / "_ext" / "readme_blocks.py")


def text_of(page: Path) -> str:
    """The visible text of an HTML page, whitespace collapsed."""
    raw = re.sub(r"<(script|style)\b.*?</\1>", " ", page.read_text(), flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", raw)).split())


def squash(text: str) -> str:
    return " ".join(text.split())


def as_prose(text: str) -> str:
    """``text`` as a built page shows it in prose: squashed, an apostrophe curled."""
    return squash(text).replace("'", "\u2019")


@pytest.fixture(scope="module")
def built() -> Iterator[Path]:
    """A fresh build, with warnings as errors, as CI does it."""
    with tempfile.TemporaryDirectory() as out:
        args = [str(DOCS), out]
        done = subprocess.run(
            [str(BIN / "sphinx-build"), "-W", "--keep-going", "-E", "-q", "-b", "html", *args],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert done.returncode == 0, f"docs build failed:\n{done.stdout}\n{done.stderr}"
        assert done.stderr == "", f"the build wrote to stderr:\n{done.stderr}"
        yield Path(out)


def test_every_page_is_built(built: Path) -> None:
    pages = {p.stem for p in DOCS.glob("*.md")}
    assert {
        "getting-started",
        "configuration",
        "metrics",
        "design",
        "migration",
        "benchmarks",
        "containers",
        "prefork",
        "troubleshooting",
    } <= pages
    for page in pages:
        assert (built / f"{page}.html").is_file(), page
    assert (built / "_static" / "snapshot.svg").is_file()


def test_metric_reference_has_every_metric_once(built: Path) -> None:
    page = (built / "metrics.html").read_text()
    for metric in METRICS:
        heading = (
            '<strong><code class="docutils literal notranslate"><span class="pre">'
            f"{metric.name}</span></code></strong>"
        )
        assert page.count(heading) == 1, (
            f"{metric.name} is not in the reference exactly once: a new group "
            f"({metric.group!r}) goes in a `:groups:` line of docs/metrics.md"
        )
    text = text_of(built / "metrics.html")
    for metric in METRICS:
        assert process_docs.prometheus_name(metric) in text
        assert as_prose(metric.description) in text
        assert as_prose(cost_of(metric)) in text
        for attribute in attributes_of(metric):
            assert attribute in text


def test_metric_reference_says_what_turns_each_metric_on(built: Path) -> None:
    text = text_of(built / "metrics.html")
    assert text.count("on with cpu_frequency=True") == sum(
        m.option == "cpu_frequency" for m in METRICS
    )
    assert text.count("on with per_thread=True") == sum(m.option == "per_thread" for m in METRICS)
    exact = sum(m.exact_only for m in METRICS)
    assert text.count("on only when its exact name is in include") == exact == 1


def test_configuration_reference_shows_every_option_and_real_errors(built: Path) -> None:
    text = text_of(built / "configuration.html")
    for var in ENV_VARS.values():
        assert var in text
    defaults = ProcessMetricsOptions()
    assert f"max_thread_series int {defaults.max_thread_series!r}" in text
    namespace = {
        "ProcessMetricsOptions": ProcessMetricsOptions,
        "ProcessInstrumentor": process_docs.ProcessInstrumentor,
    }
    for case in process_docs.ERROR_CASES:
        with pytest.raises(ValueError) as caught:
            eval(case, namespace)  # the same constant cases the docs ran
        assert squash(f"ValueError: {caught.value}") in text, case
    assert "using the default" in text
    # The one rule for words, from the forms, as the README states it.
    rule = re.sub(r"\*\*|`|\s", "", readme_blocks.spelling_rule())
    assert rule in re.sub(r"\s", "", text)  # text_of puts a blank around each code span


def test_migration_targets_are_rows_of_the_metric_table() -> None:
    olds = [move.old for move in migration_map.MOVES]
    assert len(olds) == len(set(olds)), "a peer metric is mapped twice"
    for move in migration_map.MOVES:
        assert bool(move.new) or not move.new_attributes
        for name in move.new:
            metric = METRICS_BY_NAME[name]
            assert set(move.new_attributes) <= set(attributes_of(metric)), (move.old, name)


PEER_SCRIPT = """
import json
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor

reader = InMemoryMetricReader()
provider = MeterProvider(metric_readers=[reader])
SystemMetricsInstrumentor().instrument(meter_provider=provider)
found = {}
for _ in range(2):
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                keys = found.setdefault(m.name, set())
                for p in m.data.data_points:
                    keys.update(p.attributes)
print(json.dumps({k: sorted(v) for k, v in found.items()}))
"""


def test_migration_table_matches_what_the_peer_emits() -> None:
    pytest.importorskip("opentelemetry.instrumentation.system_metrics")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", PEER_SCRIPT],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    emitted: dict[str, list[str]] = json.loads(done.stdout)
    moves = {move.old: move for move in migration_map.MOVES}
    assert set(emitted) <= set(moves), f"not in the migration table: {set(emitted) - set(moves)}"
    missing = {name for name in set(moves) - set(emitted) if not moves[name].may_be_absent}
    assert not missing, f"the peer does not emit {missing}"
    for name, keys in emitted.items():
        assert set(keys) == set(moves[name].old_attributes), name


def test_migration_page_has_every_move(built: Path) -> None:
    text = text_of(built / "migration.html")
    for move in migration_map.MOVES:
        assert move.old in text
    assert "cpu.logical_number" in text and "cpu.mode" in text


def test_dashboard_page_lists_every_query(built: Path) -> None:
    text = text_of(built / "examples.html")
    dashboard = json.loads((ROOT / "examples/grafana/process-metrics-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if "expr" in t]
    assert exprs
    for expr in exprs:
        assert squash(expr) in text


def test_documented_hardening_figures_are_the_code_constants() -> None:
    from opentelemetry.instrumentation.process.faultlog import FAULT_LOG_PERIOD
    from opentelemetry.instrumentation.process.instruments import SERIES_WARNING_THRESHOLD
    from opentelemetry.instrumentation.process.sdk_fork_guard import FORK_WAIT_SECONDS

    period = f"{FAULT_LOG_PERIOD:.0f} s"
    for page in ("reliability", "troubleshooting", "design"):
        assert period in squash((DOCS / f"{page}.md").read_text()), page
    assert f"at most {FORK_WAIT_SECONDS:.0f} s" in squash((DOCS / "prefork.md").read_text())
    for page in ("reliability", "troubleshooting", "design"):
        assert str(SERIES_WARNING_THRESHOLD) in (DOCS / f"{page}.md").read_text(), page


# --- versions, counts and commands, against their sources ----------------------------
#
# Each figure below is read from where it is decided (noxfile.py, the Makefile,
# pyproject.toml, constraints/lowest.txt, the CI workflow, the benchmark page),
# never from a second list kept by hand.

GUIDES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "examples" / "README.md"]
PAGES = [*GUIDES, *sorted(DOCS.glob("*.md"))]
NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _noxfile_constant(name: str) -> Any:
    """A literal assigned at the top of noxfile.py."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"noxfile.py assigns no {name}")


def _version_key(python: str) -> tuple[int, ...]:
    return tuple(int(n) for n in python.rstrip("t").split("."))


def _pythons() -> tuple[str, str, list[str]]:
    """The oldest and newest Python of the matrix, and its free-threaded builds."""
    pythons: list[str] = _noxfile_constant("PYTHONS")
    free: set[str] = _noxfile_constant("FREE_THREADED")
    gil = sorted((p for p in pythons if p not in free), key=_version_key)
    return gil[0], gil[-1], sorted(free, key=_version_key)


def _make_test_cells() -> list[tuple[str, str]]:
    """The matrix cells ``make test`` runs: (python, deps) of each nox call of its phases."""
    makefile = (ROOT / "Makefile").read_text()
    phases = re.search(r"^test: (.*?)\n\t", makefile, re.MULTILINE | re.DOTALL)
    assert phases is not None
    cells = []
    for target in phases.group(1).replace("\\\n", " ").split():
        recipe = re.search(rf"^{re.escape(target)}:.*?\n((?:\t.*\n)+)", makefile, re.MULTILINE)
        if recipe is not None:
            cells += re.findall(r'nox -s "unit-([\d.]+t?)\((\w+)\)"', recipe.group(1))
    return cells


def test_the_pythons_the_docs_name_are_the_matrixs() -> None:
    oldest, newest, free = _pythons()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'requires-python = ">={oldest}"' in pyproject
    gil = [p for p in _noxfile_constant("PYTHONS") if p not in free]
    for python in gil:
        assert f'"Programming Language :: Python :: {python}"' in pyproject, python
    readme = squash((ROOT / "README.md").read_text())
    assert f"Python {oldest} or newer." in readme
    assert f"| Python | {oldest} | {newest} |" in readme
    assert f"on every Python from {oldest} to {newest}" in readme
    assert f"on the free-threaded {' and '.join(free)} at the latest releases" in readme
    started = squash((DOCS / "getting-started.md").read_text())
    assert f"Python {oldest} to {newest}, and the free-threaded (no GIL) {' and '.join(free)};" in (
        started
    )
    assert f"CPython {oldest} to {newest}" in squash((DOCS / "pythons.md").read_text())
    # No page names a range of Pythons that the matrix does not test.
    for page in PAGES:
        for low, high in re.findall(r"Python (3\.\d+) to (3\.\d+)", squash(page.read_text())):
            assert (low, high) == (oldest, newest), (page.name, low, high)


def test_the_lowest_versions_the_docs_name_are_the_constraints() -> None:
    pins = dict(
        line.split("==")
        for line in (ROOT / "constraints" / "lowest.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    api, sdk = pins["opentelemetry-api"], pins["opentelemetry-sdk"]
    assert api == sdk
    short = api.removesuffix(".0")
    instrumentation, psutil_pin = pins["opentelemetry-instrumentation"], pins["psutil"]
    readme = squash((ROOT / "README.md").read_text())
    assert f"| `opentelemetry-api`, `opentelemetry-sdk` | {short} |" in readme
    assert f"| `opentelemetry-instrumentation` | {instrumentation} |" in readme
    assert f"| `psutil` | {psutil_pin} |" in readme
    started = squash((DOCS / "getting-started.md").read_text())
    assert f"`opentelemetry-api` and `opentelemetry-sdk` {short} or newer" in started
    assert f"`opentelemetry-instrumentation` {instrumentation} or newer" in started
    assert f"`psutil` {psutil_pin} or newer" in started


def test_make_test_runs_the_cells_the_docs_say() -> None:
    cells = _make_test_cells()
    oldest, newest, free = _pythons()
    assert cells == [(oldest, "lowest"), (newest, "latest"), (free[0], "latest")]
    count = NUMBER_WORDS[len(cells)]
    makefile = squash(re.sub(r"^# ?", "", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
    assert f"{count} cells of the version matrix" in makefile
    assert f"`make test` runs {count} cells" in makefile
    started = squash((DOCS / "getting-started.md").read_text())
    assert (
        f"`make test` {count} of them: the lowest versions on {oldest}, the latest on "
        f"{newest} and the latest on {free[0]})" in started
    )
    pythons = squash((DOCS / "pythons.md").read_text())
    assert (
        f"`make test` runs {count} cells: the lowest versions on {oldest}, the latest on "
        f"{newest} and the latest on {free[0]}." in pythons
    )
    readme = squash((ROOT / "README.md").read_text())
    assert f"{count.capitalize()} phases are cells of the version matrix: the lowest allowed " in (
        readme
    )
    assert f"versions on Python {oldest} with" in readme
    assert f"the latest versions on Python {newest} and on the free-threaded {free[0]}" in readme


def test_the_ci_cells_the_readme_names_are_the_workflows() -> None:
    oldest, newest, free = _pythons()
    workflow = (ROOT / ".github" / "workflows" / "ci.yml").read_text()
    assert f'python: ["{oldest}", "{newest}"]' in workflow
    [threaded] = re.findall(r'python: "(3\.\d+t)"', workflow)
    assert threaded in free
    readme = squash((ROOT / "README.md").read_text())
    assert f"on Python {oldest} (lowest versions) and {newest} (latest)" in readme
    assert f"on a free-threaded {threaded}" in readme
    assert f"{threaded} in `.github/workflows/ci.yml`" in readme


def test_every_make_target_the_docs_name_exists() -> None:
    targets = set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    for page in PAGES:
        text = page.read_text()
        named = set(re.findall(r"`make ([a-z][\w-]*)", text))
        named |= set(re.findall(r"^make ([a-z][\w-]*)", text, re.MULTILINE))  # in code blocks
        assert named <= targets, (page.name, sorted(named - targets))


REPOSITORY_ROOTS = ("src/", "tests/", "docs/", "examples/", "benchmarks/", "scripts/")
BUILT = {"docs/_build/html"}  # made by `make docs`, not kept in the repository


def test_every_repository_path_the_docs_name_exists() -> None:
    roots = (*REPOSITORY_ROOTS, "constraints/", ".github/", ".ci/")
    for page in PAGES:
        for path in re.findall(r"`([^`\s]+)`", page.read_text()):
            if not path.startswith(roots) and path not in ("noxfile.py", "Makefile"):
                continue
            path, _, test = path.rstrip(",.:").partition("::")
            if any(c in path for c in "*<") or "..." in path or path in BUILT:
                continue
            assert (ROOT / path).exists(), f"{page.name} names {path}, which does not exist"
            if test:  # a test by its pytest id: it exists in that file
                assert f"def {test.split('[')[0]}(" in (ROOT / path).read_text(), (page, test)


def test_the_semantic_conventions_version_is_the_schema_urls() -> None:
    from opentelemetry.instrumentation.process.instruments import SCHEMA_URL

    full = SCHEMA_URL.rsplit("/", 1)[1]
    short = full.removesuffix(".0")
    assert f"semantic conventions {short} and" in squash((ROOT / "README.md").read_text())
    assert f"The semantic conventions ({short})." in (DOCS / "index.md").read_text()
    assert f"`https://opentelemetry.io/schemas/{full}`" in (DOCS / "api.md").read_text()
    assert f"schema {full} |" in (DOCS / "migration.md").read_text()


def test_the_readmes_peer_figures_are_the_benchmark_pages() -> None:
    page = (DOCS / "benchmarks.md").read_text()
    row = re.search(r"^\| `peer_default` \| peer \| (\d+) \| [\d.]+ \| \d+ \| (\d+) \(", page, re.M)
    assert row is not None
    opens, calls = row.groups()
    [peer] = re.findall(r"^\| opentelemetry-instrumentation-system-metrics \| (\S+) \|", page, re.M)
    readme = squash((ROOT / "README.md").read_text())
    assert f"(version {peer} on a 2-CPU VM), one default collection made {calls} psutil " in readme
    assert f"calls and opened {opens} files" in readme


def test_the_readmes_cost_figures_are_the_benchmark_pages() -> None:
    page = (DOCS / "benchmarks.md").read_text()
    row = re.search(r"^\| `default` \| ([\d,]+) \| ([\d.]+)x \[", page, re.MULTILINE)
    assert row is not None
    micros, ratio = float(row.group(1).replace(",", "")), float(row.group(2))
    readme = squash((ROOT / "README.md").read_text())
    assert f"included, took {micros / 1000:.1f} ms in [the benchmarks]" in readme
    assert f"{ratio:.1f} times less than the peer's default." in readme
    # The refresh's own cost is the metric the README names, in the table.
    assert "`process_metrics.refresh.cpu_time`" in readme
    assert "process_metrics.refresh.cpu_time" in METRICS_BY_NAME
