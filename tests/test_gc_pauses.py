"""GC pause recorder: its figures against the test's own clock and gc.get_stats().

Truths used here: the time the test measures around ``gc.collect()`` (always at
least the pause), and CPython's own per-generation collection counts, which
advance once per collection exactly as our callback is called. The edges come
last: a reset mid-collection, nesting deeper than the timed depth (the callback
driven as CPython drives it, with a clock of the test's own), every pause in a
bucket.
"""

from __future__ import annotations

import bisect
import collections as collections_
import dis
import functools
import gc
import itertools
import json
import operator
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process.probes import gc_pauses
from opentelemetry.instrumentation.process.probes.gc_pauses import (
    BOUNDS,
    DEPTH,
    GENERATIONS,
    GcPauseReading,
    GcPauses,
)

from .support.gc import (
    FREE_THREADED,
    GRAPH,
    callbacks_kept,
    collections,
    cyclic_garbage,
    gc_off,
    minus,
    quantile_bound,
    steady,
    timed_collect,
)

# The time around gc.collect() exceeds the pause by what happens outside it: the
# call into gc.collect(), building the info dict, calling the callbacks, the
# return. That is tens of microseconds here; 1 ms leaves room for a cache-cold
# start. A preemption outside the pause on this shared 2-core machine can cost
# more, so the lower bound gets up to ATTEMPTS tries (the upper bound must
# hold on every one).
TOLERANCE = 0.001
ATTEMPTS = 5


@pytest.fixture(params=[False, True], ids=["timing", "histogram"])
def recorder(request: pytest.FixtureRequest) -> Iterator[GcPauses]:
    with callbacks_kept():
        rec = GcPauses(histogram=request.param)
        assert rec.start()
        yield rec
        rec.stop()


# --- truth ---------------------------------------------------------------------------


def test_full_collection_matches_the_time_around_it(recorder: GcPauses) -> None:
    gaps = []
    for _ in range(ATTEMPTS):
        with gc_off():
            gc.collect()
            cyclic_garbage()
            _, before = steady(recorder)
            around = timed_collect()
            _, after = steady(recorder)
            again = recorder.read()
        pause = after.seconds[2] - before.seconds[2]
        assert after.pauses[2] - before.pauses[2] == 1
        assert 0 < pause <= around, (pause, around)
        # The one full collection is the longest pause of generation 2 ...
        assert after.longest[2] == pytest.approx(pause, abs=1e-9)
        assert max(x or 0.0 for x in after.longest) == after.longest[2]
        # ... and the next read starts a new interval.
        assert again.longest == (None,) * len(again.longest)
        gaps.append(around - pause)
        if around - pause <= TOLERANCE:
            break
    assert min(gaps) <= TOLERANCE, f"pause short of the time around it by {gaps} s"
    assert around > 0.01, f"the graph collected in {around} s: too small to test"


def test_pause_counts_equal_cpythons_collection_counts(recorder: GcPauses) -> None:
    stats0, ours0 = steady(recorder)
    # How often the collector runs by itself depends on the heap the session
    # left (the free-threaded one scales its threshold by the live objects):
    # allocate until it has, within a bound.
    wanted = 5 if FREE_THREADED else 20
    keep = []
    for i in range(5_000_000):
        a: list[Any] = []
        a.append(a)
        if i % 50 == 0:
            keep.append(a)  # survivors, so older generations collect too
        if i % 10_000 == 0 and collections()[0] - stats0[0] >= wanted and i >= 200_000:
            break
    gc.collect(0)
    gc.collect(1)
    stats1, ours1 = steady(recorder)
    theirs = minus(stats1, stats0)
    assert minus(ours1.pauses, ours0.pauses) == theirs
    if FREE_THREADED:
        # The free-threaded collector reports each automatic collection as
        # generation 0 (each a full one, its threshold scaled by the live
        # objects) and never picks generation 1 itself: only the explicit one.
        assert theirs[0] >= 5 and theirs[1] == 1 and theirs[2] == 0, theirs
    else:
        assert theirs[0] >= 20 and theirs[1] >= 2, theirs
    assert all(s >= 0 for s in minus(ours1.seconds, ours0.seconds))  # type: ignore[arg-type]


