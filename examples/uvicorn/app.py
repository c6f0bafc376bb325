"""uvicorn ``--workers``: process metrics in every worker, one stable identity each.

    cd examples/uvicorn && uvicorn app:app --workers 2 --port 8000

uvicorn's supervisor starts its workers with ``spawn``, not fork: each worker
is a fresh interpreter that imports this module itself, and the supervisor
never does. The metrics are set up in the ASGI lifespan's startup, in the
worker, and exported one last time at its shutdown. The workers share a
parent (the supervisor), so the ``process_worker`` resource detector gives
each a slot among them and a ``service.instance.id`` derived from it: a
worker that the supervisor starts in place of a dead one takes that slot and
that identity. One worker of the group reports the host, container and
pressure metrics (``shared_metrics``).

Metrics go over OTLP/HTTP to ``localhost:4318`` unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``)
says otherwise; ``OTEL_METRIC_EXPORT_INTERVAL`` and ``OTEL_SERVICE_NAME`` apply.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

SERVICE_NAME = "uvicorn-example"
SLOT = "process_metrics.worker.slot"

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_providers: list[Any] = []


def setup_metrics() -> None:
    """In the worker, at its start: its own provider, resource and instrumentor."""
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
        # opentelemetry-instrument ran in this worker too (spawn re-runs it):
        # it reports through a provider without the worker's identity.
        instrumentor.uninstrument()
    instrumentor.instrument(meter_provider=provider)
    _providers.append(provider)
    said = "on" if instrumentor.options is not None else "NOT on"
    attrs = resource.attributes
    print(
        f"worker {os.getpid()}: process metrics {said}, slot {attrs.get(SLOT)},"
        f" service.instance.id {attrs.get('service.instance.id')}",
        flush=True,
    )


def flush_metrics() -> None:
    """Export one last time before the worker exits."""
    while _providers:
        _providers.pop().shutdown()


async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                setup_metrics()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                flush_metrics()
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = f"served by uvicorn worker {os.getpid()}\n".encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
