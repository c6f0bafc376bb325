"""Sources about the Python runtime: garbage collections, their pauses, event-loop delays."""

from __future__ import annotations

import gc
import sys
from itertools import accumulate

from ..runtime.gc_pauses import BOUNDS, GcPauses
from ..runtime.loops.monitor import DELAYS, UTILIZATION, LoopMonitor
from .base import Key, ReadContext, Reading, Source

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


def _monitor(ctx: ReadContext) -> LoopMonitor:
    """The one monitor of both loop sources, made by whichever opens first."""
    monitor: LoopMonitor | None = ctx.state.get("asyncio.loops")
    if monitor is None:
        monitor = ctx.state["asyncio.loops"] = LoopMonitor(delays=False, utilization=False)
    return monitor


def _open_delays(ctx: ReadContext) -> bool:
    monitor = _monitor(ctx)
    monitor.measure(DELAYS)
    monitor.start()
    return True


def _open_utilization(ctx: ReadContext) -> bool:
    # Only opened when the utilisation metric is selected: select is timed only then.
    monitor = _monitor(ctx)
    monitor.measure(UTILIZATION)
    monitor.start()
    return True


def _close_loops(ctx: ReadContext) -> None:
    monitor: LoopMonitor | None = ctx.state.pop("asyncio.loops", None)
    if monitor is not None:
        monitor.reset()  # in a forked child: the parent's loops are not ours to stop
        monitor.stop()


_DELAY_FIELDS = ("max", "mean", "p50", "p99")


def _delays(ctx: ReadContext) -> Reading:
    monitor: LoopMonitor = ctx.state["asyncio.loops"]
    reading: dict[str, dict[Key, float]] = {name: {} for name in _DELAY_FIELDS}
    for label, delays in monitor.read_delays().items():  # one window per loop since the last
        for name in _DELAY_FIELDS:
            value = getattr(delays, name)
            if value is not None:  # no sample: left out, never 0
                reading[name][(label,)] = value
    return reading


def _utilization(ctx: ReadContext) -> Reading:
    monitor: LoopMonitor = ctx.state["asyncio.loops"]
    busy = monitor.read_utilization()  # one window per loop since the last refresh
    # Not measured here (uvloop, or the loop did not run): left out, never 0.
    return {"utilization": {(label,): u for label, u in busy.items() if u is not None}}


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
        _delays,
        frozenset(_DELAY_FIELDS),
        "none at collection: one timer per event loop every 20 ms (about 50 µs of CPU per "
        "tick when the loop is idle)",
        open=_open_delays,
        close=_close_loops,
    ),
    Source(
        "asyncio.select_timing",
        _utilization,
        frozenset({"utilization"}),
        "none at collection: two clock reads around each select of an asyncio loop (about "
        "0.3 µs per loop iteration)",
        open=_open_utilization,
        close=_close_loops,
    ),
)
