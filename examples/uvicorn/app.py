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
says otherwise; ``OTEL_METRICS_EXPORTER=console`` prints them instead, one JSON
line per export with the worker's pid, slot and instance id first (no
collector needed). ``OTEL_METRIC_EXPORT_INTERVAL`` and ``OTEL_SERVICE_NAME`` apply.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

SERVICE_NAME = "uvicorn-example"
SLOT = "process_metrics.worker.slot"
SUMMARY = ("process.cpu.time", "process.memory.usage", "process.thread.count")

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

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

        return ConsoleMetricExporter(formatter=_console_line)
    if kind != "otlp":
        raise ValueError(f"OTEL_METRICS_EXPORTER={kind!r}: this example knows otlp and console")
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter()


def setup_metrics() -> None:
    """In the worker, at its start: its own provider, resource and instrumentor."""
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
        # opentelemetry-instrument ran in this worker too (spawn re-runs it):
        # it reports through a provider without the worker's identity.
        instrumentor.uninstrument()
    instrumentor.instrument(meter_provider=provider)
    _providers.append(provider)
    said = "on" if instrumentor.options is not None else "NOT on"
    attrs = resource.attributes
    # One write: unbuffered (PYTHONUNBUFFERED), print() writes the newline apart,
    # and two workers' lines can interleave.
    sys.stdout.write(
        f"worker {os.getpid()}: process metrics {said}, slot {attrs.get(SLOT)},"
        f" service.instance.id {attrs.get('service.instance.id')}\n"
    )
    sys.stdout.flush()


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
