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
says otherwise; ``OTEL_METRICS_EXPORTER=console`` prints them instead, one JSON
line per export with the worker's pid, slot and instance id first (no
collector needed). ``OTEL_METRIC_EXPORT_INTERVAL`` and ``OTEL_SERVICE_NAME`` apply.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from uwsgidecorators import postfork  # importable only inside uWSGI

SERVICE_NAME = "uwsgi-example"
SLOT = "process_metrics.worker.slot"
SUMMARY = ("process.cpu.time", "process.memory.usage", "process.thread.count")


def _console_line(data: Any) -> str:
    """One short JSON line per export: the worker's identity and a few values.

    One line keeps the output of concurrent workers from interleaving.
    """
    for rm in data.resource_metrics:
        metrics = [m for sm in rm.scope_metrics for m in sm.metrics]
        values = {m.name: [p.value for p in m.data.data_points] for m in metrics}
        attrs = rm.resource.attributes
        line = {
            "pid": os.getpid(),  # the exporter runs in the worker
            "service.instance.id": attrs.get("service.instance.id"),
            SLOT: attrs.get(SLOT),
            "service.name": attrs.get("service.name"),
            "metrics": {name: v for name, v in values.items() if name in SUMMARY},
            "shared": sorted(n for n in values if n.startswith("system.")),
        }
        return json.dumps(line) + "\n"
    return ""


def _exporter() -> Any:
    """``OTEL_METRICS_EXPORTER``: ``otlp`` (the default, over HTTP) or ``console``."""
    kind = os.environ.get("OTEL_METRICS_EXPORTER", "otlp").strip()
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(formatter=_console_line)
    if kind != "otlp":
        raise ValueError(f"OTEL_METRICS_EXPORTER={kind!r}: this example knows otlp and console")
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()


@postfork
def setup_metrics() -> None:
    """In each new worker: its own provider, resource and instrumentor."""
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
    reader = PeriodicExportingMetricReader(_exporter())
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    instrumentor = ProcessInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        # Inherited from the master, instrumented there: it would report
        # through the master's provider.
        instrumentor.uninstrument()
    instrumentor.instrument(meter_provider=provider)
    said = "on" if instrumentor.options is not None else "NOT on"
    attrs = resource.attributes
    # One write: unbuffered (PYTHONUNBUFFERED), print() writes the newline apart,
    # and two workers' lines can interleave.
    sys.stdout.write(
        f"worker {os.getpid()}: process metrics {said}, slot {attrs.get(SLOT)},"
        f" service.instance.id {attrs.get('service.instance.id')}\n"
    )
    sys.stdout.flush()


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = f"hello from uWSGI worker {os.getpid()}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
