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
says otherwise; ``OTEL_METRIC_EXPORT_INTERVAL`` and ``OTEL_SERVICE_NAME`` apply.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from celery import Celery
from celery.signals import worker_process_init, worker_process_shutdown

SERVICE_NAME = "celery-example"
SLOT = "process_metrics.worker.slot"

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


@worker_process_init.connect
def setup_metrics(**_: Any) -> None:
    """In each new pool process: its own provider, resource and instrumentor."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
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
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    instrumentor = ProcessInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        # Inherited from the main process, instrumented there: it would report
        # through the main process's provider.
        instrumentor.uninstrument()
    instrumentor.instrument(meter_provider=provider)
    said = "on" if instrumentor.options is not None else "NOT on"
    attrs = resource.attributes
    print(
        f"worker {os.getpid()}: process metrics {said}, slot {attrs.get(SLOT)},"
        f" service.instance.id {attrs.get('service.instance.id')}",
        flush=True,
    )
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
