"""gunicorn config: process metrics for a pre-fork server, one stable identity per worker.

    gunicorn -c examples/gunicorn/gunicorn.conf.py --bind 127.0.0.1:8000 --workers 2
    export OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=system_metrics  # see below
    cd examples/gunicorn && opentelemetry-instrument gunicorn app:application --workers 2

The variable keeps out the peer instrumentor, which the project's venv also
holds and ``opentelemetry-instrument`` would turn on too; a venv without it
needs none.

The rule: set up OpenTelemetry in each worker, after the fork (``post_fork``),
never in the master. Each worker then has its own MeterProvider, its own export
thread and its own resource. The ``process_worker`` resource detector gives
the worker a slot (the lowest one free among the live workers of this master)
and a ``service.instance.id`` derived from that slot, the master and the host:
a worker that replaces a recycled or killed one takes its slot and its
identity, so the series do not churn. The host, container and pressure
metrics are the same in every worker: one worker of the group reports them
(the option ``shared_metrics``).

Under ``opentelemetry-instrument`` (gunicorn loads this file by itself from
the folder it runs in), the master is instrumented before it forks:
``on_starting`` turns that off again in the master, and ``post_fork`` replaces
whatever a worker inherited with the worker's own set-up.

Where the metrics go comes from the standard variables:
``OTEL_METRICS_EXPORTER=otlp`` (the default; endpoint and protocol from
``OTEL_EXPORTER_OTLP_*``) or ``console`` (one JSON line per export, with the
worker's pid, slot and instance id first); ``OTEL_METRIC_EXPORT_INTERVAL`` in
ms; ``OTEL_SERVICE_NAME``; and this package's ``OTEL_PYTHON_PROCESS_METRICS_*``.
"""

from __future__ import annotations

import json
import os
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
SLOT = "process_metrics.worker.slot"


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


def on_starting(server: Any) -> None:
    """In the master, before any fork: no process metrics here.

    Only ``opentelemetry-instrument`` turns them on in the master; the master
    runs none of the application, and would be one more instance.
    """
    from opentelemetry.instrumentation.process import ProcessInstrumentor

    instrumentor = ProcessInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
        server.log.info(
            "master %s: process metrics off here (opentelemetry-instrument had turned them on);"
            " each worker reports itself",
            os.getpid(),
        )


def post_fork(server: Any, worker: Any) -> None:
    """In the new worker: its own provider, resource and instrumentor."""
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
    provider = MeterProvider(
        metric_readers=[PeriodicExportingMetricReader(_exporter())], resource=resource
    )
    instrumentor = ProcessInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        # Inherited from the master (instrumented there, at import or by
        # opentelemetry-instrument): it would report through the master's provider.
        instrumentor.uninstrument()
        server.log.info("worker %s: replaced the process metrics inherited", worker.pid)
    instrumentor.instrument(meter_provider=provider)
    worker.otel_meter_provider = provider
    if instrumentor.options is None:
        server.log.warning("worker %s: process metrics are NOT on", worker.pid)
        return
    attrs = resource.attributes
    server.log.info(
        "worker %s: process metrics on, slot %s, service.instance.id %s",
        worker.pid,
        attrs.get(SLOT),
        attrs.get("service.instance.id"),
    )


def worker_exit(server: Any, worker: Any) -> None:
    """Export one last time before the worker goes."""
    provider = getattr(worker, "otel_meter_provider", None)
    if provider is not None:
        provider.shutdown()
