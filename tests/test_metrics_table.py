"""The metric table drives registration: every row is checked here."""

from __future__ import annotations

import dataclasses
import enum
import functools
import glob
import importlib
import inspect
import logging
import os
import pkgutil
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import Gauge, InMemoryMetricReader, Sum

from opentelemetry.instrumentation.process import ProcessInstrumentor, ProcessMetricsOptions
from opentelemetry.instrumentation.process.instruments import SCHEMA_URL
from opentelemetry.instrumentation.process.metrics import EXTENSION_PREFIX, METRICS, Kind, Metric
from opentelemetry.instrumentation.process.snapshot import SnapshotCache
from opentelemetry.instrumentation.process.sources import SOURCES

from .conftest import cgroup_limited_here, collect, on_by_default, points

DEFAULTS = [m for m in METRICS if m.default and m.supported()]
# Opt-in: off until something turns it on. The automatic saturation group is
# checked on its own, with saturation=False and True.
OPT_IN = [m for m in METRICS if not m.default and m.supported() and m.option != "saturation"]
SATURATION = [m for m in METRICS if m.option == "saturation" and m.supported()]

# Names the semantic conventions deprecated; none may be emitted.
DEPRECATED = {
    "process.open_file_descriptor.count",
    "process.threads",
    "process.runtime.cpython.cpu.utilization",
}
DEPRECATED_ATTRIBUTES = {"state", "type", "direction", "process.cpu.state", "cpu"}


def _enable(metric: Metric) -> dict[str, Any]:
    if metric.option is not None:
        return {metric.option: True}
    return {"include": [metric.name]}


_SEMCONV_KINDS = {
    "create_counter": Kind.COUNTER,
    "create_observable_counter": Kind.COUNTER,
    "create_up_down_counter": Kind.UP_DOWN_COUNTER,
    "create_observable_up_down_counter": Kind.UP_DOWN_COUNTER,
    "create_gauge": Kind.GAUGE,
    "create_observable_gauge": Kind.GAUGE,
}


class _RecordingMeter:
    """Stands in for a Meter: records which create_* call each semconv helper makes."""

    def __init__(self) -> None:
        self.shapes: dict[str, tuple[Kind, str]] = {}

    def __getattr__(self, method: str) -> Callable[..., None]:
        def create(name: str, *_args: Any, unit: str = "", **_kwargs: Any) -> None:
            if method in _SEMCONV_KINDS:  # histograms are not observable: none of ours
                self.shapes[name] = (_SEMCONV_KINDS[method], unit)

        return create


@functools.cache
def semconv_shapes() -> dict[str, tuple[Kind, str]]:
    """Instrument kind and unit of every metric of the installed semantic conventions.

    Taken from the ``create_*`` helpers of ``opentelemetry-semantic-conventions``
    (stable and incubating), by calling each one with a recording meter: the
    kind is the meter method it calls, the unit the one it passes.
    """
    import opentelemetry.semconv._incubating.metrics as incubating
    import opentelemetry.semconv.metrics as stable

    meter = _RecordingMeter()
    for package in (incubating, stable):  # stable last: it wins
        for module in pkgutil.iter_modules(package.__path__):
            found = importlib.import_module(f"{package.__name__}.{module.name}")
            for name, helper in vars(found).items():
                if name.startswith("create_") and callable(helper):
                    arity = len(inspect.signature(helper).parameters)
                    helper(meter, *[None] * (arity - 1))  # (meter[, callbacks])
    return meter.shapes


@functools.cache
def semconv_attributes() -> dict[str, set[Any] | None]:
    """Every attribute of the installed semantic conventions, with its enumerated values.

    ``None`` where the conventions list no values. An enum ``XyzValues`` goes
    with the module's string constant of the same name (``XYZ``).
    """
    import opentelemetry.semconv._incubating.attributes as incubating
    import opentelemetry.semconv.attributes as stable

    found: dict[str, set[Any] | None] = {}
    for package in (incubating, stable):
        for module in pkgutil.iter_modules(package.__path__):
            mod = importlib.import_module(f"{package.__name__}.{module.name}")
            constants = {
                k.replace("_", ""): v
                for k, v in vars(mod).items()
                if k.isupper() and isinstance(v, str)
            }
            for name in constants.values():
                found.setdefault(name, None)
            for k, v in vars(mod).items():
                if isinstance(v, type) and issubclass(v, enum.Enum) and k.endswith("Values"):
                    attribute = constants.get(k[: -len("Values")].upper())
                    if attribute is not None:
                        found[attribute] = {member.value for member in v}
    return found


