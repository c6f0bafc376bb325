"""A WSGI app whose worker ends as the request asks, for the tests of how workers end.

``/exit/<code>`` exits at once with that code; ``/grow`` allocates until the
OOM killer ends the worker (run it in a memory-limited cgroup); ``/hang``
never answers (a worker past gunicorn's ``--timeout``); anything else answers
with the worker's pid.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

MIB = 1 << 20


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ.get("PATH_INFO", "")
    if path.startswith("/exit/"):
        os._exit(int(path.rpartition("/")[2]))
    if path == "/grow":
        chunks = []
        while True:
            chunks.append(b"x" * MIB)  # touched: charged to the cgroup
    if path == "/hang":
        time.sleep(3600)
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"{os.getpid()}\n".encode()]
