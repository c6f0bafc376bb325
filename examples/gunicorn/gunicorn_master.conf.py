"""gunicorn config: the master reports every worker (supervisor mode); workers run no exporter.

    gunicorn -c examples/gunicorn/gunicorn_master.conf.py --bind 127.0.0.1:8000 --workers 3

The master sets up OpenTelemetry once it is ready (``when_ready``), with
``children=True``: each collection also reads every worker from outside, and
reports it with its slot (``process_metrics.worker.slot``), plus the
``process_metrics.tree.*`` totals of the whole server. A slot is the lowest
number free when the master first sees a worker, so a worker recycled by
``--max-requests`` comes back under the same series.

A worker is forked from the master with the master's provider in its memory.
It must not export it: ``post_fork`` turns the instrumentation off in the
worker, and the exporter below sends nothing from any process but the one
that built it (the SDK restarts a periodic reader's thread in a forked child).

The same variables as ``gunicorn.conf.py`` say where the metrics go:
``OTEL_METRICS_EXPORTER=otlp`` (the default; endpoint and protocol from
``OTEL_EXPORTER_OTLP_*``), ``console`` (one JSON line per export), or
``prometheus``: one ``/metrics`` endpoint in the master, on
``OTEL_EXPORTER_PROMETHEUS_HOST``/``_PORT`` (default localhost:9464), listing
every live slot. ``OTEL_METRIC_EXPORT_INTERVAL`` in ms, ``OTEL_SERVICE_NAME``
and this package's ``OTEL_PYTHON_PROCESS_METRICS_*`` apply (``CHILDREN`` is
forced on here).

``GUNICORN_WORKER_METRICS=runtime`` is the mixed recipe: each worker also
reports its own runtime metrics (``cpython.*``, which only the process itself
can read), selected by name, while the master keeps reporting the workers'
process metrics. Nothing is reported twice.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# gunicorn settings; command-line flags override them.
wsgi_app = "app:application"
chdir = str(Path(__file__).resolve().parent)
bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", "2"))
worker_class = "sync"
control_socket_disable = True  # see gunicorn.conf.py

SERVICE_NAME = "gunicorn-example"
SLOT = "process_metrics.worker.slot"
RUNTIME_ONLY = (
    "process.*",
    "system.*",
    "process_metrics.cpu.*",
    "process_metrics.memory.*",
    "process_metrics.unix.*",
    "process_metrics.refresh.*",
)
"""What a worker leaves out in the mixed recipe: all but its runtime (``cpython.*``).

With ``saturation=False`` too: the cgroup and pressure metrics are the master's.
"""


def _console_line(data: Any) -> str:
    """One JSON line per export: the reporter's pid and role, and RSS by slot."""
    for rm in data.resource_metrics:
        rss: dict[str, int] = {}
        names: list[str] = []
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                names.append(m.name)
                if m.name == "process.memory.usage":
                    for p in m.data.data_points:
                        rss[str(p.attributes.get(SLOT, "master"))] = p.value
        attrs = rm.resource.attributes
        line = {
            "process.pid": attrs.get("process.pid"),
            "role": attrs.get("gunicorn.role"),
            "rss_by_slot": rss,
            "metrics": sorted(names),
        }
        return json.dumps(line) + "\n"
    return ""


class _OwnProcessOnly:
    """Wraps an exporter: exports only from the process that built it.

    A forked worker inherits the master's reader, and the SDK restarts its
    export thread there; what it would send is the master's provider seen
    from the worker, under the master's resource. It is dropped instead.
    """

    def __init__(self, exporter: Any) -> None:
        self._exporter = exporter
        self._pid = os.getpid()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._exporter, name)

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> Any:
        from opentelemetry.sdk.metrics.export import MetricExportResult

        if os.getpid() != self._pid:
            return MetricExportResult.SUCCESS
        return self._exporter.export(metrics_data, timeout_millis=timeout_millis, **kwargs)

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        if os.getpid() == self._pid:
            self._exporter.shutdown(*args, **kwargs)


