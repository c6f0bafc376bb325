"""The FastAPI application of ``benchmarks/webapp.py``, with uvicorn's recipe (examples/uvicorn).

    uvicorn fastapi_app:app --workers 2      # from this folder, PROCESS_OVERHEAD_MODE set

uvicorn starts each worker with ``spawn``; the metrics are set up in the
worker, in the ASGI lifespan's startup, as ``PROCESS_OVERHEAD_MODE`` says
(``appmode.py``), and shut down with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import appmode
from fastapi import FastAPI

ITEMS = [
    {"id": i, "name": f"item {i}", "price": round(i * 1.25, 2), "tags": ["a", "b"]}
    for i in range(20)
]


@asynccontextmanager
async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
    mode = appmode.from_env()
    provider = appmode.setup(mode) if mode else None
    yield
    if provider is not None:
        provider.shutdown()


app = FastAPI(lifespan=lifespan)


@app.get("/items")
async def items(limit: int = 20) -> dict[str, object]:
    """A small JSON document, as an API returns one: validated query, serialised response."""
    return {"count": min(limit, len(ITEMS)), "items": ITEMS[:limit]}
