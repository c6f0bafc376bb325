"""The documentation builds without warnings, and its generated pages tell the truth.

The reference tables are generated while the docs build (``docs/_ext``); these
tests check the built HTML against the package, and the migration table
against the real peer, ``opentelemetry-instrumentation-system-metrics``.
"""

from __future__ import annotations

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


def text_of(page: Path) -> str:
    """The visible text of an HTML page, whitespace collapsed."""
    raw = re.sub(r"<(script|style)\b.*?</\1>", " ", page.read_text(), flags=re.DOTALL)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", raw)).split())


def squash(text: str) -> str:
    return " ".join(text.split())


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
        assert page.count(heading) == 1, f"{metric.name} is not in the reference exactly once"
    text = text_of(built / "metrics.html")
    for metric in METRICS:
        assert process_docs.prometheus_name(metric) in text
        assert squash(metric.description) in text
        assert squash(cost_of(metric)) in text
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
