"""gunicorn config: process metrics in every worker of a pre-fork server.

    gunicorn -c examples/gunicorn/gunicorn.conf.py --bind 127.0.0.1:8000 --workers 2

The rule: set up OpenTelemetry in each worker, after the fork (``post_fork``),
never in the master. Each worker then has its own MeterProvider, its own export
thread and its own resource (``process.pid`` and a random
``service.instance.id``), so its series never mix with another worker's. A
MeterProvider built in the master before the fork would be copied into every
worker with the master's identity, and its export thread would not survive the
fork.

Where the metrics go comes from the standard variables:
``OTEL_METRICS_EXPORTER=otlp`` (the default; endpoint and protocol from
``OTEL_EXPORTER_OTLP_*``) or ``console`` (one JSON line per export, with the
worker's pid and instance id first); ``OTEL_METRIC_EXPORT_INTERVAL`` in ms;
``OTEL_SERVICE_NAME``; and this package's ``OTEL_PYTHON_PROCESS_METRICS_*``.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

# gunicorn settings; command-line flags override them.
wsgi_app = "app:application"
chdir = str(Path(__file__).resolve().parent)
bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", "2"))
worker_class = "sync"
# gunicorn 24+ opens a control socket at one fixed path per user; two servers
# on one machine (tests, say) would fight over it. Older versions ignore this.
control_socket_disable = True

SERVICE_NAME = "gunicorn-example"
SUMMARY = ("process.cpu.time", "process.memory.usage", "process.thread.count")


def _console_line(data: Any) -> str:
    """One short JSON line per export: the worker's identity and a few values.

    One line keeps the output of concurrent workers from interleaving.
    """
    for rm in data.resource_metrics:
        values = {
            m.name: [p.value for p in m.data.data_points]
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name in SUMMARY
        }
        attrs = rm.resource.attributes
        line = {
            "process.pid": attrs.get("process.pid"),
            "service.instance.id": attrs.get("service.instance.id"),
            "service.name": attrs.get("service.name"),
            "metrics": values,
        }
        return json.dumps(line) + "\n"
    return ""


def _exporter() -> Any:
    kind = os.environ.get("OTEL_METRICS_EXPORTER", "otlp").strip()
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(formatter=_console_line)
    if kind != "otlp":
        raise ValueError(f"OTEL_METRICS_EXPORTER={kind!r}: this example knows otlp and console")
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    )
    if protocol.strip() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc import metric_exporter as grpc

        return grpc.OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http import metric_exporter as http

    return http.OTLPMetricExporter()


def post_fork(server: Any, worker: Any) -> None:
    """In the new worker: its own provider, resource and instrumentor."""
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
    provider = MeterProvider(
        metric_readers=[PeriodicExportingMetricReader(_exporter())], resource=resource
    )
    ProcessInstrumentor().instrument(meter_provider=provider)
    worker.otel_meter_provider = provider
    server.log.info("worker %s: process metrics on", worker.pid)


def worker_exit(server: Any, worker: Any) -> None:
    """Export one last time before the worker goes."""
    provider = getattr(worker, "otel_meter_provider", None)
    if provider is not None:
        provider.shutdown()
