"""gunicorn config of the sizing benchmark: the example's recipe ("after") or the old ("before").

``SIZING_RECIPE=after`` is examples/gunicorn/gunicorn.conf.py as it is: a slot
identity per worker, shared metrics from one worker. ``SIZING_RECIPE=before``
is the recipe this package shipped until then: a random ``service.instance.id``
and the ``process.pid`` in every worker's resource, and every worker reporting
the shared metrics (``shared_metrics="every"``).
"""

from __future__ import annotations

import importlib.util
import os
import uuid
from pathlib import Path
from typing import Any

_EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "gunicorn" / "gunicorn.conf.py"
_spec = importlib.util.spec_from_file_location("gunicorn_example_conf", _EXAMPLE)
assert _spec is not None and _spec.loader is not None
example: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(example)

wsgi_app = example.wsgi_app
chdir = example.chdir
bind = example.bind
workers = example.workers
worker_class = "sync"
control_socket_disable = True
worker_exit = example.worker_exit
on_starting = example.on_starting
loglevel = "warning"


def post_fork(server: Any, worker: Any) -> None:
    if os.environ.get("SIZING_RECIPE", "after") == "after":
        example.post_fork(server, worker)
        return
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    from opentelemetry.instrumentation.process import ProcessInstrumentor

    resource = Resource.create(
        {
            "service.name": os.environ["OTEL_SERVICE_NAME"],
            "process.pid": os.getpid(),
            "service.instance.id": str(uuid.uuid4()),
        }
    )
    reader = PeriodicExportingMetricReader(example._exporter())
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    ProcessInstrumentor().instrument(meter_provider=provider, shared_metrics="every")
    worker.otel_meter_provider = provider
