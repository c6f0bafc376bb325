"""The shared_metrics option, and shared metrics through the real SDK in real processes."""

from __future__ import annotations

import logging
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource

from opentelemetry.instrumentation.process import ProcessMetrics
from opentelemetry.instrumentation.process.environment import from_environment
from opentelemetry.instrumentation.process.group import keys
from opentelemetry.instrumentation.process.metrics import METRICS
from opentelemetry.instrumentation.process.options import ProcessMetricsOptions
from opentelemetry.instrumentation.process.sources import SOURCES

from .conftest import LogLines, collect
from .support.groupkids import Kid

VAR = "OTEL_PYTHON_PROCESS_METRICS_SHARED_METRICS"
SHARED = {m.name for m in METRICS if SOURCES[m.source].shared}


def test_the_shared_sources_are_the_host_the_cgroup_and_the_pressure_ones() -> None:
    """Shared are exactly the sources of the host's and the container's values, by module."""
    from opentelemetry.instrumentation.process.sources import host, saturation

    machine = {s.name for module in (host, saturation) for s in module.SOURCES}
    assert machine and machine <= set(SOURCES)
    for name, source in SOURCES.items():
        assert source.shared == (name in machine), name
    shared_metrics = [m for m in METRICS if SOURCES[m.source].shared]
    assert any(m.name.startswith("system.") for m in shared_metrics)
    assert any(m.name.startswith("container.") for m in shared_metrics)
    assert not any(m.name.startswith("process.") for m in shared_metrics)


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


def _collect_names(word: str = "") -> list[str]:
    """A collection here; with ``fork`` or ``cfork``, in a child forked that way instead."""
    if word in ("fork", "cfork"):
        child = Kid(_collect_names, raw=word == "cfork")
        try:
            found: list[str] = child.result
        finally:
            child.stop()
        return found
    return sorted(collect(_held[0]))


def instrumented(
    kids: list[Kid], mode: str = "once", service: str | None = None, collect_now: bool = True
) -> Kid:
    """A child with ProcessMetrics on a real SDK provider; ask it for a collection.

    ``service``: the provider's ``service.name`` (the SDK's default if ``None``).
    With ``collect_now``, its job collects once (its result is the names).
    """

    def job() -> list[str]:
        reader = InMemoryMetricReader()
        resource = Resource.create({} if service is None else {"service.name": service})
        provider = MeterProvider(metric_readers=[reader], resource=resource)
        _held[:] = [
            reader,
            ProcessMetrics(ProcessMetricsOptions(shared_metrics=mode), meter_provider=provider),
        ]
        return _collect_names() if collect_now else []

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


def test_the_host_is_the_machine_id_and_the_host_name() -> None:
    # Containers of one image may share a machine id; their host names differ.
    machine = Path("/etc/machine-id")
    name = socket.gethostname()
    if machine.is_file() and machine.read_text().strip():
        assert keys.host_id() == f"{machine.read_text().strip()}/{name}"
    else:
        assert keys.host_id().endswith(name)


# --- one election per service ---------------------------------------------------------


def test_two_services_in_one_cgroup_each_report_their_shared_metrics_once(
    rundir: Path, kids: list[Kid]
) -> None:
    # Another service started first, as a cron job or a Celery worker beside a web server.
    other = instrumented(kids, service="another-service")
    web = [instrumented(kids, service="web"), instrumented(kids, service="web")]
    assert "system.memory.usage" in other.result
    assert "system.memory.usage" in web[0].result
    assert not SHARED & set(web[1].result)
    web[0].kill()
    assert "system.memory.usage" in web[1].ask("collect")
    assert "system.memory.usage" in other.ask("collect")


def test_the_namespace_and_the_environment_make_other_groups_the_instance_does_not() -> None:
    def group_of(**attributes: str) -> Any:
        provider = MeterProvider(resource=Resource.create(attributes))
        made = ProcessMetrics(meter_provider=provider)
        try:
            return made.group
        finally:
            made.close()
            provider.shutdown()

    web = group_of(**{"service.name": "web"})
    assert web is not None and web.service == "service.name=web"
    assert web.user == os.geteuid() and web.key
    assert group_of(**{"service.name": "web", "service.instance.id": "other"}) == web
    shop = group_of(**{"service.name": "web", "service.namespace": "shop"})
    prod = group_of(**{"service.name": "web", "deployment.environment.name": "prod"})
    assert shop is not None and shop.service == "service.namespace=shop service.name=web"
    assert len({web.key, shop.key, prod.key}) == 3  # type: ignore[union-attr]


