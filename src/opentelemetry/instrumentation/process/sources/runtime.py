"""Sources about the Python runtime: garbage collections, their pauses, event-loop lag."""

from __future__ import annotations

import gc
import sys
from itertools import accumulate
from typing import TYPE_CHECKING

from ..runtime.gc_pauses import BOUNDS, GcPauses
from .base import Key, ReadContext, Reading, Source

if TYPE_CHECKING:  # imported when the source opens: most processes never use it
    from ..runtime.loop_lag import LoopLagMonitor

_LE = (*(f"{bound:g}" for bound in BOUNDS), "+Inf")
"""Bucket labels, as Prometheus writes them: a histogram_quantile() over them works."""


def _gc(ctx: ReadContext) -> Reading:
    stats = gc.get_stats()
    return {
        name: {(gen,): s[name] for gen, s in enumerate(stats)}
        for name in ("collections", "collected", "uncollectable")
    }


def _is_cpython() -> bool:
    return sys.implementation.name == "cpython"


def _open_pauses(ctx: ReadContext) -> bool:
    recorder = GcPauses(histogram=ctx.options.gc_pause_histogram)
    ctx.state["cpython.gc_pauses"] = recorder
    return recorder.start()


def _close_pauses(ctx: ReadContext) -> None:
    recorder: GcPauses | None = ctx.state.pop("cpython.gc_pauses", None)
    if recorder is not None:
        recorder.stop()


def _pauses(ctx: ReadContext) -> Reading:
    recorder: GcPauses = ctx.state["cpython.gc_pauses"]
    got = recorder.read()  # once per refresh: it starts the next longest-pause window
    reading: dict[str, dict[Key, float | int]] = {
        "time": {(gen,): seconds for gen, seconds in enumerate(got.seconds)},
        # A generation that did not collect since the last refresh did not pause
        # the program: that is known, so it is 0, and the series stays.
        "max": {(gen,): top or 0.0 for gen, top in enumerate(got.longest)},
    }
    if got.buckets is not None:
        # Cumulative counts per upper bound, all generations together.
        per_bucket = [sum(column) for column in zip(*got.buckets, strict=True)]
        reading["buckets"] = {(le,): n for le, n in zip(_LE, accumulate(per_bucket), strict=True)}
    return reading


def _open_loops(ctx: ReadContext) -> bool:
    from ..runtime.loop_lag import LoopLagMonitor

    monitor = LoopLagMonitor()
    ctx.state["asyncio.loops"] = monitor
    monitor.start()
    return True


def _close_loops(ctx: ReadContext) -> None:
    monitor: LoopLagMonitor | None = ctx.state.pop("asyncio.loops", None)
    if monitor is not None:
        monitor.reset()  # in a forked child: the parent's loops are not ours to stop
        monitor.stop()


def _loops_after_fork(ctx: ReadContext, _forked_at: float | None) -> None:
    # The parent's loops run in threads the child does not have. Python's
    # at-fork hook forgets them already; a fork from C runs no hook.
    monitor: LoopLagMonitor | None = ctx.state.get("asyncio.loops")
    if monitor is not None:
        monitor.reset()


_LAG_FIELDS = ("max", "mean", "p50", "p99", "utilization")


def _loops(ctx: ReadContext) -> Reading:
    monitor: LoopLagMonitor = ctx.state["asyncio.loops"]
    reading: dict[str, dict[Key, float]] = {name: {} for name in _LAG_FIELDS}
    for label, lag in monitor.read().items():  # one window per loop since the last refresh
        for name in _LAG_FIELDS:
            value = getattr(lag, name)
            if value is not None:  # no sample, or not measured here: left out, never 0
                reading[name][(label,)] = value
    return reading


SOURCES: tuple[Source, ...] = (
    Source(
        "cpython.gc",
        _gc,
        frozenset({"collections", "collected", "uncollectable"}),
        "none: gc.get_stats() in memory",
        available=_is_cpython,
    ),
    Source(
        "cpython.gc_pauses",
        _pauses,
        frozenset({"time", "max", "buckets"}),
        "none: a gc.callbacks hook keeps running totals (about 1 µs per garbage collection)",
        available=lambda: _is_cpython() and GcPauses.available(),
        open=_open_pauses,
        close=_close_pauses,
    ),
    Source(
        "asyncio.loops",
        _loops,
        frozenset(_LAG_FIELDS),
        "none at collection: one timer per event loop every 20 ms (about 50 µs of CPU per "
        "tick when the loop is idle), and about 0.3 µs per loop iteration on asyncio to time "
        "its select for the utilisation",
        open=_open_loops,
        close=_close_loops,
        after_fork=_loops_after_fork,
    ),
)
