"""Shared fixtures: a real SDK MeterProvider with an InMemoryMetricReader."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric, MetricsData

from opentelemetry.instrumentation.process import SCOPE_NAME, ProcessInstrumentor

Points = dict[frozenset[tuple[str, Any]], Any]


def collect(reader: InMemoryMetricReader) -> dict[str, Metric]:
    """One collection: this package's metrics by name."""
    return ours(reader.get_metrics_data())


def ours(data: MetricsData | None) -> dict[str, Metric]:
    """This package's metrics in ``data`` by name; each name at most once."""
    found: dict[str, Metric] = {}
    if data is None:
        return found
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            if sm.scope.name == SCOPE_NAME:
                for m in sm.metrics:
                    assert m.name not in found, f"{m.name} reported twice"
                    found[m.name] = m
    return found


def points(metric: Metric) -> Points:
    """Data points of ``metric`` keyed by their attribute set."""
    out: Points = {}
    for p in metric.data.data_points:
        key = frozenset(p.attributes.items())
        assert key not in out, f"duplicate point {dict(key)} in {metric.name}"
        out[key] = p.value
    return out


def value(metric: Metric, **attributes: Any) -> Any:
    return points(metric)[frozenset(attributes.items())]


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    yield InMemoryMetricReader()


@pytest.fixture
def provider(reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    mp = MeterProvider(metric_readers=[reader])
    yield mp
    mp.shutdown()


@pytest.fixture
def instrument(provider: MeterProvider) -> Iterator[Callable[..., ProcessInstrumentor]]:
    """Instrument with the given options on the test's provider; undone after the test."""

    def _instrument(**options: Any) -> ProcessInstrumentor:
        inst = ProcessInstrumentor()
        inst.instrument(meter_provider=provider, **options)
        return inst

    yield _instrument
    ProcessInstrumentor().uninstrument()


DIRECT_READS_VAR = "OTEL_PYTHON_PROCESS_METRICS_DIRECT_READS"
"""Kept from the shell: ``=false`` runs the whole suite on psutil's portable path."""


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test inherits OTEL_PYTHON_PROCESS_METRICS_* from the shell, but DIRECT_READS."""
    import os

    for name in list(os.environ):
        if name.startswith("OTEL_PYTHON_PROCESS_METRICS_") and name != DIRECT_READS_VAR:
            monkeypatch.delenv(name)


class OpenRecorder:
    """Records files opened and folders listed while active (an audit hook)."""

    def __init__(self) -> None:
        self.active = False
        self.paths: list[str] = []
        self._lock = threading.Lock()

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.active and event in ("open", "os.listdir", "os.scandir") and args:
            path = args[0]
            if isinstance(path, (str, bytes)):
                with self._lock:
                    self.paths.append(path.decode() if isinstance(path, bytes) else path)

    @contextmanager
    def recording(self) -> Iterator[list[str]]:
        self.paths = []
        self.active = True
        try:
            yield self.paths
        finally:
            self.active = False


_recorder = OpenRecorder()
sys.addaudithook(_recorder.hook)


@pytest.fixture
def opens() -> OpenRecorder:
    return _recorder