def test_instrument_says_which_group_it_joined_in_one_debug_line(
    rundir: Path, logged: LogLines
) -> None:
    provider = MeterProvider(resource=Resource.create({"service.name": "said"}))
    made = ProcessMetrics(meter_provider=provider)
    try:
        group = made.group
        assert group is not None
        lines = [line for line in logged.lines if "joins the group" in line]
        assert len(lines) == 1 and lines[0].startswith("DEBUG "), logged.lines
        assert "service.name=said" in lines[0] and f"{group.key}.lock" in lines[0]
        assert ProcessMetrics(ProcessMetricsOptions(shared_metrics="every")).group is None
    finally:
        made.close()
        provider.shutdown()
    assert made.group is None


def test_the_environment_names_the_service_when_the_provider_is_not_set_yet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.metrics import NoOpMeterProvider

    from opentelemetry.instrumentation.process import service

    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=a%20b,service.name=x")
    assert service.identity(NoOpMeterProvider()) == "service.namespace=a b service.name=from-env"
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES")
    assert service.identity(NoOpMeterProvider()) == "service.name=unknown_service"


def test_a_process_that_never_collected_does_not_hold_the_role(
    rundir: Path, kids: list[Kid]
) -> None:
    # A management command started first, in the web server's container, that has not
    # collected yet: the server's first collection takes the role.
    command = instrumented(kids, service="web", collect_now=False)
    server = instrumented(kids, service="web")
    assert "system.memory.usage" in server.result
    assert not SHARED & set(command.ask("collect"))


def test_a_group_that_cannot_be_worked_out_reports_as_every_with_one_warning(
    rundir: Path, monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    from opentelemetry.instrumentation.process import shared_sources

    def unreadable(_service: str) -> Any:
        raise LookupError("unknown encoding: utf-8")  # the standard library after setuid

    monkeypatch.setattr(shared_sources, "group_of", unreadable)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    made = [ProcessMetrics(meter_provider=provider) for _ in range(2)]
    try:
        assert made[-1].group is None
        assert "system.memory.usage" in collect(reader)
    finally:
        for m in made:
            m.close()
        provider.shutdown()
    warned = [line for line in logged.lines if "cannot be worked out" in line]
    assert len(warned) == 1 and "LookupError" in warned[0], logged.lines


def test_a_failing_election_reports_as_every_and_never_raises(
    rundir: Path, monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    from opentelemetry.instrumentation.process.group.election import Election

    def broken(_self: Election) -> bool:
        raise RuntimeError("a fault of its own")  # another type: a warning of its own

    monkeypatch.setattr(Election, "leader", broken)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    made = ProcessMetrics(meter_provider=provider)
    try:
        for _ in range(3):
            assert "system.memory.usage" in collect(reader)
    finally:
        made.close()
        provider.shutdown()
    assert len([line for line in logged.lines if "cannot be worked out" in line]) == 1


QUICK_START = """
import sys, time
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.instrumentation.process import ProcessInstrumentor

exporter = ConsoleMetricExporter()
reader = PeriodicExportingMetricReader(exporter, export_interval_millis=15_000)
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
ProcessInstrumentor().instrument()
time.sleep(2)
"""


@pytest.mark.parametrize("mode", ["once", "every"])
def test_the_export_at_exit_has_the_shared_metrics(rundir: Path, mode: str) -> None:
    """The README's quick start, run for 2 s with a 15 s reader: one export, at exit."""
    env = {**os.environ, VAR: mode, "OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR": str(rundir)}
    done = subprocess.run(
        [sys.executable, "-c", QUICK_START], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    names = set(re.findall(r'"name": "([a-z_.]+)"', done.stdout))
    assert "process.cpu.time" in names, done.stdout[-2000:]
    assert {n for n in SHARED if n.startswith("system.")} & names >= {
        "system.cpu.time",
        "system.cpu.utilization",
        "system.memory.usage",
    }, sorted(names)


@pytest.mark.parametrize("how", ["fork", "cfork"])
def test_a_forked_child_of_the_reporter_does_not_report_them_too(
    rundir: Path, kids: list[Kid], how: str
) -> None:
    reporter = instrumented(kids, service="web")
    assert "system.memory.usage" in reporter.result
    forked = reporter.ask(how)
    assert "process.memory.usage" in forked and not SHARED & set(forked)
    assert "system.memory.usage" in reporter.ask("collect")  # the parent keeps the role
