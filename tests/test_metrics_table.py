"""The metric table drives registration: every row is checked here."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor, ProcessMetricsOptions
from opentelemetry.instrumentation.process.catalog import attributes_of, platforms_of, supported
from opentelemetry.instrumentation.process.metrics import EXTENSION_PREFIX, METRICS, Kind, Metric
from opentelemetry.instrumentation.process.snapshot import SnapshotCache
from opentelemetry.instrumentation.process.sources import SOURCES
from opentelemetry.instrumentation.process.sources.base import Sample

from .conftest import collect, points
from .support.semconv import (
    check_shape,
    needs_current_semconv,
    semconv_attributes,
    semconv_shapes,
)

# The histograms of events report once an event happened: tests/test_stalls.py makes them.
DEFAULTS = [m for m in METRICS if m.default and supported(m) and m.kind is not Kind.HISTOGRAM]

# Names the semantic conventions deprecated; none may be emitted.
DEPRECATED = {
    "process.open_file_descriptor.count",
    "process_threads",
    "process.runtime.cpython.cpu.utilization",
}
DEPRECATED_ATTRIBUTES = {"state", "type", "direction", "process.cpu.state", "cpu"}


@needs_current_semconv
def test_semconv_metrics_have_the_attributes_of_the_semantic_conventions() -> None:
    known = semconv_attributes()
    for m in METRICS:
        if not m.extension:
            assert set(attributes_of(m)) <= set(known), (m.name, set(attributes_of(m)) - set(known))


@needs_current_semconv
def test_semconv_metrics_have_the_kind_and_unit_of_the_semantic_conventions() -> None:
    ours = [m for m in METRICS if not m.extension]
    assert len(ours) >= 37
    shapes = semconv_shapes()
    for m in ours:
        assert m.name in shapes, f"{m.name} is not in the installed semantic conventions"
        assert (m.kind, m.unit) == shapes[m.name], m.name


def test_table_is_consistent() -> None:
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    for m in METRICS:
        assert re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)+", m.name), m.name
        assert m.name not in DEPRECATED
        assert not set(attributes_of(m)) & DEPRECATED_ATTRIBUTES, m.name
        assert m.description.endswith("."), m.name
        if m.extension:
            # Extensions are this package's own names: never under a semconv namespace.
            assert m.name.startswith(EXTENSION_PREFIX)
            assert "extension" in m.description


@pytest.mark.parametrize("metric", DEFAULTS, ids=lambda m: m.name)
def test_default_metric_is_reported_with_its_shape(
    metric: Metric, instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument()
    reported = collect(reader)
    assert metric.name in reported
    check_shape(metric, reported[metric.name])


def test_per_cpu_adds_logical_number(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    import psutil

    instrument()
    aggregated = collect(reader)["system.cpu.time"]
    assert all(dict(a).keys() == {"cpu.mode"} for a in points(aggregated))
    ProcessInstrumentor().uninstrument()
    instrument(per_cpu=True)
    per_cpu = collect(reader)["system.cpu.time"]
    numbers = {dict(a)["cpu.logical_number"] for a in points(per_cpu)}
    assert numbers == set(range(psutil.cpu_count()))
    modes = {dict(a)["cpu.mode"] for a in points(per_cpu)}
    assert {"user", "system", "idle"} <= modes
    assert modes <= {"user", "system", "nice", "idle", "iowait", "interrupt", "steal"}


def test_entry_point_is_declared() -> None:
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="opentelemetry_instrumentor") if ep.name == "process"]
    assert len(found) == 1
    assert found[0].value == "opentelemetry.instrumentation.process:ProcessInstrumentor"
    assert found[0].load() is ProcessInstrumentor
    assert list(ProcessInstrumentor().instrumentation_dependencies()) == []


def test_platform_gaps_are_declared_where_the_value_comes_from() -> None:
    """Windows has no getrusage(2) and no RLIMIT_NOFILE: the table says so, by source field."""
    by_name = {m.name: m for m in METRICS}
    for name in ("process.paging.faults", "process_metrics.unix.file_descriptor.limit"):
        assert "windows" not in platforms_of(by_name[name]), name
        assert "linux" in platforms_of(by_name[name]) and "darwin" in platforms_of(by_name[name])
    # The other fields of the same sources stay on every platform.
    assert "windows" in platforms_of(by_name["process.cpu.time"])
    assert "windows" in platforms_of(by_name["system.cpu.logical.count"])


# (what is wrong with an added row, the error the import-time check raises)
BAD_ROWS = [
    ({"name": "process.cpu.time"}, "metric table: a name is declared twice"),
    (
        {"name": "test.bad", "source": "nope"},
        "metric table: test.bad names an unknown source 'nope'",
    ),
    (
        {"name": "test.bad", "field": "nope"},
        "metric table: test.bad reads field 'nope', which source 'process_rusage' does not declare",
    ),
    (
        {"name": "test.bad", "option": "per_cpu"},
        "metric table: test.bad names an unknown option 'per_cpu'",
    ),
]


def test_every_key_of_a_reading_is_of_the_type_its_source_declares() -> None:
    """Each point's attributes come by name from its key; the table is checked against it."""
    everything = ProcessMetricsOptions(
        per_thread=True, per_cpu=True, cpu_frequency=True, saturation=True,
        gc_pause_histogram=True, event_loop=True,
    )  # fmt: skip
    seen = set()
    for by in ("thread", "name"):
        options = dataclasses.replace(everything, thread_series_by=by)
        cache = SnapshotCache(options, SOURCES)
        try:
            readings = cache.snapshot().readings
        finally:
            cache.close()
        for name, reading in readings.items():
            declared = SOURCES[name].fields
            for field, value in reading.items():
                key_type = declared[field]
                if key_type is None:
                    assert isinstance(value, (int, float)), (name, field, value)
                    continue
                if isinstance(value, tuple):  # events: each with a key of the field's type
                    assert all(isinstance(e, Sample) for e in value), (name, field, value)
                    value = {e.key: e.value for e in value}
                assert isinstance(value, Mapping), (name, field, value)
                for key in value:
                    assert type(key) is key_type, (name, field, key)
                    assert len(key) == len(key_type.names), (name, field, key)
                seen.add((name, field))
    assert ("process_threads", "cpu_time") in seen and ("system_cpu", "time") in seen


