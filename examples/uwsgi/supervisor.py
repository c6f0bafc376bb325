"""uWSGI: the master reports every worker (supervisor mode); no worker runs OpenTelemetry.

    uwsgi --ini examples/uwsgi/supervisor.ini --http-socket 127.0.0.1:8000

uWSGI imports this module in the master, then forks the workers. The provider
is built here, in the master, with ``children=True``: each collection reads
every worker from outside and reports it by slot
(``process_metrics.worker.slot``), with the ``process_metrics.tree.*``
totals. A worker has a copy of the provider in its memory, and:

- the instrumentation is turned off in it at the fork, and its exporter
  sends nothing from any process but the master;
- its shutdown at exit is skipped (``shutdown_on_exit=False``, and the
  ``atexit`` hook here shuts down in the master only), so it never waits for
  an export thread it lacks;
- the runtime metrics (``cpython.*``) are left out, so no garbage-collector
  hook is copied into it either.

``supervisor.ini`` sets ``py-call-uwsgi-fork-hooks``: with uWSGI's default fork,
a worker forked while the master's metrics thread holds the GIL (serving a
scrape, exporting) waits for it forever. The tests saw it in one respawn of
three while scraping; see docs/supervisor.md.

Where the metrics go: ``OTEL_METRICS_EXPORTER=prometheus`` (the default here:
one ``/metrics`` endpoint in the master, on ``OTEL_EXPORTER_PROMETHEUS_HOST``
and ``_PORT``, default localhost:9464), ``otlp`` (OTLP/HTTP, endpoint from
``OTEL_EXPORTER_OTLP_*``) or ``console``; ``OTEL_METRIC_EXPORT_INTERVAL`` and
``OTEL_SERVICE_NAME`` apply.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource

from opentelemetry.instrumentation.process import ProcessInstrumentor

SERVICE_NAME = "uwsgi-example"
MASTER = os.getpid()


def _reader(kind: str) -> Any:
    if kind == "prometheus":
        import prometheus_client
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        for collector in (
            prometheus_client.PROCESS_COLLECTOR,
            prometheus_client.PLATFORM_COLLECTOR,
            prometheus_client.GC_COLLECTOR,
        ):
            with contextlib.suppress(KeyError):  # already gone
                prometheus_client.REGISTRY.unregister(collector)
        host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "localhost")
        port = int(os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464"))
        prometheus_client.start_http_server(port, addr=host)
        return PrometheusMetricReader()
    from opentelemetry.sdk.metrics.export import (
        ConsoleMetricExporter,
        PeriodicExportingMetricReader,
    )

    if kind == "console":
        return PeriodicExportingMetricReader(_MasterOnly(ConsoleMetricExporter()))
    if kind != "otlp":
        raise ValueError(f"OTEL_METRICS_EXPORTER={kind!r}: use prometheus, otlp or console")
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return PeriodicExportingMetricReader(_MasterOnly(OTLPMetricExporter()))


class _MasterOnly:
    """Wraps an exporter: a worker's copy (its thread restarted by the fork hooks) sends nothing."""

    def __init__(self, exporter: Any) -> None:
        self._exporter = exporter

    def __getattr__(self, name: str) -> Any:
        return getattr(self._exporter, name)

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
        from opentelemetry.sdk.metrics.export import MetricExportResult

        if os.getpid() != MASTER:
            return MetricExportResult.SUCCESS
        return self._exporter.export(metrics_data, timeout_millis=timeout_millis, **kwargs)


def _setup() -> MeterProvider:
    kind = os.environ.get("OTEL_METRICS_EXPORTER", "prometheus").strip()
    resource = Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME,
            "process.pid": MASTER,
            "service.instance.id": str(uuid.uuid4()),
        }
    )
    provider = MeterProvider(
        metric_readers=[_reader(kind)], resource=resource, shutdown_on_exit=False
    )
    ProcessInstrumentor().instrument(
        meter_provider=provider,
        children=True,
        exclude=["cpython.*", "process_metrics.cpython.*"],
    )
    return provider


PROVIDER = _setup()


def _off_in_worker() -> None:
    ProcessInstrumentor().uninstrument()  # the master's copy: it reports nothing here


os.register_at_fork(after_in_child=_off_in_worker)


@atexit.register
def _shutdown() -> None:
    if os.getpid() == MASTER:  # a worker has no export thread to wait for
        PROVIDER.shutdown()


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = f"hello from uWSGI worker {os.getpid()}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
