"""The instruments: only for enabled rows, on our meter scope, constant attributes on each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessInstrumentor
from opentelemetry.instrumentation.process.metrics import METRICS

from .conftest import collect, points


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


def test_constant_attributes_on_every_point(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument(attributes={"deployment.environment.name": "test", "shard": 3})
    for metric in collect(reader).values():
        for attrs in points(metric):
            assert ("deployment.environment.name", "test") in attrs, metric.name
            assert ("shard", 3) in attrs, metric.name


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


def test_the_packages_lazy_names_are_their_modules_objects_and_others_are_refused() -> None:
    import importlib

    import opentelemetry.instrumentation.process as package

    for name, module in package._LAZY.items():
        where = importlib.import_module(f"{package.__name__}.{module}")
        assert package.__getattr__(name) is getattr(where, name)
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        package.__getattr__("nope")
