"""The shared_metrics option, and shared metrics through the real SDK in real processes."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessMetrics
from opentelemetry.instrumentation.process.environment import from_environment
from opentelemetry.instrumentation.process.group import keys
from opentelemetry.instrumentation.process.metrics import METRICS
from opentelemetry.instrumentation.process.options import ProcessMetricsOptions
from opentelemetry.instrumentation.process.sources import SOURCES

from .conftest import collect
from .support.groupkids import Kid

VAR = "OTEL_PYTHON_PROCESS_METRICS_SHARED_METRICS"
SHARED = {m.name for m in METRICS if SOURCES[m.source].shared}


def test_the_shared_sources_are_the_host_the_cgroup_and_the_pressure_ones() -> None:
    shared = {m.name for m in METRICS if SOURCES[m.source].shared}
    for m in METRICS:
        host = m.name.startswith(("system.", "container.", "process_metrics.cgroup."))
        pressure = "pressure" in m.name
        frequency = m.name.startswith("process_metrics.cpu.frequency.")
        assert (m.name in shared) == (host or pressure or frequency), m.name


def test_the_option_defaults_to_once_and_refuses_other_values_by_name() -> None:
    assert ProcessMetricsOptions().shared_metrics == "once"
    assert ProcessMetricsOptions(shared_metrics="every").shared_metrics == "every"
    with pytest.raises(ValueError, match=r"^shared_metrics: expected one of 'once', 'every'"):
        ProcessMetricsOptions(shared_metrics="twice")


def test_the_environment_variable_any_case_and_a_bad_value_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert from_environment({VAR: " Every "}) == {"shared_metrics": "every"}
    with caplog.at_level(logging.WARNING):
        assert from_environment({VAR: "sometimes"}) == {}
    (line,) = [r.getMessage() for r in caplog.records]
    assert VAR in line and "'sometimes'" in line and "'once'" in line


_held: list[Any] = []


def _collect_names(_word: str = "") -> list[str]:
    return sorted(collect(_held[0]))


def instrumented(kids: list[Kid], mode: str = "once") -> Kid:
    """A child with ProcessMetrics on a real SDK provider; ask it for a collection."""

    def job() -> list[str]:
        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader])
        _held[:] = [
            reader,
            ProcessMetrics(ProcessMetricsOptions(shared_metrics=mode), meter_provider=provider),
        ]
        return _collect_names()

    kid = Kid(job, serve=_collect_names)
    kids.append(kid)
    _ = kid.result
    return kid


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_through_the_sdk_one_process_reports_the_shared_metrics(
    rundir: Path, kids: list[Kid]
) -> None:
    leader, other = instrumented(kids), instrumented(kids)
    assert "system.memory.usage" in leader.result
    assert not SHARED & set(other.result)
    assert "process.memory.usage" in other.result and "process.cpu.time" in other.result
    leader.kill()
    assert "system.memory.usage" in other.ask("collect")


def test_two_providers_of_one_process_agree(rundir: Path) -> None:
    readers = [InMemoryMetricReader(), InMemoryMetricReader()]
    providers = [MeterProvider(metric_readers=[r]) for r in readers]
    made = [ProcessMetrics(meter_provider=p) for p in providers]
    try:
        for reader in readers:
            assert "system.memory.usage" in collect(reader)
    finally:
        for m in made:
            m.close()
        for p in providers:
            p.shutdown()


def test_a_container_main_process_has_a_parent_key() -> None:
    assert keys.parent_key(0) == f"{keys.boot_id()}-0-0"
