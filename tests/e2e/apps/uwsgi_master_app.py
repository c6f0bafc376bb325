"""A uWSGI application instrumented at import time, in the master: not the recipe.

    uwsgi --ini uwsgi_master.ini --http-socket 127.0.0.1:8000

The master imports this module, so the MeterProvider, its export thread and
the instrumentation are set up there, before uWSGI forks the workers. What a
worker then reports depends on whether uWSGI runs Python's at-fork hooks in it
(``--py-call-osafterfork``, ``--py-call-uwsgi-fork-hooks``) or not (its
default). The tests in ``test_uwsgi_forks.py`` look at both.

Two readers on one provider:

- a periodic OTLP/HTTP reader (``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``,
  ``OTEL_METRIC_EXPORT_INTERVAL``): what each process pushes by itself;
- a Prometheus reader served by the application at ``/metrics``: each scrape
  collects in the worker that serves it, which names itself in the
  ``X-Worker-Pid`` header.

The resource comes from the SDK's detectors (set
``OTEL_EXPERIMENTAL_RESOURCE_DETECTORS=process`` for ``process.pid``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from opentelemetry.instrumentation.process import ProcessInstrumentor

PROVIDER = MeterProvider(
    metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter()), PrometheusMetricReader()]
)
ProcessInstrumentor().instrument(meter_provider=PROVIDER)


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    pid = str(os.getpid())
    if environ.get("PATH_INFO") == "/metrics":
        body = generate_latest(REGISTRY)
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("X-Worker-Pid", pid)])
        return [body]
    start_response("200 OK", [("Content-Type", "text/plain"), ("X-Worker-Pid", pid)])
    return [f"hello from uWSGI worker {pid}\n".encode()]
