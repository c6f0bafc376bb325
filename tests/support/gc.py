"""The garbage collector in tests: switched off, counted, fed a cyclic graph, timed."""

from __future__ import annotations

import gc
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.instrumentation.process.probes.gc_pauses import GcPauseReading, GcPauses

# Objects in the cyclic graph: a full collection of it takes tens of ms here.
GRAPH = 300_000

# Without the GIL every collection is a full stop-the-world one (about 25 ms in
# this test process, against microseconds for a young collection): the tests
# that make thousands of gc.collect(0) calls make fewer there.
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@contextmanager
def gc_off() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def collections() -> tuple[int, ...]:
    return tuple(s["collections"] for s in gc.get_stats())


def steady(recorder: GcPauses) -> tuple[tuple[int, ...], GcPauseReading]:
    """CPython's counts and our reading with no collection between them."""
    with gc_off():  # 3.12.1 may still run one collection it had scheduled: retry
        while True:
            before = collections()
            reading = recorder.read()
            if collections() == before:
                return before, reading


def minus(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x - y for x, y in zip(a, b, strict=True))


@contextmanager
def callbacks_kept() -> Iterator[None]:
    """Whatever a test adds to gc.callbacks goes when it ends."""
    saved = list(gc.callbacks)
    try:
        yield
    finally:
        gc.callbacks[:] = saved


def cyclic_garbage(n: int = GRAPH) -> None:
    """``n`` lists in one ring, left for the collector."""
    nodes: list[list[Any]] = [[] for _ in range(n)]
    for i, node in enumerate(nodes):
        node.append(nodes[i - 1])
    del nodes


def timed_collect() -> float:
    t0 = time.perf_counter()
    gc.collect()
    return time.perf_counter() - t0
