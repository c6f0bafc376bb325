"""uWSGI: process metrics in every worker of a pre-fork server.

    uwsgi --ini examples/uwsgi/uwsgi.ini --http-socket 127.0.0.1:8000

The uWSGI master imports this module, then forks the workers. The ``postfork``
hook runs in each worker after the fork: each worker gets its own
MeterProvider, export thread and resource, and the master reports nothing.
The ``process_worker`` resource detector gives the worker a slot (the lowest
one free among the master's live workers) and a ``service.instance.id``
derived from it: a respawned worker takes the slot and the identity of the
one it replaces. One worker of the group reports the host, container and
pressure metrics (``shared_metrics``). ``uwsgi.ini`` turns
on ``enable-threads``, without which older uWSGI releases never run the export
thread (2.0.31 runs Python threads by itself).

Metrics go over OTLP/HTTP to ``localhost:4318`` unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``)
says otherwise; ``OTEL_METRIC_EXPORT_INTERVAL`` and ``OTEL_SERVICE_NAME`` apply.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from uwsgidecorators import postfork  # importable only inside uWSGI

SERVICE_NAME = "uwsgi-example"
SLOT = "process_metrics.worker.slot"


@postfork
def setup_metrics() -> None:
    """In each new worker: its own provider, resource and instrumentor."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    from opentelemetry.instrumentation.process import ProcessInstrumentor
    from opentelemetry.instrumentation.process.resource import ProcessWorkerResourceDetector

    service = os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME
    # This worker's slot and stable service.instance.id, on top of the SDK's defaults.
    resource = Resource.create({"service.name": service}).merge(
        ProcessWorkerResourceDetector().detect()
    )
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    instrumentor = ProcessInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        # Inherited from the master, instrumented there: it would report
        # through the master's provider.
        instrumentor.uninstrument()
    instrumentor.instrument(meter_provider=provider)
    said = "on" if instrumentor.options is not None else "NOT on"
    attrs = resource.attributes
    print(
        f"worker {os.getpid()}: process metrics {said}, slot {attrs.get(SLOT)},"
        f" service.instance.id {attrs.get('service.instance.id')}",
        flush=True,
    )


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = f"hello from uWSGI worker {os.getpid()}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
