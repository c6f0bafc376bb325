"""Everything that is timed: each subject is one collection, ``collect()``, with no arguments.

One collection of an OpenTelemetry subject is ``InMemoryMetricReader.get_metrics_data()``
on its own ``MeterProvider``, so that many configurations live in one process and
are timed in turns. Only public APIs are used: ``ProcessMetrics`` for ours,
``SystemMetricsInstrumentor(config=...)`` for the peer, prometheus_client's
``ProcessCollector``, and psutil.
"""

from __future__ import annotations

import gc
import os
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psutil
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Gauge,
    InMemoryMetricReader,
    Metric,
    MetricsData,
    NumberDataPoint,
    Sum,
)
from opentelemetry.sdk.resources import Resource

from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions

# The peer reads this when built without a config: measure its shipped default.
os.environ.pop("OTEL_PYTHON_SYSTEM_METRICS_EXCLUDED_METRICS", None)

# Of the providers whose collections are measured: the SDK's default starts its detectors'
# thread pool with one thread or two, by timing (8,000 instructions a counted collection).
RESOURCE = Resource({"service.name": "benchmark"})

REFRESH = ("process_metrics.refresh.duration", "process_metrics.refresh.cpu_time")
PRESSURE = tuple(f"/proc/pressure/{r}" for r in ("cpu", "memory", "io"))


@dataclass(frozen=True)
class Shape:
    """What one collection reports."""

    instruments: int = 0
    points: int = 0


@dataclass
class Subject:
    """One thing to time, and what to undo when done."""

    name: str
    group: str
    """ours, peer, floor or bare."""
    description: str
    collect: Callable[[], object]
    closers: list[Callable[[], None]] = field(default_factory=list)
    shape: Shape = Shape()
    refresh: list[tuple[float, float]] = field(default_factory=list)
    """(wall, CPU) seconds of the refresh, as ours reports them in its own metrics."""

    def after(self, data: object) -> None:
        """Called after each timed collection, outside the timing."""
        if self.group == "ours" and isinstance(data, MetricsData):
            wall, cpu = (metric_value(data, name) for name in REFRESH)
            if wall is not None and cpu is not None:
                self.refresh.append((wall, cpu))

    def warm_up(self) -> MetricsData | None:
        """One collection (the first has no baseline to diff against); records the shape."""
        data = self.collect()
        if isinstance(data, MetricsData):
            self.shape = shape(data)
            return data
        if self.name == "prometheus_client":  # its metric families
            assert isinstance(data, list)
            self.shape = Shape(len(data), sum(len(m.samples) for m in data))
        return None

    def close(self) -> None:
        for fn in reversed(self.closers):
            fn()
        self.closers.clear()


def metrics_of(data: MetricsData) -> list[Metric]:
    return [m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]


def shape(data: MetricsData) -> Shape:
    found = metrics_of(data)
    return Shape(len(found), sum(len(m.data.data_points) for m in found))


def metric_value(data: MetricsData, name: str) -> float | None:
    for metric in metrics_of(data):
        if metric.name == name and metric.data.data_points:
            point = metric.data.data_points[0]
            return float(point.value) if isinstance(point, NumberDataPoint) else None
    return None


def _otel(name: str, group: str, description: str) -> tuple[Subject, MeterProvider]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader], resource=RESOURCE)
    subject = Subject(name, group, description, reader.get_metrics_data)
    subject.closers.append(provider.shutdown)
    return subject, provider


def ours(name: str, options: ProcessMetricsOptions, description: str) -> Subject:
    """This package, through its public building block, on its own provider."""
    subject, provider = _otel(name, "ours", description)
    metrics = ProcessMetrics(options, meter_provider=provider)
    subject.closers.append(metrics.close)
    return subject


def peer(name: str, config: dict[str, list[str] | None] | None, description: str) -> Subject:
    """The peer through its public constructor, on its own provider.

    ``SystemMetricsInstrumentor`` is a singleton per class, and a second
    construction re-runs ``__init__`` on the live instance with the new config.
    Each configuration therefore gets a plain subclass, which has a singleton of
    its own as long as the base class itself is never built in this process
    (checked below); the peer's code runs unchanged.
    """
    from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor

    cls: type[SystemMetricsInstrumentor] = type(
        f"SystemMetrics_{name}", (SystemMetricsInstrumentor,), {}
    )
    instrumentor = cls(config=config)
    if type(instrumentor) is not cls:
        raise RuntimeError("SystemMetricsInstrumentor was built elsewhere in this process")
    subject, provider = _otel(name, "peer", description)
    instrumentor.instrument(meter_provider=provider)
    subject.closers.append(instrumentor.uninstrument)
    return subject


def prometheus_client() -> Subject:
    from prometheus_client.process_collector import ProcessCollector

    collector = ProcessCollector(registry=None)
    return Subject(
        "prometheus_client",
        "peer",
        "prometheus_client ProcessCollector(registry=None).collect()",
        collector.collect,
    )


def floor_like(name: str, data: MetricsData, description: str) -> Subject:
    """The SDK floor: the same instruments and points, from constant callbacks."""
    subject, provider = _otel(name, "floor", description)
    meter = provider.get_meter("benchmarks.sdk_floor")
    for metric in metrics_of(data):
        points = [
            Observation(p.value, dict(p.attributes or {}))
            for p in metric.data.data_points
            if isinstance(p, NumberDataPoint)
        ]
        create = _creator(meter, metric)
        create(metric.name, callbacks=[_constant(points)], unit=metric.unit)
    return subject


def _creator(meter: Any, metric: Metric) -> Any:
    kind = metric.data
    if isinstance(kind, Sum):
        if kind.is_monotonic:
            return meter.create_observable_counter
        return meter.create_observable_up_down_counter
    if isinstance(kind, Gauge):
        return meter.create_observable_gauge
    raise TypeError(type(kind))  # observable instruments make only these


def _constant(points: list[Observation]) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def callback(_options: CallbackOptions) -> Iterable[Observation]:
        return points

    return callback


def sdk_empty() -> Subject:
    subject, _ = _otel(
        "sdk_empty", "floor", "a MeterProvider and InMemoryMetricReader, no instrument"
    )
    return subject


def floor_of(target: Subject) -> Subject:
    """The SDK floor of ``target``, from one collection of it; warmed up."""
    data = target.collect()
    if not isinstance(data, MetricsData):
        raise TypeError(f"{target.name} has no SDK floor")
    floor = floor_like(f"floor_{target.name}", data, f"the SDK with the points of {target.name}")
    floor.warm_up()
    return floor


def bare(name: str, fn: Callable[[], object], description: str) -> Subject:
    return Subject(name, "bare", description, fn)


def process_reads() -> Callable[[], object]:
    """The OS reads the process set needs, each once, as plainly as this package does them."""
    proc = psutil.Process()

    def read() -> object:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        with proc.oneshot():
            found = (proc.memory_info(), proc.io_counters(), proc.num_threads(), proc.num_fds())
        return usage, found, gc.get_stats()

    return read


def default_reads() -> Callable[[], object]:
    """The OS reads the default needs: the process set's, host CPU and memory, pressure."""
    process = process_reads()
    pressure = [p for p in PRESSURE if os.path.exists(p)]

    def read() -> object:
        stalls = [_read(p) for p in pressure]
        return process(), time.time(), psutil.cpu_times(), psutil.virtual_memory(), stalls

    return read


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def net_connections() -> object:
    return psutil.net_connections(kind="inet")