# Enumerations whose listed values are only the well-known ones: others are allowed.
OPEN_ENUMS = {"system.filesystem.type"}


def semconv_is_current() -> bool:
    """Whether the installed conventions package knows this package's schema (1.44)."""
    from opentelemetry.semconv.schemas import Schemas

    return SCHEMA_URL in {s.value for s in Schemas}


needs_current_semconv = pytest.mark.skipif(
    not semconv_is_current(),
    reason="the installed opentelemetry-semantic-conventions predates this package's schema",
)


@needs_current_semconv
def test_semconv_metrics_have_the_attributes_of_the_semantic_conventions() -> None:
    known = semconv_attributes()
    for m in METRICS:
        if not m.extension:
            assert set(m.attributes) <= set(known), (m.name, set(m.attributes) - set(known))


@needs_current_semconv
def test_semconv_metrics_have_the_kind_and_unit_of_the_semantic_conventions() -> None:
    ours = [m for m in METRICS if not m.extension]
    assert len(ours) >= 37
    shapes = semconv_shapes()
    for m in ours:
        assert m.name in shapes, f"{m.name} is not in the installed semantic conventions"
        assert (m.kind, m.unit) == shapes[m.name], m.name


def _check_shape(metric: Metric, reported: Any) -> None:
    assert reported.unit == metric.unit
    assert reported.description == metric.description
    kind = metric.kind
    current = semconv_is_current()
    if not metric.extension and current:
        kind, unit = semconv_shapes()[metric.name]
        assert reported.unit == unit, metric.name
    data = reported.data
    if kind is Kind.GAUGE:
        assert isinstance(data, Gauge)
    else:
        assert isinstance(data, Sum)
        assert data.is_monotonic is (kind is Kind.COUNTER)
    assert data.data_points, f"{metric.name} has no points"
    values = semconv_attributes() if current else {}
    for attrs, v in points(reported).items():
        assert {k for k, _ in attrs} <= set(metric.attributes), (metric.name, attrs)
        assert isinstance(v, metric.value_type), (metric.name, v)
        for key, attribute in attrs:
            allowed = values.get(key) if key not in OPEN_ENUMS else None
            assert allowed is None or attribute in allowed, (metric.name, key, attribute)


def test_table_is_consistent() -> None:
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names))
    for m in METRICS:
        assert re.fullmatch(r"[a-z][a-z0-9_]*(\.[a-z0-9_]+)+", m.name), m.name
        assert m.name not in DEPRECATED
        assert not set(m.attributes) & DEPRECATED_ATTRIBUTES, m.name
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
    _check_shape(metric, reported[metric.name])