def _push_exporter(kind: str) -> Any:
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(formatter=_console_line)
    if kind != "otlp":
        raise ValueError(
            f"OTEL_METRICS_EXPORTER={kind!r}: this example knows otlp, console and prometheus"
        )
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    )
    if protocol.strip() == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc import metric_exporter as grpc

        return grpc.OTLPMetricExporter()
    from opentelemetry.exporter.otlp.proto.http import metric_exporter as http

    return http.OTLPMetricExporter()


def _reader(kind: str) -> Any:
    if kind == "prometheus":
        import prometheus_client
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        # prometheus_client's own process collector would report the master
        # again under other names.
        for collector in (
            prometheus_client.PROCESS_COLLECTOR,
            prometheus_client.PLATFORM_COLLECTOR,
            prometheus_client.GC_COLLECTOR,
        ):
            with contextlib.suppress(KeyError):  # already gone
                prometheus_client.REGISTRY.unregister(collector)
        host = os.environ.get("OTEL_EXPORTER_PROMETHEUS_HOST", "localhost")
        port = int(os.environ.get("OTEL_EXPORTER_PROMETHEUS_PORT", "9464"))
        prometheus_client.start_http_server(port, addr=host)
        return PrometheusMetricReader()
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    return PeriodicExportingMetricReader(_OwnProcessOnly(_push_exporter(kind)))


def _provider(role: str, readers: Sequence[Any]) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource

    service = os.environ.get("OTEL_SERVICE_NAME") or SERVICE_NAME
    resource = Resource.create(
        {
            "service.name": service,
            "process.pid": os.getpid(),
            "service.instance.id": str(uuid.uuid4()),
            "gunicorn.role": role,
        }
    )
    # The master's provider is shut down by on_exit, in the master only: a
    # worker's copy must not run its shutdown at exit, which could wait on a
    # lock that a thread of the master held at the fork.
    return MeterProvider(
        metric_readers=list(readers), resource=resource, shutdown_on_exit=role != "master"
    )


def when_ready(server: Any) -> None:
    """In the master, before the first worker is forked: the supervisor's provider."""
    from opentelemetry.instrumentation.process import ProcessInstrumentor

    kind = os.environ.get("OTEL_METRICS_EXPORTER", "otlp").strip()
    provider = _provider("master", [_reader(kind)])
    ProcessInstrumentor().instrument(meter_provider=provider, children=True)
    server.otel_meter_provider = provider
    server.log.info("master %s: process metrics of every worker on (%s)", os.getpid(), kind)


def post_fork(server: Any, worker: Any) -> None:
    """In each new worker: the master's copy off; the mixed recipe's own, if asked."""
    from opentelemetry.instrumentation.process import ProcessInstrumentor

    ProcessInstrumentor().uninstrument()  # the master's copy: it reports nothing here
    if os.environ.get("GUNICORN_WORKER_METRICS", "").strip() != "runtime":
        return
    kind = os.environ.get("OTEL_METRICS_EXPORTER", "otlp").strip()
    if kind == "prometheus":
        server.log.warning("GUNICORN_WORKER_METRICS=runtime needs otlp or console")
        return
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    provider = _provider("worker", [PeriodicExportingMetricReader(_push_exporter(kind))])
    ProcessInstrumentor().instrument(
        meter_provider=provider, exclude=list(RUNTIME_ONLY), saturation=False
    )
    worker.otel_meter_provider = provider


def child_exit(server: Any, worker: Any) -> None:
    """In the master, after it reaped a worker: one killed for its timeout counts as such.

    Without it, ``process_metrics.tree.process.exits`` counts that worker by its
    status alone: the ``SIGKILL`` gunicorn sends after its ``SIGABRT`` (a ``signal``,
    or an ``oom_kill`` if its cgroup counted one meanwhile), or the code it exited with.
    """
    from opentelemetry.instrumentation.process import gunicorn_child_exit

    gunicorn_child_exit(server, worker)


def worker_exit(server: Any, worker: Any) -> None:
    """A worker of the mixed recipe exports one last time."""
    provider = getattr(worker, "otel_meter_provider", None)
    if provider is not None:
        provider.shutdown()


def on_exit(server: Any) -> None:
    """The master exports one last time."""
    provider = getattr(server, "otel_meter_provider", None)
    if provider is not None:
        provider.shutdown()
