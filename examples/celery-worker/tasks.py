"""Celery's prefork pool: process metrics in every pool process.

    celery -A tasks worker --pool=prefork --concurrency=2     # from examples/celery-worker

The worker's main process forks the pool processes that run the tasks. The
``worker_process_init`` signal fires in each of them after the fork: each gets
its own MeterProvider, export thread and resource. The ``process_worker``
resource detector gives it a slot (the lowest one free among the pool's live
processes) and a ``service.instance.id`` derived from it: a pool process that
replaces a recycled one (``--max-tasks-per-child``) takes its identity. One
process of the group reports the host, container and pressure metrics
(``shared_metrics``). ``worker_process_shutdown`` exports one last time before
it goes. The main process reports nothing.

The broker is ``CELERY_BROKER_URL``. The default, ``filesystem://``, keeps the
queue in a local folder (``CELERY_BROKER_FOLDER``, default under the temporary
folder): enough to try it on one machine, with no broker server.

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
import tempfile
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

SERVICE_NAME = "celery-example"
SLOT = "process_metrics.worker.slot"
SUMMARY = ("process.cpu.time", "process.memory.usage", "process.thread.count")

BROKER = os.environ.get("CELERY_BROKER_URL", "filesystem://")
app = Celery("tasks", broker=BROKER)
if BROKER == "filesystem://":
    folder = os.environ.get("CELERY_BROKER_FOLDER") or os.path.join(
        tempfile.gettempdir(), "celery-example-broker"
    )
    os.makedirs(folder, exist_ok=True)
    app.conf.broker_transport_options = {
        "data_folder_in": folder,
        "data_folder_out": folder,
        "control_folder": os.path.join(folder, "control"),
    }
_providers: list[Any] = []


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
        # Celery logs what a pool process prints (worker_redirect_stdouts); the real
        # stdout keeps one JSON line per export.

        return ConsoleMetricExporter(out=sys.__stdout__, formatter=_console_line)
    if kind != "otlp":
        raise ValueError(f"OTEL_METRICS_EXPORTER={kind!r}: this example knows otlp and console")
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()


@worker_process_init.connect
def setup_metrics(**_: Any) -> None:
    """In each new pool process: its own provider, resource and instrumentor."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    from opentelemetry.instrumentation.process import ProcessInstrumentor
    from opentelemetry.instrumentation.process.resource import ProcessWorkerResourceDetector

    service = os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME
    # This pool process's slot and stable service.instance.id, on top of the SDK's defaults.
    resource = Resource.create({"service.name": service}).merge(
        ProcessWorkerResourceDetector().detect()
    )
    reader = PeriodicExportingMetricReader(_exporter())
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    instrumentor = ProcessInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        # Inherited from the main process, instrumented there: it would report
        # through the main process's provider.
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
    _providers.append(provider)


@worker_process_shutdown.connect
def flush_metrics(**_: Any) -> None:
    """Export one last time before the pool process exits."""
    for provider in _providers:
        provider.shutdown()


@app.task
def pid() -> int:
    """The pid of the pool process that ran the task."""
    return os.getpid()