@pytest.mark.parametrize(("change", "error"), BAD_ROWS, ids=lambda x: str(x)[:30])
def test_a_table_row_that_does_not_resolve_is_refused_at_import(
    change: dict[str, Any], error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.instrumentation.process import catalog, selection
    from opentelemetry.instrumentation.process import metrics as table

    def check() -> None:
        catalog.check_table(table.METRICS)
        selection.check_gates(table.METRICS)

    check()  # the real table resolves
    for option in (None, "cpu_frequency"):  # no option, and a gating one, are fine
        good = METRICS[0]._replace(name="test.good", option=option)
        monkeypatch.setattr(table, "METRICS", (*METRICS, good))
        monkeypatch.setattr(table, "METRICS_BY_NAME", {m.name: m for m in table.METRICS})
        check()
    bad = METRICS[0]._replace(**change)
    monkeypatch.setattr(table, "METRICS", (*METRICS, bad))
    monkeypatch.setattr(table, "METRICS_BY_NAME", {m.name: m for m in table.METRICS})
    with pytest.raises(RuntimeError, match=f"^{re.escape(error)}$"):
        check()


def test_a_source_id_never_reads_as_a_metric_name() -> None:
    """Source ids are snake case; metric names are dotted (and no id is one)."""
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", name) for name in SOURCES), sorted(SOURCES)
    assert not set(SOURCES) & {m.name for m in METRICS}
