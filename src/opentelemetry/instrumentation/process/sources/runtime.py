"""Sources about the Python runtime: garbage collections."""

from __future__ import annotations

import gc
import sys

from .base import ReadContext, Reading, Source


def _gc(ctx: ReadContext) -> Reading:
    stats = gc.get_stats()
    return {
        name: {(gen,): s[name] for gen, s in enumerate(stats)}
        for name in ("collections", "collected", "uncollectable")
    }


def _is_cpython() -> bool:
    return sys.implementation.name == "cpython"


SOURCES: tuple[Source, ...] = (
    Source(
        "cpython.gc",
        _gc,
        frozenset({"collections", "collected", "uncollectable"}),
        "none: gc.get_stats() in memory",
        available=_is_cpython,
    ),
)
