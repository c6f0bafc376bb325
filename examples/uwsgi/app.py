"""uWSGI: process metrics in every worker of a pre-fork server.

    uwsgi --ini examples/uwsgi/uwsgi.ini --http-socket 127.0.0.1:8000

The uWSGI master imports this module, then forks the workers. The ``postfork``
hook runs in each worker after the fork: each worker gets its own
MeterProvider, export thread and resource (its ``process.pid`` and a random
``service.instance.id``), and the master reports nothing. ``uwsgi.ini`` turns
on ``enable-threads``, without which older uWSGI releases never run the export
thread (2.0.31 runs Python threads by itself).

Metrics go over OTLP/HTTP to ``localhost:4318`` unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``)
says otherwise; ``OTEL_METRIC_EXPORT_INTERVAL`` and ``OTEL_SERVICE_NAME`` apply.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from uwsgidecorators import postfork  # importable only inside uWSGI

SERVICE_NAME = "uwsgi-example"


@postfork
def setup_metrics() -> None:
    """In each new worker: its own provider, resource and instrumentor."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    from opentelemetry.instrumentation.process import ProcessInstrumentor

    service = os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME
    # Set here, in the worker: this worker's pid, and an instance id of its own
    # (explicit, so that every SDK version gives one).
    resource = Resource.create(
        {
            "service.name": service,
            "process.pid": os.getpid(),
            "service.instance.id": str(uuid.uuid4()),
        }
    )
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    ProcessInstrumentor().instrument(meter_provider=provider)


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = f"hello from uWSGI worker {os.getpid()}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
