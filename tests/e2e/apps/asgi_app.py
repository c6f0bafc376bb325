"""A plain ASGI application for a real server (``uvicorn asgi_app:app``), no framework.

- ``/``: answers at once;
- ``/block``: blocks the event loop with ``time.sleep(0.2)``, as synchronous
  code in an async handler does, and prints ``blocked <seconds>`` (the length
  by its own clock);
- ``/gc``: builds a large cyclic graph and collects it in a worker thread (so
  that only the collection itself, not the building, holds up the loop), and
  prints ``collected <seconds>``, the length of that collection.

Every full collection is measured by two ``gc.callbacks`` of the app's own,
installed at import (after ``opentelemetry-instrument`` installed the
package's): one runs before every other callback at the start, one after every
other at the stop, so that the pause the package measures lies within it,
short of it only by the time between two adjacent callbacks. At shutdown the
app prints ``fullgc <seconds>`` for each, the automatic ones included: the
package's longest pause of an interval is one of them.

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

FULL: list[float] = []
"""Seconds of each full collection, by the brackets below, in order."""


def _bracket_full_collections() -> None:
    started: list[float] = []

    def first(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            started.append(time.perf_counter())

    def last(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2 and started:
            FULL.append(time.perf_counter() - started.pop())

    print(f"brackets {len(gc.callbacks)} gc callbacks", flush=True)
    gc.callbacks.insert(0, first)
    gc.callbacks.append(last)


_bracket_full_collections()


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
        seen = len(FULL)
        gc.collect()
        return f"collected {FULL[seen]!r}"
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
                print("".join(f"fullgc {seconds!r}\n" for seconds in FULL), end="", flush=True)
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
