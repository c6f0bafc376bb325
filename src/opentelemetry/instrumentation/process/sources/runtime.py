"""Sources about the Python runtime: garbage collections, their pauses, event-loop delays."""

from __future__ import annotations

import gc
import sys
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from ..platforms import LINUX
from ..probes.gc_pauses import BOUNDS, GcPauses
from .base import Key, ReadContext, Reading, Sample, Source, State, attributes, numbers

if TYPE_CHECKING:  # imported when a loop or GIL source opens: most processes never use one
    from ..probes.gil_wait import GilWait
    from ..probes.loops.monitor import LoopMonitor

_GENERATION = attributes("cpython.gc.generation")
_GENERATIONS = tuple(_GENERATION((gen,)) for gen in range(3))
_BUCKET = attributes("le")
_LE = (*(f"{bound:g}" for bound in BOUNDS), "+Inf")
"""Bucket labels, as Prometheus writes them: a histogram_quantile() over them works.

Their keys are made at each read of the histogram (an opt-in): kept, they would be
objects that every full garbage collection walks in every process."""
_LOOP = attributes("thread.name")
_LOOP_CODE = attributes("thread.name", "code.function.name")

STALL_SECONDS = 0.1
"""A garbage-collection pause, or a stretch of a loop without ``select``, this long is a stall."""


def _gc(ctx: ReadContext) -> Reading:
    stats = gc.get_stats()
    return {
        name: {_generation(gen): s[name] for gen, s in enumerate(stats)}
        for name in ("collections", "collected", "uncollectable")
    }


def _generation(gen: int) -> Key:
    return _GENERATIONS[gen] if gen < len(_GENERATIONS) else _GENERATION((gen,))


def _is_cpython() -> bool:
    return sys.implementation.name == "cpython"


def _new_pauses(ctx: ReadContext) -> GcPauses:
    recorder = GcPauses(histogram=ctx.options.gc_pause_histogram)
    recorder.keep_long(STALL_SECONDS)  # free: one comparison per collection
    return recorder


_PAUSES = State("cpython_gc_pauses", _new_pauses)


def _open_pauses(ctx: ReadContext) -> bool:
    return ctx.state_of(_PAUSES).start()


def _close_pauses(ctx: ReadContext) -> None:
    recorder = ctx.drop(_PAUSES)
    if recorder is not None:
        recorder.stop()


def _pauses_after_fork(ctx: ReadContext, _forked_at: float | None) -> None:
    # The pause totals' one fork mechanism: a child starts its own (with or
    # without Python's at-fork hooks: this runs before the child's first read).
    recorder: GcPauses | None = ctx.state.get(_PAUSES.name)
    if recorder is not None:
        recorder.reset()


def _pauses(ctx: ReadContext) -> Reading:
    recorder = ctx.state_of(_PAUSES)
    got = recorder.read()  # once per refresh: it starts the next longest-pause window
    reading: dict[str, Any] = {
        "time": {_generation(gen): seconds for gen, seconds in enumerate(got.seconds)},
        # A generation that did not collect since the last refresh did not pause
        # the program: that is known, so it is 0, and the series stays. One
        # whose longest pause is not known (timed by the interpreter, without
        # a callback, more than one collection) is left out.
        "max": {_generation(gen): top for gen, top in enumerate(got.longest) if top is not None},
    }
    reading["stalls"] = tuple(
        Sample(pause.seconds, _generation(pause.generation), pause.captured) for pause in got.long
    )
    if got.buckets is not None:
        # Cumulative counts per upper bound, all generations together.
        per_bucket = [sum(column) for column in zip(*got.buckets, strict=True)]
        counts = zip(_LE, accumulate(per_bucket), strict=True)
        reading["buckets"] = {_BUCKET((le,)): count for le, count in counts}
    return reading


def _new_gil_wait(_ctx: ReadContext) -> GilWait:
    from ..probes.gil_wait import GilWait

    return GilWait()


_GIL = State("cpython_gil_wait", _new_gil_wait)


def _open_gil_wait(ctx: ReadContext) -> bool:
    return ctx.state_of(_GIL).start()


def _close_gil_wait(ctx: ReadContext) -> None:
    probe = ctx.drop(_GIL)
    if probe is not None:
        probe.stop()


def _gil_wait_after_fork(ctx: ReadContext, _forked_at: float | None) -> None:
    # The probe's one fork mechanism: its thread did not survive the fork.
    probe: GilWait | None = ctx.state.get(_GIL.name)
    if probe is not None:
        probe.forked()


def _gil_wait(ctx: ReadContext) -> Reading:
    got = ctx.state_of(_GIL).read()
    reading: dict[str, float] = {
        "time": got.seconds,
        "samples": got.samples,
        "contended": got.contended,
    }
    if got.longest is not None:  # it did not wake since the last read: unknown, left out
        reading["max"] = got.longest
    return reading


def _gil_wait_available() -> bool:
    from ..probes.gil_wait import GilWait

    return _is_cpython() and GilWait.available()


