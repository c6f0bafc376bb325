"""Which metrics are reported: the defaults, each opt-in row, include, exclude, gating options."""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor
from opentelemetry.instrumentation.process.catalog import supported
from opentelemetry.instrumentation.process.metrics import EXTENSION_PREFIX, METRICS, Kind, Metric

from .conftest import cgroup_limited_here, collect, events_metrics, on_by_default, points
from .support.examples import ROOT
from .support.semconv import (
    check_shape,
)

# Opt-in: off until something turns it on. The automatic saturation group is
# checked on its own, with saturation=False and True.
# The histograms of events report once an event happened: tests/test_stalls.py makes them.
OPT_IN = [
    m
    for m in METRICS
    if not m.default and supported(m) and m.option != "saturation" and m.kind is not Kind.HISTOGRAM
]
SATURATION = [m for m in METRICS if m.option == "saturation" and supported(m)]


def _enable(metric: Metric) -> dict[str, Any]:
    if metric.option is not None:
        return {metric.option: True}
    return {"include": [metric.name]}


def test_defaults_are_exactly_the_default_rows(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument()
    assert set(collect(reader)) - events_metrics() == on_by_default()


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
        # A sampling probe (the GIL wait's) has a longest wait once it has woken.
        deadline = time.monotonic() + 2
        while metric.name not in reported and time.monotonic() < deadline:
            time.sleep(0.05)
            reported = collect(reader)
    if metric.name == "system.paging.utilization" and not _swap_total():
        pytest.skip("no swap on this host: paging utilization is unknown, so it is absent")
    if metric.name.startswith(EXTENSION_PREFIX + "cpu.frequency."):
        _check_frequency_limit(metric, reported, caplog)
        return
    assert metric.name in reported
    check_shape(metric, reported[metric.name])


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
        check_shape(metric, reported[metric.name])
        return
    assert metric.name not in reported
    notes = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("CPU frequency limits are not exposed on this host" in n for n in notes), notes


def _swap_total() -> int:
    import psutil

    return int(psutil.swap_memory().total)


def test_exclude_glob_drops_host_metrics(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument(exclude=["system.*"], include=["system.disk.io"])
    names = set(collect(reader))
    assert names and not any(n.startswith("system.") for n in names)


def _namespace(name: str) -> str:
    """``name`` without the prefix of this package's extensions."""
    return name.removeprefix(EXTENSION_PREFIX)


@pytest.mark.parametrize("glob_", ["cpython.gc.*", "cpython.*"])
def test_an_exclude_glob_covers_the_extensions_of_its_namespace(
    glob_: str, instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    """configuration, "How include and exclude choose metrics": ``cpython.gc.*`` leaves no GC
    metric on, ``process_metrics.cpython.gc.pause.*`` included, even the opt-in histogram."""
    everything = {"gc_pause_histogram": True, "gil_wait": True}
    instrument(**everything)
    covered = {n for n in collect(reader) if fnmatch.fnmatchcase(_namespace(n), glob_)}
    assert any(n.startswith(EXTENSION_PREFIX) for n in covered), covered  # there are some
    ProcessInstrumentor().uninstrument()
    instrument(exclude=[glob_], **everything)
    left = set(collect(reader))
    assert left and not covered & left, covered & left
    page = " ".join((ROOT / "docs" / "configuration.md").read_text().split())
    said = "`cpython.gc.*` matches `cpython.gc.collections` and "
    assert said + "`process_metrics.cpython.gc.pause.time`" in page


def test_a_name_without_a_glob_is_written_whole(
    instrument: Callable[..., ProcessInstrumentor],
) -> None:
    """Only a glob covers an extension by its name after the prefix: a name is exact."""
    with pytest.raises(ValueError, match=r"^exclude: unknown metric name 'cpython.gc.pause.time'"):
        instrument(exclude=["cpython.gc.pause.time"])
    with pytest.raises(ValueError, match=r"^include: the glob 'nope.\*' matches no metric"):
        instrument(include=["nope.*"])


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
    check_shape(metric, reported[metric.name])