def test_each_generation_is_the_one_cpython_reports_and_counts(recorder: GcPauses) -> None:
    # The `generation` of a pause is the info["generation"] of CPython's own
    # callback, which indexes gc.get_stats(): three generations on 3.10-3.13,
    # 3.14.5+, 3.15 and free-threaded builds. (3.14.0-3.14.4, whose incremental
    # collector runs an increment for gc.collect(1), could not be had here; the
    # mapping is the collector's own there too.)
    seen: list[int] = []

    def probe(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            seen.append(info["generation"])

    gc.callbacks.append(probe)  # after ours
    try:
        for g in range(len(gc.get_stats())):
            with gc_off():
                stats0, r0 = steady(recorder)
                seen.clear()
                gc.collect(g)
                (reported,) = seen
                stats1, r1 = steady(recorder)
            one = tuple(int(i == reported) for i in range(len(stats0)))
            assert reported == g
            assert minus(stats1, stats0) == minus(r1.pauses, r0.pauses) == one
            assert r1.longest[reported] is not None
    finally:
        gc.callbacks.remove(probe)


# --- lifecycle -----------------------------------------------------------------------


def test_stop_removes_the_callback_and_freezes_the_totals() -> None:
    with callbacks_kept():
        before = list(gc.callbacks)
        rec = GcPauses()
        rec.start()
        rec.start()  # idempotent
        assert len(gc.callbacks) == len(before) + 1
        gc.collect()
        rec.stop()
        rec.stop()  # idempotent
        assert gc.callbacks == before
        frozen = rec.read()
        gc.collect()
        gc.collect(0)
        assert rec.read().pauses == frozen.pauses
        assert rec.read().seconds == frozen.seconds

        rec.start()  # resumes from the frozen totals
        stats0, r0 = steady(rec)
        gc.collect()
        stats1, r1 = steady(rec)
        assert minus(r1.pauses, r0.pauses) == minus(stats1, stats0)
        assert r1.pauses[2] == frozen.pauses[2] + minus(stats1, stats0)[2]
        rec.stop()


def test_stop_finds_the_callback_wherever_others_moved_it() -> None:
    def first(phase: str, info: dict[str, int]) -> None:
        pass

    def last(phase: str, info: dict[str, int]) -> None:
        pass

    with callbacks_kept():
        rec = GcPauses()
        gc.callbacks.insert(0, first)
        rec.start()
        ours = gc.callbacks[-1]
        gc.callbacks.append(last)
        gc.callbacks.reverse()
        gc.callbacks.insert(0, ours)  # someone copied ours too
        others = [c for c in gc.callbacks if c is not ours]
        rec.stop()
        assert gc.callbacks == others
        assert not rec.running


def test_a_dropped_recorder_takes_its_callback_with_it() -> None:
    with callbacks_kept():
        before = len(gc.callbacks)
        rec = GcPauses()
        rec.start()
        assert len(gc.callbacks) == before + 1
        del rec
        gc.collect()
        assert len(gc.callbacks) == before


def test_reset_zeroes_every_total() -> None:
    with callbacks_kept():
        rec = GcPauses(histogram=True)
        rec.start()
        gc.collect()
        gc.collect(0)
        assert rec.read().pauses[2] >= 1
        gc.collect()
        rec.reset()
        zero = rec.read()
        assert zero.pauses == (0, 0, 0)
        assert zero.seconds == (0.0, 0.0, 0.0)
        assert zero.longest == (None, None, None)
        assert zero.buckets is not None and all(sum(row) == 0 for row in zero.buckets)
        stats0 = collections()
        gc.collect()
        got = rec.read()
        assert got.pauses == minus(collections(), stats0)
        rec.stop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_from_zero_and_the_parent_keeps_its_totals(
    recorder: GcPauses,
) -> None:
    gc.collect()
    gc.collect()
    parent = recorder.read()
    assert parent.pauses[2] >= 2
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        signal.alarm(20)
        try:
            os.close(read_end)
            at_start = recorder.read()
            stats0 = collections()
            gc.collect()
            later = recorder.read()
            out = {
                "start": at_start.pauses,
                "seconds": at_start.seconds,
                "later": later.pauses,
                "theirs": minus(collections(), stats0),
            }
            os.write(write_end, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        child = json.loads(f.read() or b"{}")
    os.waitpid(pid, 0)
    assert child["start"] == [0, 0, 0]
    assert child["seconds"] == [0.0, 0.0, 0.0]
    assert child["later"] == child["theirs"]
    mine = recorder.read()
    assert all(m >= p for m, p in zip(mine.pauses, parent.pauses, strict=True))
    assert mine.seconds[2] >= parent.seconds[2]


def test_no_gc_callbacks_means_not_started(monkeypatch: pytest.MonkeyPatch) -> None:
    # No runtime without gc.callbacks is installed here: take the attribute away.
    saved = gc.callbacks
    monkeypatch.delattr(gc, "callbacks")
    rec = GcPauses()
    assert not GcPauses.available()
    assert rec.start() is False
    assert not rec.running
    rec.stop()
    assert rec.read().pauses == (0, 0, 0)
    monkeypatch.setattr(gc, "callbacks", saved, raising=False)
    assert all(c is not rec._callback for c in saved)


def test_bad_option_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="histogram must be True or False, not str 'yes'"):
        GcPauses(histogram="yes")  # type: ignore[arg-type]


# --- a stop without its start --------------------------------------------------------


@pytest.mark.parametrize("histogram", [False, True])
def test_installed_during_the_stop_phase_counts_nothing_for_that_collection(
    histogram: bool,
) -> None:
    rec = GcPauses(histogram=histogram)
    armed = [True]

    def installer(phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and armed[0]:
            armed[0] = False
            rec.start()  # appended now: CPython calls it in this same stop phase

    with callbacks_kept():
        gc.callbacks.append(installer)
        gc.collect()
        assert rec.running
        assert rec.read().pauses == (0, 0, 0)
        stats0 = collections()
        around = timed_collect()
        got = rec.read()
        assert got.pauses == minus(collections(), stats0)
        assert 0 < got.seconds[2] <= around
        rec.stop()


class _StartsOnFinalize:
    """Cyclic garbage whose finalizer installs the recorder mid-collection."""

    def __init__(self, rec: GcPauses) -> None:
        self.rec = rec
        self.me = self

    def __del__(self) -> None:
        self.rec.start()


@pytest.mark.parametrize("histogram", [False, True])
def test_installed_by_a_finalizer_mid_collection_counts_nothing_for_it(histogram: bool) -> None:
    rec = GcPauses(histogram=histogram)
    with callbacks_kept(), gc_off():
        gc.collect()
        _StartsOnFinalize(rec)
        gc.collect()  # finalizers run between "start" and "stop"
        assert rec.running
        assert rec.read().pauses == (0, 0, 0)
        stats0 = collections()
        around = timed_collect()
        got = rec.read()
        assert got.pauses == minus(collections(), stats0) == (0, 0, 1)
        assert 0 < got.seconds[2] <= around
        rec.stop()


# --- re-entrancy ---------------------------------------------------------------------


def test_a_collect_inside_a_later_gc_callback_neither_recurses_nor_corrupts(
    recorder: GcPauses,
) -> None:
    depth = [0]
    deepest = [0]
    returned: list[int] = []

    def collects(phase: str, info: dict[str, int]) -> None:
        depth[0] += 1
        deepest[0] = max(deepest[0], depth[0])
        returned.append(gc.collect())
        returned.append(gc.collect(0))
        depth[0] -= 1

    gc.callbacks.append(collects)  # after ours
    for _ in range(ATTEMPTS):
        with gc_off():
            cyclic_garbage(GRAPH // 3)
            stats0, r0 = steady(recorder)
            around = timed_collect()
            stats1, r1 = steady(recorder)
        pause = r1.seconds[2] - r0.seconds[2]
        assert minus(r1.pauses, r0.pauses) == minus(stats1, stats0) == (0, 0, 1)
        assert 0 < pause <= around
        if around - pause <= TOLERANCE:
            break
    gc.callbacks.remove(collects)
    assert deepest[0] == 1
    assert set(returned) == {0}  # CPython ignores a collect() during a collection


def test_a_collect_inside_an_sdk_observable_callback_reading_us() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    seen: dict[str, Any] = {}
    with callbacks_kept():
        rec = GcPauses(histogram=True)
        rec.start()

        def observe(options: CallbackOptions) -> Iterator[Observation]:
            seen["stats0"], seen["r0"] = steady(rec)
            graph.clear()  # now garbage
            seen["around"] = timed_collect()
            seen["stats1"], seen["r1"] = steady(rec)
            yield Observation(seen["r1"].longest[2], {"cpython.gc.generation": 2})

        provider.get_meter("test").create_observable_gauge("gc.longest", [observe], unit="s")
        with gc_off():
            graph: list[Any] = [[] for _ in range(20_000)]
            for i, node in enumerate(graph):
                node.append(graph[i - 1])
        # Every container allocation now collects, so collections also run
        # inside the SDK while it holds its own locks.
        threshold = gc.get_threshold()
        gc.set_threshold(1)
        result: list[Any] = []
        worker = threading.Thread(target=lambda: result.append(reader.get_metrics_data()))
        try:
            worker.start()
            worker.join(60)
        finally:
            gc.set_threshold(*threshold)
        assert not worker.is_alive(), "collection deadlocked"
        rec.stop()
    provider.shutdown()

    r0, r1 = seen["r0"], seen["r1"]
    assert minus(r1.pauses, r0.pauses) == minus(seen["stats1"], seen["stats0"])
    assert r1.pauses[2] - r0.pauses[2] >= 1
    assert 0 < r1.seconds[2] - r0.seconds[2] <= seen["around"]
    assert sum(r1.buckets[2]) == r1.pauses[2]
    (point,) = [
        p
        for rm in result[0].resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "gc.longest"
        for p in m.data.data_points
    ]
    assert point.value == r1.longest[2] >= r1.seconds[2] - r0.seconds[2] - TOLERANCE


def test_collections_nested_in_one_another_are_each_counted(recorder: GcPauses) -> None:
    # On 3.12 a collection scheduled before another one starts runs at the next
    # eval-breaker check, inside the other one's gc callbacks. Allocating past
    # the threshold in C code (no check in between) and then collecting, all
    # from C, sets that up on purpose. Elsewhere nothing nests; counts still hold.
    depth = [0]
    deepest = [0]

    def observer(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            depth[0] += 1
            deepest[0] = max(deepest[0], depth[0])
            # Allocated past the threshold with no check in between: on 3.12,
            # after a first nested run has cleared the collecting flag, this
            # schedules one more, which runs inside the collection in flight.
            keep.append(list(map(list, zip(range(2000), strict=False))))
        else:
            depth[0] -= 1

    keep: list[Any] = []
    call = getattr(operator, "call", None) or (lambda f: f())
    allocate: Callable[[], Any] = functools.partial(list, map(list, zip(range(5000), strict=False)))
    gc.callbacks.append(observer)  # after ours
    stats0, r0 = steady(recorder)
    t0 = time.perf_counter()
    list(map(call, [allocate, gc.collect]))
    around = time.perf_counter() - t0
    gc.callbacks.remove(observer)
    stats1, r1 = steady(recorder)
    assert minus(r1.pauses, r0.pauses) == minus(stats1, stats0)
    spent = minus(r1.seconds, r0.seconds)  # type: ignore[arg-type]
    assert all(0 <= s <= around for s in spent), (spent, around)
    assert depth[0] == 0
    if sys.version_info[:2] == (3, 12):
        assert deepest[0] >= 2, "expected a nested collection on 3.12"


@pytest.mark.parametrize("histogram", [False, True])
def test_a_collection_nested_at_the_clock_call_is_timed_apart(histogram: bool) -> None:
    # The clock read is the one call in the callback, so the one place where 3.12
    # can run a nested collection mid-callback (after the eval-breaker check
    # that follows a call). That needs a thread switch at the right instant, so
    # it is injected: a clock that runs a whole collection, re-entering the
    # callback, before it returns.
    rec = GcPauses(histogram=histogram)
    callback: Any = rec._callback
    times = iter([0.0, 1.0, 3.0, 5.0, 9.0, 10.0, 12.0, 20.0])

    def clock() -> float:
        return next(times)

    def nesting_clock() -> float:
        callback("start", {"generation": 0}, _clock=clock)
        callback("stop", {"generation": 0}, _clock=clock)
        return next(times)

    callback("start", {"generation": 2}, _clock=clock)  # 0.0
    callback("start", {"generation": 1}, _clock=nesting_clock)  # 1.0 to 3.0 nested, then 5.0
    callback("stop", {"generation": 1}, _clock=clock)  # 9.0
    callback("stop", {"generation": 2}, _clock=nesting_clock)  # 10.0 to 12.0 nested, then 20.0
    got = rec.read()
    assert got.pauses == (2, 1, 1)
    assert got.seconds == (4.0, 4.0, 20.0)
    assert got.longest == (2.0, 4.0, 20.0)
    # Paired again: the next collection stands alone.
    callback("stop", {"generation": 0}, _clock=clock)  # no start: ignored
    assert rec.read().pauses == (2, 1, 1)


def test_threads_collecting_and_reading_at_once(recorder: GcPauses) -> None:
    stop = threading.Event()
    readings: list[GcPauseReading] = []

    def churn() -> None:
        while not stop.is_set():
            for _ in range(1000):
                a: list[Any] = []
                a.append(a)

    def read() -> None:
        while not stop.is_set():
            readings.append(recorder.read())

    stats0, r0 = steady(recorder)
    threads = [threading.Thread(target=churn) for _ in range(3)] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    stats1, r1 = steady(recorder)
    assert minus(r1.pauses, r0.pauses) == minus(stats1, stats0)
    for a, b in itertools.pairwise(readings):
        assert all(y >= x for x, y in zip(a.pauses, b.pauses, strict=True))
        assert all(y >= x for x, y in zip(a.seconds, b.seconds, strict=True))
    assert len(readings) > 10


@pytest.mark.parametrize("histogram", [False, True])
def test_a_new_maximum_waits_for_a_read_that_takes_the_maxima(histogram: bool) -> None:
    # Without the GIL another thread's collection runs the callback while read()
    # takes and zeroes the maxima: the store of a new maximum waits for it.
    rec = GcPauses(histogram=histogram)
    callback: Any = rec._callback
    times = iter([0.0, 0.25])
    acquire, release = rec._guard
    acquire()  # a read() in the middle of its take-and-zero
    try:
        other = threading.Thread(
            target=lambda: (
                callback("start", {"generation": 1}, _clock=lambda: next(times)),
                callback("stop", {"generation": 1}, _clock=lambda: next(times)),
            )
        )
        other.start()
        # Counted before it stores its maximum: wait for that, however late it started.
        deadline = time.monotonic() + 10
        while rec._count[1] == 0.0 and time.monotonic() < deadline:
            time.sleep(0.001)
        other.join(0.5)
        assert other.is_alive(), "a new maximum was stored during the take-and-zero"
        assert rec._peak[1] == 0.0 and rec._count[1] == 1.0
    finally:
        release()
    other.join(10)
    got = rec.read()
    assert got.longest == (None, 0.25, None) and got.pauses == (0, 1, 0)
    assert rec.read().longest == (None, None, None)


# --- cost ----------------------------------------------------------------------------

_ALLOCATING = {
    "BUILD_TUPLE", "BUILD_LIST", "BUILD_MAP", "BUILD_SET", "BUILD_SLICE", "BUILD_STRING",
    "BUILD_CONST_KEY_MAP", "LIST_APPEND", "MAKE_FUNCTION", "MAKE_CELL", "LOAD_CLOSURE",
    "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_NAME", "LOAD_ATTR", "LOAD_METHOD", "IMPORT_NAME",
    "FORMAT_VALUE", "CALL_FUNCTION_KW", "CALL_FUNCTION_EX", "KW_NAMES", "CALL_KW",
}  # fmt: skip


@pytest.mark.parametrize("histogram", [False, True])
def test_the_callback_loads_only_locals_and_builds_nothing(histogram: bool) -> None:
    callback = GcPauses(histogram=histogram)._callback
    assert callback.__closure__ is None
    ops = {i.opname for i in dis.get_instructions(callback)}
    assert not ops & _ALLOCATING, ops & _ALLOCATING


@pytest.mark.parametrize("histogram", [False, True])
def test_many_collections_leave_no_memory_behind_in_this_module(histogram: bool) -> None:
    here = tracemalloc.Filter(True, gc_pauses.__file__)
    # A leak of one float per collection shows as `runs` blocks, far above the
    # bound below (tens of slots) at either size.
    warm, runs = (100, 500) if FREE_THREADED else (1000, 100_000)
    with callbacks_kept():
        rec = GcPauses(histogram=histogram)
        rec.start()
        tracemalloc.start()
        try:
            for _ in range(warm):  # every slot holds a float of its own
                gc.collect(0)
            before = tracemalloc.take_snapshot().filter_traces([here])
            for _ in range(runs):
                gc.collect(0)
            after = tracemalloc.take_snapshot().filter_traces([here])
        finally:
            tracemalloc.stop()
        assert rec.read().pauses[0] >= warm + runs
        rec.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    blocks = sum(s.count_diff for s in after.compare_to(before, "filename"))
    # The totals are floats held in slots; a slot may end up holding a float that
    # was allocated (the free list was empty) rather than reused. That bounds the
    # growth by the number of slots, where a leak of one float per collection
    # would show 100,000 blocks (2.4 MB).
    slots = gc_pauses.DEPTH + gc_pauses.GENERATIONS * (3 + len(BOUNDS) + 1)
    assert blocks <= slots and grown <= slots * 32, (grown, blocks)


def _peaks(callback: Any, runs: int = 100 if FREE_THREADED else 2000) -> collections_.Counter[int]:
    """Bytes allocated above the start, at the peak of each of ``runs`` collections."""
    found: collections_.Counter[int] = collections_.Counter()
    with callbacks_kept():
        gc.callbacks[:] = [callback]
        for _ in range(10 if FREE_THREADED else 100):
            gc.collect(0)
        for _ in range(runs):
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            gc.collect(0)
            found[tracemalloc.get_traced_memory()[1] - start] += 1
    return found


def _empty_callback(phase: str, info: dict[str, int]) -> None:
    pass


@pytest.mark.parametrize("histogram", [False, True])
def test_a_collection_allocates_no_more_than_with_an_empty_callback(histogram: bool) -> None:
    # CPython allocates the info dict and the phase string for any callback. A
    # float the callback makes comes from the float free list, which tracemalloc
    # does not see; anything else it allocated would raise the peak.
    tracemalloc.start()
    try:
        empty = _peaks(_empty_callback)
        ours = _peaks(GcPauses(histogram=histogram)._callback)
    finally:
        tracemalloc.stop()
    usual = empty.most_common(1)[0][0]
    assert ours[usual] >= 0.99 * sum(ours.values()), (empty, ours)


# --- the histogram -------------------------------------------------------------------


def test_a_full_collection_lands_in_the_bucket_of_the_time_around_it() -> None:
    with callbacks_kept():
        rec = GcPauses(histogram=True)
        rec.start()
        for _ in range(ATTEMPTS):
            with gc_off():
                cyclic_garbage()
                _, r0 = steady(rec)
                around = timed_collect()
                _, r1 = steady(rec)
            assert r0.buckets is not None and r1.buckets is not None
            delta = minus(r1.buckets[2], r0.buckets[2])
            assert sum(delta) == 1
            (ours,) = [i for i, n in enumerate(delta) if n]
            pause = r1.seconds[2] - r0.seconds[2]
            assert ours == bisect.bisect_left(BOUNDS, pause)
            lowest = bisect.bisect_left(BOUNDS, around - TOLERANCE)
            if lowest <= ours <= bisect.bisect_left(BOUNDS, around):
                break
        else:
            pytest.fail(f"bucket {ours} outside the bounds around {around} s")
        assert quantile_bound(r0, r1, 2, 0.99) == BOUNDS[ours] >= pause
        for g in range(len(r1.pauses)):
            assert sum(r1.buckets[g]) == r1.pauses[g]
        rec.stop()


def _reading(buckets: list[int], longest: float | None) -> GcPauseReading:
    return GcPauseReading(
        seconds=(0.0,), pauses=(sum(buckets),), longest=(longest,), buckets=(tuple(buckets),)
    )


def test_quantile_bound_of_hand_made_buckets() -> None:
    empty = _reading([0] * (len(BOUNDS) + 1), None)
    counts = [0] * (len(BOUNDS) + 1)
    counts[2] = 90  # (20 µs, 50 µs]
    counts[8] = 9  # (2 ms, 5 ms]
    counts[-1] = 1  # above 1 s
    full = _reading(counts, 1.7)
    assert quantile_bound(empty, full, 0, 0.5) == 0.00005
    assert quantile_bound(empty, full, 0, 0.9) == 0.00005
    assert quantile_bound(empty, full, 0, 0.95) == 0.005
    assert quantile_bound(empty, full, 0, 0.99) == 0.005
    assert quantile_bound(empty, full, 0, 1.0) == 1.7
    assert quantile_bound(full, full, 0, 0.5) is None
    no_buckets = GcPauseReading(seconds=(0.0,), pauses=(0,), longest=(None,))
    assert quantile_bound(no_buckets, full, 0, 0.5) is None
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\], not 1.5"):
        quantile_bound(empty, full, 0, 1.5)


_DEADLOCK = textwrap.dedent(
    """
    import faulthandler, gc, sys
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    histogram = MeterProvider(metric_readers=[reader]).get_meter("x").create_histogram("h")

    def record(phase, info):
        if phase == "stop":
            histogram.record(0.001)

    histogram.record(0.001)
    gc.callbacks.append(record)
    gc.set_threshold(1)
    faulthandler.dump_traceback_later(3, exit=True)
    for _ in range(100):
        reader.get_metrics_data()
    print("no deadlock", gc.get_stats()[0]["collections"])
    """
)


def test_recording_a_sync_histogram_from_a_gc_callback_deadlocks_the_sdk() -> None:
    # Why the callback never records into the SDK: this is what would happen.
    done = subprocess.run(
        [sys.executable, "-c", _DEADLOCK], capture_output=True, text=True, timeout=60
    )
    if FREE_THREADED:
        # The free-threaded collector scales its threshold by the live objects:
        # threshold 1 does not collect at each allocation, so no collection
        # happens to start inside the SDK's lock here (one still can: the
        # design stands). What the demonstration relies on is what differs.
        assert done.returncode == 0, done.stderr[-2000:]
        said, collected = done.stdout.split()[:2], int(done.stdout.split()[2])
        assert said == ["no", "deadlock"] and collected < 1000, done.stdout
        return
    assert "no deadlock" not in done.stdout, "the SDK no longer deadlocks: revisit the design"
    assert done.returncode != 0
    assert "in aggregate" in done.stderr and "in collect" in done.stderr, done.stderr[-2000:]


# --- the edges: reset mid-collection, deep nesting, every pause in a bucket ---


@pytest.mark.parametrize("histogram", [False, True])
def test_reset_during_a_collection_forgets_that_collection(histogram: bool) -> None:
    seen: list[int] = []
    with callbacks_kept(), gc_off():
        rec = GcPauses(histogram=histogram)
        assert rec.start()

        def resetter(phase: str, info: dict[str, int]) -> None:
            if phase == "start" and not seen:
                seen.append(info["generation"])
                rec.reset()  # ours has seen this start already

        gc.callbacks.append(resetter)
        cyclic_garbage(1000)
        gc.collect()
        gc.callbacks.remove(resetter)
        before, first = steady(rec)
        cyclic_garbage(1000)
        gc.collect()
        after, second = steady(rec)
        rec.stop()
    assert seen == [GENERATIONS - 1]
    assert first.pauses == (0,) * GENERATIONS  # the collection in flight was forgotten
    assert minus(second.pauses, first.pauses) == minus(after, before)
    assert second.pauses == minus(after, before)
    if histogram:
        assert second.buckets is not None
        assert tuple(sum(row) for row in second.buckets) == second.pauses


def test_every_pause_lands_in_a_bucket_of_its_generation() -> None:
    runs = (5, 3, 2)[:GENERATIONS]
    with callbacks_kept(), gc_off():
        rec = GcPauses(histogram=True)
        assert rec.start()
        before, r0 = steady(rec)
        for generation, n in enumerate(runs):
            for _ in range(n):
                cyclic_garbage(500)
                gc.collect(generation)
        after, r1 = steady(rec)
        rec.stop()
    assert r0.buckets is not None and r1.buckets is not None
    counted = tuple(sum(b - a for a, b in zip(r0.buckets[g], r1.buckets[g], strict=True))
                    for g in range(GENERATIONS))  # fmt: skip
    assert counted == minus(after, before) == minus(r1.pauses, r0.pauses)
    assert counted == runs


@pytest.mark.parametrize("histogram", [False, True])
def test_collections_nested_past_the_timed_depth_are_paired_but_not_timed(
    histogram: bool,
) -> None:
    # Nesting is a 3.12 quirk, and never this deep for real: driven by hand,
    # as CPython calls the callback, with a clock that counts 0, 1, 2...
    rec = GcPauses(histogram=histogram)
    callback: Any = rec._callback
    ticks = iter(range(100))

    def clock() -> float:
        return float(next(ticks))

    levels = DEPTH + 2
    for _ in range(levels):
        callback("start", {"generation": 0}, _clock=clock)  # 0, 1, 2, 3 for the timed
    for _ in range(levels):
        callback("stop", {"generation": 0}, _clock=clock)  # 4, 5, 6, 7 for the timed
    got = rec.read()
    # Innermost timed level: 3 to 4; outermost: 0 to 7.
    assert got.pauses[0] == DEPTH
    assert got.seconds[0] == 1.0 + 3.0 + 5.0 + 7.0
    assert got.longest[0] == 7.0
    if histogram:
        assert got.buckets is not None
        # 1 s in the last bound's bucket (upper bounds are inclusive), 3, 5 and 7 s above it.
        assert got.buckets[0][-2:] == (1, 3)
    # Paired again: the next collection stands alone.
    callback("start", {"generation": 1}, _clock=clock)  # 8
    callback("stop", {"generation": 1}, _clock=clock)  # 9
    again = rec.read()
    assert again.pauses[:2] == (DEPTH, 1)
    assert again.longest[:2] == (None, 1.0)


def _reading_of_rows(buckets: tuple[tuple[int, ...], ...]) -> GcPauseReading:
    n = len(buckets)
    return GcPauseReading(
        seconds=(0.0,) * n,
        pauses=tuple(sum(row) for row in buckets),
        longest=(None,) * n,
        buckets=buckets,
    )


def test_quantile_bound_refuses_q_of_zero() -> None:
    reading = GcPauses(histogram=True).read()
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\], not 0.0"):
        quantile_bound(reading, reading, 0, 0.0)


def test_quantile_bound_refuses_readings_of_different_bucket_layouts() -> None:
    with callbacks_kept(), gc_off():
        rec = GcPauses(histogram=True)
        assert rec.start()
        before = rec.read()
        gc.collect()
        after = rec.read()
        rec.stop()
    assert after.buckets is not None
    assert quantile_bound(before, after, GENERATIONS - 1, 1.0) is not None
    # The same counts under one bound fewer: not comparable, never compared.
    shorter = _reading_of_rows(tuple(row[:-1] for row in after.buckets))
    assert len(shorter.buckets[0]) == len(BOUNDS)  # type: ignore[index]
    with pytest.raises(ValueError):
        quantile_bound(before, shorter, GENERATIONS - 1, 1.0)
    with pytest.raises(ValueError):
        quantile_bound(shorter, after, GENERATIONS - 1, 1.0)
