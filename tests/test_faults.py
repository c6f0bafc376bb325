"""Fault injection: a failing source drops only its own points, logs once, raises nothing.

These faults cannot be produced for real on demand (AccessDenied on our own
process, a field missing on this platform), so the psutil call behind each
source is replaced by one that raises, and put back afterwards.
"""

from __future__ import annotations

import functools
import gc
import logging
import sys
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import METRICS, ProcessInstrumentor
from opentelemetry.instrumentation.process import sources as sources_module
from opentelemetry.instrumentation.process.instruments import _registries

from .conftest import collect, points

LOGGER = "opentelemetry.instrumentation.process"

# The OS call behind each source that reads one.
TARGETS: dict[str, tuple[Any, str]] = {
    "process.memory": (psutil.Process, "memory_info"),
    "process.io": (psutil.Process, "io_counters"),
    "process.num_threads": (
        (sources_module, "linux_thread_count")
        if sys.platform.startswith("linux")
        else (psutil.Process, "num_threads")
    ),
    "process.num_fds": (psutil.Process, "num_fds"),
    "process.threads": (psutil.Process, "threads"),
    "system.cpu": (psutil, "cpu_times"),
    "system.memory": (psutil, "virtual_memory"),
    "system.cpu_freq": (psutil, "cpu_freq"),
    "system.disk": (psutil, "disk_io_counters"),
    "system.network": (psutil, "net_io_counters"),
    "system.swap": (psutil, "swap_memory"),
    "system.filesystem": (psutil, "disk_partitions"),
    "system.connections": (psutil, "net_connections"),
    "cpython.gc": (gc, "get_stats"),
}
if sources_module._resource is not None:
    TARGETS["process.rusage"] = (sources_module._resource, "getrusage")

ERRORS: dict[str, Callable[[], BaseException]] = {
    "AccessDenied": lambda: psutil.AccessDenied(1),
    "NoSuchProcess": lambda: psutil.NoSuchProcess(1),
    "NotImplementedError": lambda: NotImplementedError("not on this platform"),
    "OSError": lambda: OSError(5, "Input/output error"),
}


class _NoFields:
    """What a platform returns when it lacks the fields a source needs."""


def _options_for(source: str) -> dict[str, Any]:
    fed = [m for m in METRICS if m.source == source and m.supported()]
    gated = {m.option for m in fed if m.option}
    if gated:
        return {option: True for option in gated if option}
    return {"include": [m.name for m in fed if not m.default]}


CASES = [
    pytest.param(source, error, id=f"{source}-{error}")
    for source in TARGETS
    if any(m.source == source and m.supported() for m in METRICS)
    for error in [*ERRORS, "missing-field"]
]


@pytest.mark.parametrize(("source", "error"), CASES)
def test_failing_source_drops_only_its_points(
    source: str,
    error: str,
    instrument: Callable[..., ProcessInstrumentor],
    reader: InMemoryMetricReader,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner, name = TARGETS[source]
    real = getattr(owner, name)
    instrument(**_options_for(source))
    healthy = collect(reader)
    fed = {m.name for m in METRICS if m.source == source} & set(healthy)
    if not fed:
        pytest.skip(f"{source} reports nothing on this host")

    if error == "missing-field":

        def broken(*_a: Any, **_k: Any) -> Any:
            return [_NoFields()] if source == "process.threads" else _NoFields()
    else:

        def broken(*_a: Any, **_k: Any) -> Any:
            raise ERRORS[error]()

    # wraps() keeps the attributes psutil's oneshot() expects on its methods.
    monkeypatch.setattr(owner, name, functools.wraps(real)(broken))
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    first = collect(reader)
    second = collect(reader)
    for got in (first, second):
        assert not fed & set(got), f"{fed & set(got)} still reported"
        assert set(got) == set(healthy) - fed
    ours = [r for r in caplog.records if r.name == LOGGER]
    assert len(ours) == 1, [r.getMessage() for r in ours]
    assert source in ours[0].getMessage()

    monkeypatch.setattr(owner, name, real)
    assert fed <= set(collect(reader))


def test_unknown_frequency_limits_are_absent_not_zero(
    provider: Any,
    reader: InMemoryMetricReader,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    freq = type(psutil.cpu_freq())  # the platform's named tuple

    def vm_like(percpu: bool = False) -> Any:
        one = freq(current=2400.0, min=0.0, max=0.0)
        return [one, one] if percpu else one

    monkeypatch.setattr(psutil, "cpu_freq", vm_like)
    caplog.set_level(logging.INFO, logger=LOGGER)
    ProcessInstrumentor().instrument(meter_provider=provider, cpu_frequency=True)
    try:
        got = collect(reader)
        assert "process_metrics.cpu.frequency.min" not in got
        assert "process_metrics.cpu.frequency.max" not in got
        assert set(points(got["system.cpu.frequency"]).values()) == {2_400_000_000}
        collect(reader)
        notes = [r for r in caplog.records if "frequency limits" in r.getMessage()]
        assert len(notes) == 1
    finally:
        ProcessInstrumentor().uninstrument()


def test_known_frequency_limits_are_reported_in_hz(
    instrument: Callable[..., ProcessInstrumentor],
    reader: InMemoryMetricReader,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    freq = type(psutil.cpu_freq())

    def bare_metal(percpu: bool = False) -> Any:
        one = freq(current=0.0, min=800.0, max=3600.0)
        return [one] if percpu else one

    monkeypatch.setattr(psutil, "cpu_freq", bare_metal)
    instrument(cpu_frequency=True)
    got = collect(reader)
    assert set(points(got["process_metrics.cpu.frequency.min"]).values()) == {800_000_000}
    assert set(points(got["process_metrics.cpu.frequency.max"]).values()) == {3_600_000_000}
    # A CPU reading 0 MHz does not know its frequency: no point rather than 0.
    assert "system.cpu.frequency" not in got


def test_metric_without_a_source_on_this_platform_is_not_registered(
    instrument: Callable[..., ProcessInstrumentor],
    reader: InMemoryMetricReader,
    provider: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(psutil.Process, "io_counters", raising=False)
    instrument()
    assert "process.disk.io" not in _registries[provider].observers
    assert "process.disk.operations" not in _registries[provider].observers
    got = collect(reader)
    assert "process.disk.io" not in got
    assert "process.memory.usage" in got


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux-only sources")
def test_signals_source_failure_is_contained(
    instrument: Callable[..., ProcessInstrumentor],
    reader: InMemoryMetricReader,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    instrument(include=["process.signals_pending"])
    assert "process.signals_pending" in collect(reader)

    def denied(*_a: Any, **_k: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(sources_module, "open", denied, raising=False)
    got = collect(reader)
    assert "process.signals_pending" not in got
    assert "process.memory.usage" in got
