"""Garbage-collection pauses, measured with ``gc.callbacks``.

CPython calls every entry of ``gc.callbacks`` with ``("start", info)`` before a
collection and ``("stop", info)`` after it, in the thread that collects. One
callback of ours reads ``time.perf_counter()`` at both ends and adds the
difference to running totals kept per generation: the seconds spent, the number
of pauses, and the longest pause since the previous :meth:`GcPauses.read`.

The hot path
    The callback runs for every collection of every generation, and
    generation-0 collections can come thousands of times a second. It binds
    everything it touches as default arguments (local loads), builds no tuple,
    dict or closure, looks up no attribute, and keeps every total in a list
    allocated once. Counts are kept as floats: a float comes from CPython's float
    free list, where an int above 256 would be a fresh allocation each time. The
    only objects it creates are floats (the clock's result, the difference, the
    new sums), each replacing the one before it. ``benchmarks/gc_pauses.py``
    measures about 0.25 µs per collection over an empty callback (0.35 µs on
    3.10), on top of the 0.5 µs CPython spends calling any gc callback.

Re-entrancy
    CPython runs one collection at a time per interpreter: a ``collecting``
    flag makes ``gc.collect()`` return 0 during a collection (3.10 to 3.12
    ``gc_collect_impl``, 3.13 ``_PyGC_Collect``), and allocations do not start
    one meanwhile. 3.12 has a gap: a collection scheduled before another began
    runs at the next eval-breaker check, which can be inside a gc callback, and
    ``_Py_RunGC`` neither checks the flag nor restores it (it sets it to 0 when
    done), so one collection can nest inside another (seen on 3.12.1). The
    callback therefore keeps a small stack of start times indexed by depth,
    reads the start time before calling the clock (the only call at which a
    nested collection can run), and ignores a ``stop`` that has no ``start``
    (a callback installed mid-collection).

Without the GIL
    On a free-threaded build the callback of one thread's collection runs while
    other threads run, read() among them. CPython still runs one collection at a
    time (its ``collecting`` flag is taken before the ``start`` callbacks and
    released after the ``stop`` ones), so the callback's stores never race each
    other; only read()'s take-and-zero of the maxima races the callback, where
    a maximum stored between read()'s load and its zeroing would be lost. A new
    maximum is therefore stored under a guard (an RLock) that read() holds for
    its take-and-zero. The callback takes it only when a pause beats the
    maximum so far, which is rare once an interval has begun: the common case
    takes no lock.

The histogram
    OpenTelemetry has no asynchronous histogram, and the callback must never
    record into a synchronous one: a collection can start while the same
    thread holds the SDK's aggregation lock (``_ExplicitBucketHistogramAggregation``
    allocates inside ``with self._lock`` in ``collect()``), and recording from
    the callback would then wait for that lock forever (``tests/test_gc_pauses``
    shows it). Replaying the pauses into a synchronous histogram at collection
    time is safe but costs one ``record()`` (about 6 µs here) per pause, so it
    grows with the GC rate. With ``histogram=True`` the callback instead counts
    pauses into fixed buckets (:data:`BOUNDS`), cumulative: a backend's
    ``histogram_quantile`` over two readings gives a bounded quantile of the
    pauses between them.

Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import bisect
import gc
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..excerpt import excerpt

# Generations: CPython reports info["generation"] as an index into its own
# per-generation stats, whose length is that of gc.get_stats().
GENERATIONS = len(gc.get_stats())

# Nesting depth with a start time of its own (3.12 can nest one collection in
# another); deeper levels are still paired, but not timed.
DEPTH = 4

# Upper bounds (seconds) of the pause buckets: the 1-2-5 series from 10 µs to
# 1 s. A generation-0 pause of a small heap takes tens of µs and a full
# collection of a large one 10 ms to 1 s; neighbouring bounds differ by at
# most 2.5x, and the values read as they are written (le="0.005").
BOUNDS: tuple[float, ...] = (
    0.00001, 0.00002, 0.00005,
    0.0001, 0.0002, 0.0005,
    0.001, 0.002, 0.005,
    0.01, 0.02, 0.05,
    0.1, 0.2, 0.5,
    1.0,
)  # fmt: skip

GcCallback = Callable[[str, dict[str, int]], None]


class GcPauseReading(NamedTuple):
    """Totals since :meth:`GcPauses.start` (or the last reset), by generation.

    ``seconds`` and ``pauses`` are cumulative. ``longest`` is the longest pause
    of each generation since the previous :meth:`GcPauses.read`, or ``None`` if
    that generation did not collect since. ``buckets`` holds, per generation,
    cumulative pause counts for each bucket of :data:`BOUNDS` plus one above the
    last bound, or is ``None`` unless the recorder was made with
    ``histogram=True``.
    """

    seconds: tuple[float, ...]
    pauses: tuple[int, ...]
    longest: tuple[float | None, ...]
    buckets: tuple[tuple[int, ...], ...] | None = None


def _callback(
    depth: list[int], starts: list[float], total: list[float], count: list[float],
    peak: list[float], guard: list[Callable[[], Any]], buckets: list[list[float]] | None,
) -> GcCallback:  # fmt: skip
    """The ``gc.callbacks`` entry: times each collection; counts it in ``buckets`` if given.

    The state comes in as default arguments, read as fast locals on each call.
    """

    def on_gc(
        phase: str,
        info: dict[str, int],
        _clock: Callable[[], float] = time.perf_counter,
        _depth: list[int] = depth,
        _starts: list[float] = starts,
        _total: list[float] = total,
        _count: list[float] = count,
        _peak: list[float] = peak,
        _guard: list[Callable[[], Any]] = guard,
        _buckets: list[list[float]] | None = buckets,
        _find: Callable[[Sequence[float], float], int] = bisect.bisect_left,
        _bounds: tuple[float, ...] = BOUNDS,
        _slots: int = DEPTH,
    ) -> None:
        if phase == "start":
            i = _depth[0]
            _depth[0] = i + 1  # before the clock call: a nested collection takes i + 1
            if i < _slots:
                _starts[i] = _clock()
            return
        i = _depth[0] - 1
        if i < 0:
            return  # no start seen: installed mid-collection
        _depth[0] = i
        if i >= _slots:
            return
        began = _starts[i]  # before the clock call: a nested collection reuses slot i
        elapsed = _clock() - began
        g = info["generation"]
        _total[g] += elapsed
        _count[g] += 1.0
        if elapsed > _peak[g]:  # pragma: no mutate - ">=" stores the same value
            # A new maximum (rare once an interval has begun): stored under the
            # guard that read() holds to take and zero the maxima.
            _guard[0]()
            if elapsed > _peak[g]:  # pragma: no mutate - ">=" stores the same value
                _peak[g] = elapsed
            _guard[1]()
        if _buckets is not None:
            # bisect_left: a pause equal to a bound counts in that bound's bucket,
            # as OpenTelemetry's explicit buckets (upper bound inclusive) do.
            _buckets[g][_find(_bounds, elapsed)] += 1.0

    return on_gc


class GcPauses:
    """Running totals of garbage-collection pauses.

    ``start()`` installs one callback in ``gc.callbacks``; ``stop()`` removes
    it; ``read()`` returns the totals; ``reset()`` zeroes them. A forked child
    starts from zero: at fork (``os.register_at_fork``), or, where a fork
    bypasses Python's hooks (a C server), at its first call of any of these.
    """

    def __init__(self, *, histogram: bool = False) -> None:
        if not isinstance(histogram, bool):
            raise ValueError(
                f"histogram must be True or False, not {type(histogram).__name__} "
                f"{excerpt(histogram, 40)}"
            )
        self.histogram = histogram
        # start/stop/reset/read among themselves. Re-entrant: a collection
        # triggered inside one of them can run a gc callback that calls another.
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._depth = [0]
        self._starts = [0.0] * DEPTH
        self._total = [0.0] * GENERATIONS
        self._count = [0.0] * GENERATIONS
        self._peak = [0.0] * GENERATIONS
        self._tops = [0.0] * GENERATIONS
        self._guard: list[Callable[[], Any]] = []
        self._new_guard()
        self._buckets = [[0.0] * (len(BOUNDS) + 1) for _ in range(GENERATIONS)]
        shared = (self._depth, self._starts, self._total, self._count, self._peak, self._guard)
        self._callback = _callback(*shared, self._buckets if histogram else None)
        self._finalizer: weakref.finalize[Any, Any] | None = None
        _live.add(self)

    @staticmethod
    def available() -> bool:
        """Whether this runtime has ``gc.callbacks``."""
        return isinstance(getattr(gc, "callbacks", None), list)

    @property
    def running(self) -> bool:
        """Whether our callback is in ``gc.callbacks``."""
        return self.available() and _holds(gc.callbacks, self._callback)

    def start(self) -> bool:
        """Install the callback; False (and nothing done) without ``gc.callbacks``."""
        if not self.available():
            return False
        with self._locked():
            if _holds(gc.callbacks, self._callback):
                return True
            self._depth[0] = 0  # a start left behind by an earlier stop() mid-collection
            gc.callbacks.append(self._callback)
            if self._finalizer is None:
                # A recorder dropped without stop() takes its callback with it.
                self._finalizer = weakref.finalize(self, _uninstall, self._callback)
            return True

    def stop(self) -> None:
        """Remove the callback, wherever it now is in ``gc.callbacks``; totals freeze."""
        with self._locked():
            if self.available():
                _uninstall(self._callback)

    def reset(self) -> None:
        """Zero every total, and forget a collection in flight."""
        with self._locked():
            self._zero()

    def read(self) -> GcPauseReading:
        """The totals, and the longest pause per generation since the previous read."""
        with self._locked():
            peak, tops = self._peak, self._tops
            acquire, release = self._guard
            # Take and zero the maxima under the guard that a new maximum is
            # stored under: without the GIL another thread's collection runs its
            # callback in parallel. A collection of this thread can only start
            # at a call or a loop's jump, never between a load and its zeroing.
            acquire()
            for g in range(GENERATIONS):
                tops[g] = peak[g]
                peak[g] = 0.0
            release()
            # 0.0 is "no pause since": a measured pause takes microseconds.
            longest = [top if top > 0.0 else None for top in tops]
            return GcPauseReading(
                seconds=tuple(self._total),
                pauses=tuple(int(x) for x in self._count),
                longest=tuple(longest),
                buckets=(
                    tuple(tuple(int(x) for x in row) for row in self._buckets)
                    if self.histogram
                    else None
                ),
            )

    def _locked(self) -> threading.RLock:
        """The lock, renewed (and the totals zeroed) in a child forked without hooks.

        There the old lock may be held by a thread of the parent, which the
        child does not have: it would never be released.
        """
        pid = os.getpid()
        if pid != self._pid:
            self._pid = pid
            self._lock = threading.RLock()
            self._new_guard()
            self._zero()
        return self._lock

    def _new_guard(self) -> None:
        # Re-entrant: a collection can start in a thread that holds it (in
        # read(), between two of its loads). In place: the callback holds the list.
        guard = threading.RLock()
        self._guard[:] = [guard.acquire, guard.release]

    def _zero(self) -> None:
        # Slice assignment keeps the list objects the callback is bound to.
        self._depth[0] = 0
        self._total[:] = [0.0] * GENERATIONS
        self._count[:] = [0.0] * GENERATIONS
        self._peak[:] = [0.0] * GENERATIONS
        for row in self._buckets:
            row[:] = [0.0] * len(row)


def _holds(callbacks: list[Any], callback: GcCallback) -> bool:
    return any(x is callback for x in callbacks)


def _uninstall(callback: GcCallback) -> None:
    # By identity, from wherever others have moved it; every copy.
    callbacks = getattr(gc, "callbacks", None)
    if not isinstance(callbacks, list):
        return
    for i in range(len(callbacks) - 1, -1, -1):
        if callbacks[i] is callback:
            del callbacks[i]


_live: weakref.WeakSet[GcPauses] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A forked child starts its own totals. No lock: the child has one thread,
    # and a lock held by a parent thread at fork time would never be released.
    for recorder in list(_live):
        recorder._locked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["BOUNDS", "GENERATIONS", "GcPauseReading", "GcPauses"]
