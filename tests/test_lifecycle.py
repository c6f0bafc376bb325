"""uninstrument() really stops; instrument() again resumes without duplicates."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor

from .conftest import Sdk, collect, collect_after_close, points, reported
from .support.gc import GC_STALL, STALLS_TIMED, needs_gc_stalls, stall


def test_uninstrument_stops_every_point(sdk: Sdk) -> None:
    sdk.instrument(per_thread=True, include=["system.*"])
    assert sdk.collect()
    ProcessInstrumentor().uninstrument()
    assert collect_after_close(sdk.reader) == {}
    assert collect_after_close(sdk.reader) == {}


@needs_gc_stalls
def test_a_stall_recorded_before_uninstrument_is_exported_again_only_as_a_cumulative_sum() -> None:
    """design: the SDK "exports it again, unchanged, at each collection"; "a reader with
    delta temporality exports nothing of it"."""
    cumulative = InMemoryMetricReader()
    delta = InMemoryMetricReader(preferred_temporality={Histogram: AggregationTemporality.DELTA})
    provider = MeterProvider(metric_readers=[cumulative, delta])
    try:
        ProcessInstrumentor().instrument(meter_provider=provider, **STALLS_TIMED)
        stall()
        recorded = points(collect(cumulative)[GC_STALL])
        assert GC_STALL in collect(delta)
        ProcessInstrumentor().uninstrument()
        stall()  # seen by nothing now
        for _ in range(2):
            left = collect(cumulative)
            assert set(left) == {GC_STALL}
            assert points(left[GC_STALL]) == recorded
            assert collect(delta) == {}
    finally:
        ProcessInstrumentor().uninstrument()
        provider.shutdown()


def test_reinstrument_with_other_options_resumes_without_duplicates(
    sdk: Sdk, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    sdk.instrument()
    first = sdk.collect()
    ProcessInstrumentor().uninstrument()
    sdk.instrument(per_cpu=True, include=["system.network.io"], exclude=["cpython.*"])
    second = sdk.collect()  # collect() itself asserts no duplicate metric or point
    assert "system.network.io" in second
    # cpython.* covers the extensions of its namespace too (process_metrics.cpython.*).
    runtime = {n for n in first if n.removeprefix("process_metrics.").startswith("cpython.")}
    assert not runtime & set(second)
    assert set(first) - set(second) == runtime
    per_cpu = points(second["system.cpu.time"])
    assert all("cpu.logical_number" in dict(a) for a in per_cpu)
    ProcessInstrumentor().uninstrument()
    sdk.instrument()
    assert reported(sdk.collect()) == reported(first)
    duplicates = [r for r in caplog.records if "created already" in r.getMessage()]
    assert duplicates == []


def test_instrument_twice_keeps_one_set_of_points(sdk: Sdk) -> None:
    sdk.instrument()
    sdk.instrument(per_cpu=True)  # already instrumented: ignored by BaseInstrumentor
    got = sdk.collect()
    assert all("cpu.logical_number" not in dict(a) for a in points(got["system.cpu.time"]))


def test_second_construction_does_not_break_the_live_one(sdk: Sdk) -> None:
    live = sdk.instrument()
    again = ProcessInstrumentor()
    assert again is live
    assert again.is_instrumented_by_opentelemetry
    got = sdk.collect()
    assert "process.cpu.time" in got and "process.memory.usage" in got


def test_uninstrument_when_not_instrumented_is_harmless(reader: InMemoryMetricReader) -> None:
    ProcessInstrumentor().uninstrument()
    assert not ProcessInstrumentor().is_instrumented_by_opentelemetry


def test_moving_to_another_provider(reader: InMemoryMetricReader, provider: Any) -> None:
    other_reader = InMemoryMetricReader()
    other = MeterProvider(metric_readers=[other_reader])
    try:
        ProcessInstrumentor().instrument(meter_provider=provider)
        assert collect(reader)
        ProcessInstrumentor().uninstrument()
        ProcessInstrumentor().instrument(meter_provider=other)
        assert collect_after_close(reader) == {}
        assert "process.cpu.time" in collect(other_reader)
    finally:
        ProcessInstrumentor().uninstrument()
        other.shutdown()


def test_global_meter_provider_is_used_by_default() -> None:
    # The global provider can be set only once per process: use a fresh one.
    script = """
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.instrumentation.process import ProcessInstrumentor
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
ProcessInstrumentor().instrument()
data = reader.get_metrics_data()
names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
print("process.cpu.time" in names, "process.memory.usage" in names)
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["True", "True"], out.stderr


def test_only_an_instrumented_provider_is_guarded_across_fork(
    instrument: Callable[..., ProcessInstrumentor], provider: Any
) -> None:
    from opentelemetry.instrumentation.process import sdk_fork_guard as forks

    instrument()
    assert provider in forks._guarded
    ProcessInstrumentor().uninstrument()
    assert provider not in forks._guarded
