"""multiprocessing: process metrics in every worker of a Pool.

    python examples/multiprocessing-pool/pool.py

The Pool's ``initializer`` runs in each worker when it starts: each worker gets
its own MeterProvider, export thread and resource. The ``process_worker``
resource detector gives it a slot (the lowest one free among the pool's live
workers) and a ``service.instance.id`` derived from it: a worker that replaces
one (``maxtasksperchild``) takes its identity. One worker of the group reports
the host, container and pressure metrics (``shared_metrics``). The parent only
hands out work and reports nothing here. ``ProcessPoolExecutor(initializer=
setup_metrics)`` works the same way. Pool workers leave through ``os._exit``,
so no ``atexit`` handler runs there: a multiprocessing finalizer exports one
last time instead, when the pool is closed and joined (``terminate()``, which
the ``with`` block calls, kills the workers before that).

``EXAMPLE_SECONDS`` is the CPU time the tasks burn in all (default 2),
``EXAMPLE_WORKERS`` the pool's size (default 2), ``EXAMPLE_TASKS`` the number
of tasks (default 4 per worker) and ``EXAMPLE_TASKS_PER_CHILD`` the
``maxtasksperchild`` (default none: no worker is replaced).

Metrics go over OTLP/HTTP to ``localhost:4318`` unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``)
says otherwise; ``OTEL_METRICS_EXPORTER=console`` prints them instead, one JSON
line per export with the worker's pid, slot and instance id first (no
collector needed). ``OTEL_METRIC_EXPORT_INTERVAL`` and ``OTEL_SERVICE_NAME`` apply.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.util
import os
import sys
import time
from typing import Any

SERVICE_NAME = "multiprocessing-example"
SLOT = "process_metrics.worker.slot"
SUMMARY = ("process.cpu.time", "process.memory.usage", "process.thread.count")
WORKERS = int(os.environ.get("EXAMPLE_WORKERS", "2"))


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
        # Inherited from the parent, instrumented there: it would report
        # through the parent's provider.
        instrumentor.uninstrument()
    instrumentor.instrument(meter_provider=provider)
    # One last export when the worker exits after close() and join().
    multiprocessing.util.Finalize(None, provider.shutdown, exitpriority=10)
    said = "on" if instrumentor.options is not None else "NOT on"
    attrs = resource.attributes
    # One write: unbuffered (PYTHONUNBUFFERED), print() writes the newline apart,
    # and two workers' lines can interleave.
    sys.stdout.write(
        f"worker {os.getpid()}: process metrics {said}, slot {attrs.get(SLOT)},"
        f" service.instance.id {attrs.get('service.instance.id')}\n"
    )
    sys.stdout.flush()


def work(cpu_seconds: float) -> int:
    """Burn this much CPU time; return the pid of the worker that did it."""
    deadline = time.process_time() + cpu_seconds
    while time.process_time() < deadline:
        pass
    return os.getpid()


def main() -> None:
    print(f"parent {os.getpid()}: starting {WORKERS} workers", flush=True)
    tasks = int(os.environ.get("EXAMPLE_TASKS", str(4 * WORKERS)))
    each = float(os.environ.get("EXAMPLE_SECONDS", "2")) / tasks
    per_child = int(os.environ.get("EXAMPLE_TASKS_PER_CHILD", "0")) or None
    pool = multiprocessing.Pool(WORKERS, initializer=setup_metrics, maxtasksperchild=per_child)
    try:
        pids = pool.map(work, [each] * tasks, chunksize=1)
    finally:
        pool.close()  # not terminate(): the workers' finalizers export one last time
        pool.join()
    burned = {str(pid): pids.count(pid) * each for pid in sorted(set(pids))}
    print(f"parent {os.getpid()}: CPU seconds burned by each worker {json.dumps(burned)}")


if __name__ == "__main__":
    main()
