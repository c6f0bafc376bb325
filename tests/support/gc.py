"""The garbage collector in tests: switched off, counted, fed a cyclic graph, timed."""

from __future__ import annotations

import gc
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from opentelemetry.instrumentation.process.catalog import supported
from opentelemetry.instrumentation.process.metrics import METRICS_BY_NAME
from opentelemetry.instrumentation.process.probes.gc_pauses import (
    BOUNDS,
    TIMED_BY_INTERPRETER,
    GcPauseReading,
    GcPauses,
)
from opentelemetry.instrumentation.process.sources.runtime import STALL_SECONDS

GC_STALL = "process_metrics.cpython.gc.stall.duration"
needs_gc_stalls = pytest.mark.skipif(
    not supported(METRICS_BY_NAME[GC_STALL]),
    reason="no garbage-collection pauses here (not CPython)",
)

STALLS_TIMED: dict[str, bool] = {"gc_pause_histogram": True} if TIMED_BY_INTERPRETER else {}
"""Options under which ``stall()`` is seen: where the interpreter times its own
collections, the buckets option installs the callback that sees the sleep (docs/runtime.md)."""

# Objects in the cyclic graph: a full collection of it takes tens of ms here.
GRAPH = 300_000

# Without the GIL every collection is a full stop-the-world one (about 25 ms in
# this test process, against microseconds for a young collection): the tests
# that make thousands of gc.collect(0) calls make fewer there.
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

RECORDERS: dict[str, dict[str, Any]] = {
    "default": {},
    "histogram": {"histogram": True},
    "long pauses": {"long_pause": 10.0},  # none that long: kept with nothing
}
"""The ways to make a recorder. Each times its pauses with a gc callback, but the default
one where the interpreter times its own collections (then it reads ``gc.get_stats()``)."""

HOOKED = {name: options for name, options in RECORDERS.items() if name != "default"}
"""The ways that install a gc callback on every interpreter."""

NEEDS_OWN_TIMING = "needs an interpreter that times its own collections (gc.get_stats() duration)"
NEEDS_NO_OWN_TIMING = "needs an interpreter that does not time its own collections"
own_timing = pytest.mark.skipif(not TIMED_BY_INTERPRETER, reason=NEEDS_OWN_TIMING)
no_own_timing = pytest.mark.skipif(TIMED_BY_INTERPRETER, reason=NEEDS_NO_OWN_TIMING)


@contextmanager
def gc_off() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@pytest.fixture(autouse=True)
def collector_paused() -> Iterator[None]:
    """Autouse where imported: no automatic collection during the test.

    A full collection of the session's heap stalls a loop well past the loop
    tests' slack: lag that the probe rightly reports, and that is not the test's.
    """
    with gc_off():
        yield


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


def stall() -> None:
    """One full collection stopped for longer than a stall: a gc callback after ours sleeps."""

    def sleeper(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            time.sleep(1.5 * STALL_SECONDS)

    gc.callbacks.append(sleeper)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(sleeper)


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


def quantile_bound(
    previous: GcPauseReading, current: GcPauseReading, generation: int, q: float
) -> float | None:
    """An upper bound of the ``q`` quantile of the pauses between two readings, as a backend's
    ``histogram_quantile`` over the bucket counters computes it.

    The bound of the bucket that holds it; for the bucket above the last bound,
    the longest pause in ``current``. ``None`` without pauses in between or
    without buckets. Both readings must come from one recorder, in order.
    """
    if not 0.0 < q <= 1.0:
        raise ValueError(f"q must be in (0, 1], not {q!r:.40}")
    if previous.buckets is None or current.buckets is None:
        return None
    before, after = previous.buckets[generation], current.buckets[generation]
    delta = [b - a for a, b in zip(before, after, strict=True)]
    n = sum(delta)
    if n <= 0:
        return None
    rank = q * n
    seen = 0
    for i, k in enumerate(delta):
        seen += k
        if seen >= rank:
            return BOUNDS[i] if i < len(BOUNDS) else current.longest[generation]
    return current.longest[generation]
