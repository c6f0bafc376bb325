"""A tiny WSGI application for the pre-fork example; it knows nothing of OpenTelemetry.

Served by gunicorn with ``gunicorn.conf.py`` next to it, which sets up the
metrics in each worker. Each response names the worker that served it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    body = f"served by worker pid {os.getpid()}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