def _new_monitor(_ctx: ReadContext) -> LoopMonitor:
    from ..probes.loops.monitor import LoopMonitor

    return LoopMonitor(delays=False, utilization=False, stall=STALL_SECONDS)


# One monitor for both loop sources: whichever opens first makes it.
_LOOPS = State("asyncio_loops", _new_monitor)


def _open_delays(ctx: ReadContext) -> bool:
    from ..probes.loops.monitor import DELAYS

    monitor = ctx.state_of(_LOOPS)
    monitor.measure(DELAYS)
    monitor.start()
    return True


def _open_utilization(ctx: ReadContext) -> bool:
    from ..probes.loops.monitor import UTILIZATION

    # Only opened when the utilisation metric is selected: select is timed only then.
    monitor = ctx.state_of(_LOOPS)
    monitor.measure(UTILIZATION)
    monitor.start()
    return True


def _close_loops(ctx: ReadContext) -> None:
    monitor = ctx.drop(_LOOPS)
    if monitor is not None:
        monitor.stop()  # in a forked child, the parent's loops are forgotten, not stopped


_DELAY_FIELDS = ("max", "mean", "p50", "p99")


def _delays(ctx: ReadContext) -> Reading:
    monitor = ctx.state_of(_LOOPS)
    reading: dict[str, dict[Key, float]] = {name: {} for name in _DELAY_FIELDS}
    for label, delays in monitor.read_delays().items():  # one window per loop since the last
        for name in _DELAY_FIELDS:
            value = getattr(delays, name)
            if value is not None:  # no sample: left out, never 0
                reading[name][_LOOP((label,))] = value
    return reading


def _open_stalls(ctx: ReadContext) -> bool:
    from ..probes.loops.monitor import STALLS

    monitor = ctx.state_of(_LOOPS)
    monitor.measure(STALLS)
    monitor.start()
    return True


def _stalls(ctx: ReadContext) -> Reading:
    found = ctx.state_of(_LOOPS).read_stalls()  # the stalls ended since the last refresh
    return {
        "stalls": tuple(
            Sample(stall.seconds, _LOOP_CODE((label, stall.code)), stall.context)
            for label, stalls in found.items()
            for stall in stalls
        )
    }


def _utilization(ctx: ReadContext) -> Reading:
    busy = ctx.state_of(_LOOPS).read_utilization()  # one window per loop since the last refresh
    # Not measured here (uvloop, or the loop did not run): left out, never 0.
    return {"utilization": {_LOOP((label,)): u for label, u in busy.items() if u is not None}}


_PAUSE_FIELDS = {"time": _GENERATION, "max": _GENERATION, "buckets": _BUCKET, "stalls": _GENERATION}

SOURCES: tuple[Source, ...] = (
    Source(
        "cpython_gc",
        _gc,
        dict.fromkeys(("collections", "collected", "uncollectable"), _GENERATION),
        "none: gc.get_stats() in memory",
        available=_is_cpython,
    ),
    Source(
        "cpython_gc_pauses",
        _pauses,
        _PAUSE_FIELDS,
        "none: a gc.callbacks hook keeps running totals (about 1 µs per garbage collection)",
        available=lambda: _is_cpython() and GcPauses.available(),
        open=_open_pauses,
        close=_close_pauses,
        keeps=(_PAUSES,),
        after_fork=_pauses_after_fork,
    ),
    Source(
        "cpython_gil_wait",
        _gil_wait,
        numbers("time", "samples", "contended", "max"),
        "none at collection: one thread wakes about 5 times a second, two getrusage(2) calls "
        "each, and /proc/thread-self/schedstat when it waited (about 70 µs of CPU per wake)",
        platforms=LINUX,
        available=_gil_wait_available,
        open=_open_gil_wait,
        close=_close_gil_wait,
        keeps=(_GIL,),
        after_fork=_gil_wait_after_fork,
    ),
    Source(
        "asyncio_loops",
        _delays,
        dict.fromkeys(_DELAY_FIELDS, _LOOP),
        "none at collection: a hook on the select of each asyncio loop reads the clock "
        "around each call; nothing is put in the loop, and a sleeping loop is never woken",
        open=_open_delays,
        close=_close_loops,
        keeps=(_LOOPS,),
    ),
    Source(
        "asyncio_select_timing",
        _utilization,
        {"utilization": _LOOP},
        "none at collection: the hook on select of the event-loop delays (the same clock reads)",
        open=_open_utilization,
        close=_close_loops,
        keeps=(_LOOPS,),
    ),
    Source(
        "asyncio_loop_stalls",
        _stalls,
        {"stalls": _LOOP_CODE},
        "none at collection: one thread wakes when a working loop would be stalled (at most "
        "every 100 ms while a loop works, never while every loop sleeps) and reads the frame "
        "of the thread of that loop once a stall is on",
        open=_open_stalls,
        close=_close_loops,
        keeps=(_LOOPS,),
    ),
)
