"""uWSGI's default fork: a mule reports the whole server; the master runs no Python thread.

    uwsgi --ini examples/uwsgi/mule.ini --http-socket 127.0.0.1:8000

The master imports this module for ``application`` only, and forks the
workers with uWSGI's default fork (no Python at-fork hook). No OpenTelemetry
is set up in the master or in any worker. ``mule.ini`` also starts one uWSGI
mule running this file as a script: the mule sets up the provider with
``children=True`` and ``tree_root="parent"``, and reports the master's tree:
every worker by slot (``process_metrics.worker.slot``; the mule itself has
none), and the ``process_metrics.tree.*`` totals of the master and all its
children. Since the master has no Python thread, no worker can be forked while
one holds the GIL (see docs/supervisor.md).

Where the metrics go: ``OTEL_METRICS_EXPORTER=prometheus`` (the default here:
``/metrics`` served by the mule, on ``OTEL_EXPORTER_PROMETHEUS_HOST`` and
``_PORT``, default localhost:9464), ``otlp`` (OTLP/HTTP, endpoint from
``OTEL_EXPORTER_OTLP_*``) or ``console``; ``OTEL_METRIC_EXPORT_INTERVAL`` and
``OTEL_SERVICE_NAME`` apply.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any

SERVICE_NAME = "uwsgi-example"


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = f"hello from uWSGI worker {os.getpid()}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


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
        return PeriodicExportingMetricReader(ConsoleMetricExporter())
    if kind != "otlp":
        raise ValueError(f"OTEL_METRICS_EXPORTER={kind!r}: use prometheus, otlp or console")
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return PeriodicExportingMetricReader(OTLPMetricExporter())


def supervise() -> None:
    """In the mule: report the master's tree until the mule is stopped."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    from opentelemetry.instrumentation.process import ProcessInstrumentor

    kind = os.environ.get("OTEL_METRICS_EXPORTER", "prometheus").strip()
    resource = Resource.create(
        {
            "service.name": os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME,
            "process.pid": os.getpid(),  # the reporter: this mule
            "service.instance.id": str(uuid.uuid4()),
        }
    )
    provider = MeterProvider(metric_readers=[_reader(kind)], resource=resource)
    # The mule's own runtime is of no interest: its process and the tree's are.
    ProcessInstrumentor().instrument(
        meter_provider=provider,
        children=True,
        tree_root="parent",
        exclude=["cpython.*", "process_metrics.cpython.*"],
    )
    threading.Event().wait()  # the reader's threads do the work


if __name__ == "__main__":  # uWSGI runs a mule's .py file as __main__
    supervise()