def test_defaults_are_exactly_the_default_rows(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument()
    assert set(collect(reader)) == on_by_default()


@pytest.mark.parametrize("metric", OPT_IN, ids=lambda m: m.name)
def test_opt_in_metric_only_when_enabled(
    metric: Metric,
    instrument: Callable[..., ProcessInstrumentor],
    reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    instrument()
    assert metric.name not in collect(reader)
    ProcessInstrumentor().uninstrument()
    caplog.set_level(logging.INFO, logger="opentelemetry.instrumentation.process")
    instrument(**_enable(metric))
    if metric.group == "eventloop":  # a loop must run for its lag to be measured
        reported = _collect_while_a_loop_runs(reader)
    else:
        reported = collect(reader)
    if metric.name == "system.paging.utilization" and not _swap_total():
        pytest.skip("no swap on this host: paging utilization is unknown, so it is absent")
    if metric.name.startswith(EXTENSION_PREFIX + "cpu.frequency."):
        _check_frequency_limit(metric, reported, caplog)
        return
    assert metric.name in reported
    _check_shape(metric, reported[metric.name])


def _collect_while_a_loop_runs(reader: InMemoryMetricReader) -> dict[str, Any]:
    import asyncio
    import threading

    ticked, release = threading.Event(), threading.Event()

    async def main() -> None:
        await asyncio.sleep(0.1)  # a few probe ticks
        ticked.set()
        while not release.is_set():
            await asyncio.sleep(0.01)

    runner = threading.Thread(target=asyncio.run, args=(main(),), name="loop-under-test")
    runner.start()
    try:
        assert ticked.wait(10)
        return collect(reader)
    finally:
        release.set()
        runner.join()


def _check_frequency_limit(
    metric: Metric, reported: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Reported in Hz where the host exposes the limit; else absent, and the log says why."""
    import psutil

    freq = psutil.cpu_freq() if hasattr(psutil, "cpu_freq") else None
    mhz = getattr(freq, metric.name.rsplit(".", 1)[1], 0.0) if freq else 0.0
    if sys.platform.startswith("linux"):
        # psutil takes the limits from cpufreq in sysfs; no driver, no limits.
        sysfs = glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_max_freq")
        assert bool(sysfs) == bool(mhz), (sysfs, freq)
    if mhz:
        assert set(points(reported[metric.name]).values()) == {int(mhz * 1e6)}
        _check_shape(metric, reported[metric.name])
        return
    assert metric.name not in reported
    notes = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("CPU frequency limits are not exposed on this host" in n for n in notes), notes


def _swap_total() -> int:
    import psutil

    return int(psutil.swap_memory().total)


def test_frequency_instruments_are_registered_only_when_on(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader, provider: Any
) -> None:
    from opentelemetry.instrumentation.process.instruments import _registries

    frequency = {m.name for m in METRICS if m.option == "cpu_frequency"}
    instrument()
    assert not frequency & set(_registries[provider].observers)
    assert not frequency & set(collect(reader))
    ProcessInstrumentor().uninstrument()
    instrument(cpu_frequency=True)
    assert frequency <= set(_registries[provider].observers)
    import psutil

    freq = psutil.cpu_freq(percpu=True)
    if freq and any(f.current for f in freq):
        cpu_freq = collect(reader)["system.cpu.frequency"]
        for attrs, hz in points(cpu_freq).items():
            assert dict(attrs).keys() == {"cpu.logical_number"}
            assert isinstance(hz, int) and hz > 1_000_000


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


def test_constant_attributes_on_every_point(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument(attributes={"deployment.environment.name": "test", "shard": 3})
    for metric in collect(reader).values():
        for attrs in points(metric):
            assert ("deployment.environment.name", "test") in attrs, metric.name
            assert ("shard", 3) in attrs, metric.name


def test_exclude_glob_drops_host_metrics(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument(exclude=["system.*"], include=["system.disk.io"])
    names = set(collect(reader))
    assert names and not any(n.startswith("system.") for n in names)


@pytest.mark.skipif(
    sys.platform == "darwin" and os.geteuid() != 0,
    reason="psutil.net_connections() needs root on macOS; without it the metric is left out",
)
def test_connection_count_needs_its_exact_name(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument(include=["system.network.*"])
    names = set(collect(reader))
    assert "system.network.io" in names
    assert "system.network.connection.count" not in names
    ProcessInstrumentor().uninstrument()
    instrument(include=["system.network.connection.count"])
    assert "system.network.connection.count" in collect(reader)


def test_meter_scope(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    from opentelemetry.instrumentation.process import SCOPE_NAME, __version__

    instrument()
    data = reader.get_metrics_data()
    assert data is not None
    scopes = [sm for rm in data.resource_metrics for sm in rm.scope_metrics]
    ours = [sm for sm in scopes if sm.scope.name == SCOPE_NAME]
    assert len(ours) == 1
    assert ours[0].scope.version == __version__
    assert ours[0].schema_url == "https://opentelemetry.io/schemas/1.44.0"


def test_entry_point_is_declared() -> None:
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="opentelemetry_instrumentor") if ep.name == "process"]
    assert len(found) == 1
    assert found[0].value == "opentelemetry.instrumentation.process:ProcessInstrumentor"
    assert found[0].load() is ProcessInstrumentor
    assert list(ProcessInstrumentor().instrumentation_dependencies()) == []


@pytest.mark.parametrize("metric", SATURATION, ids=lambda m: m.name)
def test_saturation_metric_follows_its_option(
    metric: Metric, instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument(saturation=False)
    assert metric.name not in collect(reader)
    ProcessInstrumentor().uninstrument()
    instrument(saturation=True)
    reported = collect(reader)
    if metric.name == "process_metrics.cgroup.memory.limit" and not cgroup_limited_here():
        # Absent when there is no limit: never reported as 0, or as "no limit".
        assert metric.name not in reported
        return
    assert metric.name in reported, sorted(reported)
    _check_shape(metric, reported[metric.name])


def test_platform_gaps_are_declared_where_the_value_comes_from() -> None:
    """Windows has no getrusage(2) and no RLIMIT_NOFILE: the table says so, by source field."""
    by_name = {m.name: m for m in METRICS}
    for name in ("process.paging.faults", "process_metrics.unix.file_descriptor.limit"):
        assert "windows" not in by_name[name].platforms, name
        assert "linux" in by_name[name].platforms and "darwin" in by_name[name].platforms
    # The other fields of the same sources stay on every platform.
    assert "windows" in by_name["process.cpu.time"].platforms
    assert "windows" in by_name["system.cpu.logical.count"].platforms


# (what is wrong with an added row, the error the import-time check raises)
BAD_ROWS = [
    ({"name": "process.cpu.time"}, "metric table: a name is declared twice"),
    (
        {"name": "test.bad", "source": "nope"},
        "metric table: test.bad names an unknown source 'nope'",
    ),
    (
        {"name": "test.bad", "field": "nope"},
        "metric table: test.bad reads field 'nope', which source 'process.rusage' does not declare",
    ),
    (
        {"name": "test.bad", "option": "per_cpu"},
        "metric table: test.bad names an unknown option 'per_cpu'",
    ),
    (
        {"name": "test.bad", "attributes": ("cpu.state",)},
        "metric table: test.bad has the attributes ('cpu.state',), but field 'cpu_time' of "
        "source 'process.rusage' names ('cpu.mode',)",
    ),
    (
        {"name": "test.bad", "attributes": ()},
        "metric table: test.bad has the attributes (), but field 'cpu_time' of source "
        "'process.rusage' names ('cpu.mode',)",
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
                assert isinstance(value, Mapping), (name, field, value)
                for key in value:
                    assert type(key) is key_type, (name, field, key)
                    assert len(key) == len(key_type.names), (name, field, key)
                seen.add((name, field))
    assert ("process.threads", "cpu_time") in seen and ("system.cpu", "time") in seen


@pytest.mark.parametrize(("change", "error"), BAD_ROWS, ids=lambda x: str(x)[:30])
def test_a_table_row_that_does_not_resolve_is_refused_at_import(
    change: dict[str, Any], error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.instrumentation.process import metrics as table
    from opentelemetry.instrumentation.process import selection

    def check() -> None:
        table._check_table()
        selection.check_gates(table.METRICS)

    check()  # the real table resolves
    for option in (None, "cpu_frequency"):  # no option, and a gating one, are fine
        good = dataclasses.replace(METRICS[0], name="test.good", option=option)
        monkeypatch.setattr(table, "METRICS", (*METRICS, good))
        monkeypatch.setattr(table, "METRICS_BY_NAME", {m.name: m for m in table.METRICS})
        check()
    bad = dataclasses.replace(METRICS[0], **change)
    monkeypatch.setattr(table, "METRICS", (*METRICS, bad))
    monkeypatch.setattr(table, "METRICS_BY_NAME", {m.name: m for m in table.METRICS})
    with pytest.raises(RuntimeError, match=f"^{re.escape(error)}$"):
        check()
