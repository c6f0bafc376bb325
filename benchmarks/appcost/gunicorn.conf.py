"""gunicorn config of ``benchmarks/webapp.py``: the pre-fork recipe of examples/gunicorn.

The metrics are set up in each worker after the fork (``post_fork``), never in
the master, as ``PROCESS_OVERHEAD_MODE`` says (``appmode.py``), and shut down
when the worker exits. ``WEBAPP_BIND``, ``WEBAPP_WORKERS`` and
``WEBAPP_WORKER_CLASS`` (``sync`` or ``gthread``, 4 threads) come from webapp.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

wsgi_app = "flask_app:app"
chdir = str(Path(__file__).resolve().parent)
bind = os.environ.get("WEBAPP_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("WEBAPP_WORKERS", "2"))
worker_class = os.environ.get("WEBAPP_WORKER_CLASS", "sync")
threads = 4 if worker_class == "gthread" else 1
backlog = 2048
accesslog = None
loglevel = "warning"
control_socket_disable = True  # see examples/gunicorn/gunicorn.conf.py


def post_fork(server: Any, worker: Any) -> None:
    import appmode

    mode = appmode.from_env()
    worker.otel_meter_provider = appmode.setup(mode) if mode else None


def worker_exit(server: Any, worker: Any) -> None:
    provider = getattr(worker, "otel_meter_provider", None)
    if provider is not None:
        provider.shutdown()
