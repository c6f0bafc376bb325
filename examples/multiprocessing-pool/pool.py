"""multiprocessing: process metrics in every worker of a Pool.

    python examples/multiprocessing-pool/pool.py

The Pool's ``initializer`` runs in each worker when it starts: each worker gets
its own MeterProvider, export thread and resource (its ``process.pid`` and a
random ``service.instance.id``). The parent only hands out work and reports
nothing here. ``ProcessPoolExecutor(initializer=setup_metrics)`` works the
same way. Pool workers leave through ``os._exit``, so no ``atexit`` handler runs
there: a multiprocessing finalizer exports one last time instead, when the
pool is closed and joined (``terminate()``, which the ``with`` block calls,
kills the workers before that).

Metrics go over OTLP/HTTP to ``localhost:4318`` unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``)
says otherwise; ``OTEL_METRIC_EXPORT_INTERVAL`` and ``OTEL_SERVICE_NAME`` apply.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.util
import os
import time
import uuid

SERVICE_NAME = "multiprocessing-example"
WORKERS = 2


def setup_metrics() -> None:
    """In each new worker: its own provider, resource and instrumentor."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    from opentelemetry.instrumentation.process import ProcessInstrumentor

    service = os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME
    # Set here, in the worker: its pid, and an instance id of its own
    # (explicit, so that every SDK version gives one).
    resource = Resource.create(
        {
            "service.name": service,
            "process.pid": os.getpid(),
            "service.instance.id": str(uuid.uuid4()),
        }
    )
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    ProcessInstrumentor().instrument(meter_provider=provider)
    # One last export when the worker exits after close() and join().
    multiprocessing.util.Finalize(None, provider.shutdown, exitpriority=10)
    print(f"worker {os.getpid()}: process metrics on", flush=True)


def work(cpu_seconds: float) -> int:
    """Burn this much CPU time; return the pid of the worker that did it."""
    deadline = time.process_time() + cpu_seconds
    while time.process_time() < deadline:
        pass
    return os.getpid()


def main() -> None:
    print(f"parent {os.getpid()}: starting {WORKERS} workers", flush=True)
    tasks = 4 * WORKERS
    each = float(os.environ.get("EXAMPLE_SECONDS", "2")) / tasks
    pool = multiprocessing.Pool(WORKERS, initializer=setup_metrics)
    try:
        pids = pool.map(work, [each] * tasks, chunksize=1)
    finally:
        pool.close()  # not terminate(): the workers' finalizers export one last time
        pool.join()
    burned = {str(pid): pids.count(pid) * each for pid in sorted(set(pids))}
    print(f"parent {os.getpid()}: CPU seconds burned by each worker {json.dumps(burned)}")


if __name__ == "__main__":
    main()
