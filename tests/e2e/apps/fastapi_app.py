"""A FastAPI application traced as FastAPI's instrumentation documents it, for a real uvicorn.

Run as ``uvicorn fastapi_app:app --loop asyncio``. Everything is set up in code, at
import (which uvicorn does in its running loop), the way a user does it by hand:

- a ``TracerProvider`` (sampling every trace, the SDK's default) and a
  ``MeterProvider``, both exporting OTLP/HTTP to ``OTEL_EXPORTER_OTLP_ENDPOINT``
  (the collector), traces through a ``BatchSpanProcessor``;
- ``FastAPIInstrumentor.instrument_app``: a server span per request (and the
  request-duration histogram);
- ``ProcessInstrumentor().instrument(event_loop=True)``: the loop's stalls are
  recorded into ``process_metrics.eventloop.stall.duration``, long GC pauses
  into ``process_metrics.cpython.gc.stall.duration`` (a default).

Routes:

- ``/``: answers at once;
- ``/slow``: blocks the event loop with ``time.sleep(0.2)`` inside the async
  handler, as synchronous code in a coroutine does, and prints
  ``slow trace_id=<32 hex> span_id=<16 hex> blocked=<seconds>``: the span that
  ``trace.get_current_span()`` gives in the handler, and the block by its own
  clock;
- ``/gc``: a full collection (``gc.collect()``) inside the handler, of a cyclic
  graph built for it, doubled until the collection lasts ``GC_PAUSE`` or more
  by the app's own clock, and prints ``gc trace_id=<32 hex> span_id=<16 hex>
  pause=<seconds> nodes=<n>``.

Those printed lines are the truth the test compares the exemplars with. At
shutdown (the lifespan), both providers flush and stop.
"""

from __future__ import annotations

import gc
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from opentelemetry import trace
from opentelemetry.instrumentation.process import ProcessInstrumentor

BLOCK = 0.2
GC_PAUSE = 0.15
"""Seconds a collection of ``/gc`` lasts at least: the package records pauses of 0.1 s or more."""
GRAPH = 250_000
MAX_GRAPH = 8_000_000

# Resource.create() reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the
# exporters read OTEL_EXPORTER_OTLP_ENDPOINT, the reader OTEL_METRIC_EXPORT_INTERVAL.
resource = Resource.create()
tracer_provider = TracerProvider(resource=resource)
tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
trace.set_tracer_provider(tracer_provider)
meter_provider = MeterProvider(
    resource=resource, metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())]
)


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    yield
    ProcessInstrumentor().uninstrument()
    meter_provider.shutdown()  # one last export
    tracer_provider.shutdown()


app = FastAPI(lifespan=lifespan)


def _span_ids() -> str:
    context = trace.get_current_span().get_span_context()
    return (
        f"trace_id={trace.format_trace_id(context.trace_id)}"
        f" span_id={trace.format_span_id(context.span_id)}"
    )


@app.get("/", response_class=PlainTextResponse)
async def root() -> str:
    return "ok"


@app.get("/slow", response_class=PlainTextResponse)
async def slow() -> str:
    t0 = time.monotonic()
    time.sleep(BLOCK)  # blocks the loop: every other request waits
    blocked = time.monotonic() - t0
    line = f"slow {_span_ids()} blocked={blocked!r}"
    print(line, flush=True)
    return line


def _collect(nodes: int) -> float:
    """Seconds of a full collection that frees a cycle of ``nodes`` lists."""
    was = gc.isenabled()
    gc.disable()  # the graph must not go in an automatic collection
    try:
        graph: list[list[object]] = [[] for _ in range(nodes)]
        for i, node in enumerate(graph):
            node.append(graph[i - 1])
        del graph
        t0 = time.perf_counter()
        gc.collect()
        return time.perf_counter() - t0
    finally:
        if was:
            gc.enable()


@app.get("/gc", response_class=PlainTextResponse)
async def collect() -> str:
    nodes = GRAPH
    while (pause := _collect(nodes)) < GC_PAUSE and nodes < MAX_GRAPH:
        nodes *= 2
    line = f"gc {_span_ids()} pause={pause!r} nodes={nodes}"
    print(line, flush=True)
    return line


FastAPIInstrumentor.instrument_app(
    app, tracer_provider=tracer_provider, meter_provider=meter_provider
)
ProcessInstrumentor().instrument(meter_provider=meter_provider, event_loop=True)
print("instrumented", flush=True)
