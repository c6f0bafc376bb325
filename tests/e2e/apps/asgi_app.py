"""A plain ASGI application for a real server (``uvicorn asgi_app:app``), no framework.

- ``/``: answers at once;
- ``/block``: blocks the event loop with ``time.sleep(0.2)``, as synchronous
  code in an async handler does, and prints ``blocked <seconds>`` (the length
  by its own clock);
- ``/gc``: builds a large cyclic graph and collects it in a worker thread (so
  that only the collection itself, not the building, holds up the loop), and
  prints ``collected <seconds>`` (the time around ``gc.collect()``).

Each printed figure is the truth the test compares the exported metrics with.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

BLOCK = 0.2
GRAPH = 300_000


def _block() -> str:
    t0 = time.monotonic()
    time.sleep(BLOCK)
    return f"blocked {time.monotonic() - t0!r} in {threading.current_thread().name}"


def _collect() -> str:
    was = gc.isenabled()
    gc.disable()  # the graph must not go in an automatic collection
    try:
        nodes: list[list[Any]] = [[] for _ in range(GRAPH)]
        for i, node in enumerate(nodes):
            node.append(nodes[i - 1])
        del nodes
        t0 = time.perf_counter()
        gc.collect()
        return f"collected {time.perf_counter() - t0!r}"
    finally:
        if was:
            gc.enable()


ROUTES = {"/": lambda: "ok", "/block": _block, "/gc": _collect}


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    route = ROUTES.get(scope["path"])
    if route is _collect:
        body = await asyncio.get_running_loop().run_in_executor(None, _collect)
    else:
        body = route() if route else "not found"
    if route and route is not ROUTES["/"]:
        print(body, flush=True)
    await send(
        {
            "type": "http.response.start",
            "status": 200 if route else 404,
            "headers": [(b"content-type", b"text/plain")],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})
