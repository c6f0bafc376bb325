"""GC pauses and event-loop lag through the real instrumentor, on a real SDK.

Every figure is checked against a truth the test takes itself: the time it
measures around ``gc.collect()``, CPython's own collection counts
(``gc.get_stats()``), the length of each ``time.sleep`` that blocks a loop, and
asyncio's own queues and selector. See ``test_gc_pauses.py`` and ``test_loops_*.py``
for the recorder and the monitor on their own, and ``test_loops_reported.py``
for the event-loop metrics alone.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import gc
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric

from opentelemetry.instrumentation.process import ProcessInstrumentor
from opentelemetry.instrumentation.process.probes.gc_pauses import TIMED_BY_INTERPRETER
from opentelemetry.instrumentation.process.probes.gil_wait import gil_enabled

from .conftest import Sdk, collect, points, value
from .support.forked import FORKS, held_by_another_thread, in_child
from .support.gc import (
    FREE_THREADED,
    collections,
    cyclic_garbage,
    gc_off,
    minus,
    own_timing,
    timed_collect,
)
from .support.loopapps import (
    DELAY_MAX,
    LOOP_METRICS,
    WATCH,
    asleep,
    by_loop,
    hooked,
    idle_loop,
    package_handles,
    periodic_app,
    uvloop,
    waiting_loop,
    watched,
)
from .support.waiting import eventually

TIME = "process_metrics.cpython.gc.pause.time"
MAX = "process_metrics.cpython.gc.pause.max"
BUCKET = "process_metrics.cpython.gc.pause.bucket"
STALL_LOOP = "process_metrics.eventloop.stall.duration"
GEN = "cpython.gc.generation"

# GC: the time around gc.collect() exceeds the pause by the call, building the
# info dict and calling the callbacks: tens of µs here. 1 ms leaves room for a
# cache-cold start; a preemption outside the pause on this shared machine can
# cost more, so the lower bound gets up to ATTEMPTS tries (the upper bound must
# hold on every one).
TOLERANCE = 0.001
ATTEMPTS = 5

# Loops: the instrumentor probes every 20 ms (the monitor's default interval).
# A loop blocked for b reads a maximum lag of at least b - INTERVAL: the tick
# falls due at most one interval into the block, and runs when it ends. At most,
# how late a timer of the test's own ran (support.loopapps.watched), plus WATCH:
# the wake-up latency and scheduling noise on 2 shared cores have no fixed bound.
INTERVAL = 0.02


# --- helpers --------------------------------------------------------------------------


def by_generation(metric: Metric) -> dict[int, float]:
    found = {dict(k)[GEN]: v for k, v in points(metric).items()}
    assert set(found) == {0, 1, 2}, found
    return found


def buckets(metric: Metric) -> dict[str, int]:
    return {dict(k)["le"]: v for k, v in points(metric).items()}


def own_callbacks(baseline: list[Any]) -> list[Any]:
    """What gc.callbacks holds beyond ``baseline`` (taken before instrument())."""
    return [c for c in gc.callbacks if not any(c is b for b in baseline)]


# --- GC pauses: the truth -------------------------------------------------------------


@pytest.mark.parametrize("histogram", [False, True], ids=["default", "gc_pause_histogram"])
def test_a_full_collection_shows_in_pause_time_and_max_then_max_returns_to_zero(
    histogram: bool, instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    instrument(gc_pause_histogram=histogram)
    gaps = []
    for _ in range(ATTEMPTS):
        with gc_off():
            gc.collect()
            stats0 = collections()
            before = collect(reader)
            cyclic_garbage()
            around = timed_collect()
            during = collect(reader)
            after = collect(reader)
            stats1 = collections()
        if minus(stats1, stats0) != (0, 0, 1):
            continue  # 3.12 ran a collection it had scheduled before gc.disable(): again
        t0, t1, t2 = (by_generation(m[TIME]) for m in (before, during, after))
        pause = t1[2] - t0[2]
        assert 0 < pause <= around, (pause, around)
        assert t1[0] == t0[0] and t1[1] == t0[1]  # the quiet generations did not move
        # The longest pause of the interval is that one collection ...
        m1 = by_generation(during[MAX])
        assert m1[2] == pytest.approx(pause, abs=1e-9)
        assert m1[0] == m1[1] == 0.0
        # ... and the next interval, with no collection, shows 0 for every generation.
        assert by_generation(after[MAX]) == {0: 0.0, 1: 0.0, 2: 0.0}
        assert t2 == t1
        if histogram:
            b0, b1 = buckets(before[BUCKET]), buckets(during[BUCKET])
            added = {le: b1[le] - b0[le] for le in b1}
            assert added["+Inf"] == 1
            # Cumulative: 0 below the pause's bucket, 1 from it up.
            bounds = sorted((float(le), n) for le, n in added.items() if le != "+Inf")
            # (A loaded machine can stretch it past the last finite bound: +Inf alone.)
            first = next((bound for bound, n in bounds if n == 1), math.inf)
            assert all(n == (1 if bound >= first else 0) for bound, n in bounds), added
            below = max([b for b, _ in bounds if b < first], default=0.0)
            assert below < pause <= first
        else:
            assert BUCKET not in during
        gaps.append(around - pause)
        if around - pause <= TOLERANCE:
            break
    assert gaps, "every attempt had a collection of its own in the way"
    assert min(gaps) <= TOLERANCE, f"pause short of the time around it by {gaps} s"
    assert around > 0.01, f"the graph collected in {around} s: too small to test"


def test_pause_time_per_generation_is_bounded_by_cpythons_own_counts(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    """Generations that CPython says did not collect did not gain pause time."""
    instrument()
    with gc_off():
        first = by_generation(collect(reader)[TIME])
        stats0 = collections()
        for _ in range(50):
            gc.collect(0)
        t0 = time.perf_counter()
        gc.collect(1)
        around = time.perf_counter() - t0
        stats1 = collections()
        second = by_generation(collect(reader)[TIME])
    if minus(stats1, stats0) != (50, 1, 0):
        pytest.skip(f"a collection of its own came in between: {minus(stats1, stats0)}")
    assert second[2] == first[2]
    assert 0 < second[1] - first[1] <= around
    assert second[0] > first[0]


def test_each_collection_by_any_reader_starts_a_new_longest_pause_window() -> None:
    """Two readers on one provider: the second one to collect sees what came after the first."""
    reader, other = InMemoryMetricReader(), InMemoryMetricReader()
    two = MeterProvider(metric_readers=[reader, other])
    inst = ProcessInstrumentor()
    inst.instrument(meter_provider=two)
    gaps = []
    try:
        # A preemption outside the pause widens the time around it: the lower bound gets
        # up to ATTEMPTS rounds, the upper bound must hold in every one.
        for _ in range(ATTEMPTS):
            with gc_off():
                collect(reader)
                collect(other)
                cyclic_garbage()
                around = timed_collect()
                first = by_generation(collect(reader)[MAX])
                second = by_generation(collect(other)[MAX])
            assert first[2] <= around
            assert second == {0: 0.0, 1: 0.0, 2: 0.0}
            gaps.append(around - first[2])
            if gaps[-1] <= TOLERANCE * ATTEMPTS:
                break
    finally:
        inst.uninstrument()
        two.shutdown()
    assert min(gaps) <= TOLERANCE * ATTEMPTS, f"longest pause short of the time around by {gaps}"


@own_timing
def test_a_longest_pause_the_interpreter_did_not_time_alone_is_left_out(
    instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    """Without a callback (3.15), two collections of one generation between two
    collections of metrics leave its longest pause unknown: no point, never a guess."""
    instrument()
    with gc_off():
        collect(reader)
        d0 = gc.get_stats()[2]["duration"]
        cyclic_garbage()
        gc.collect()  # one of generation 2: its duration is its longest pause
        d1 = gc.get_stats()[2]["duration"]
        gc.collect(0)
        gc.collect(0)
        got = collect(reader)
    longest = {dict(k)[GEN]: v for k, v in points(got[MAX]).items()}
    assert longest == {1: 0.0, 2: pytest.approx(d1 - d0, abs=1e-12)}
    assert by_generation(got[TIME])[2] > 0


# --- GC pauses: lifecycle -------------------------------------------------------------


def test_uninstrument_removes_every_hook_and_instrument_again_starts_fresh(
    provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    baseline = list(gc.callbacks)
    originals = (asyncio.events._set_running_loop, asyncio._set_running_loop)  # type: ignore[attr-defined]
    uvloop_class = dict(vars(uvloop.Loop)) if uvloop else {}
    callbacks = 0 if TIMED_BY_INTERPRETER else 1  # 3.15 times its collections itself
    inst = ProcessInstrumentor()
    inst.instrument(meter_provider=provider, event_loop=True)
    try:
        with waiting_loop("app-loop") as loop:  # the app itself has no timer
            assert len(own_callbacks(baseline)) == callbacks
            assert eventually(lambda: asleep_here(inst, loop))  # asleep in the probe's hook
            assert (hooked(loop), package_handles(loop)) == (True, [])
            time.sleep(0.1)  # ticks fall due while it sleeps: read as on time, not woken
            assert "app-loop" in by_loop(collect(reader), DELAY_MAX)
            with gc_off():
                gc.collect()
                cyclic_garbage()
                gc.collect()
                grown = by_generation(collect(reader)[TIME])
            assert grown[2] > 0
            inst.uninstrument()
            # Stopped, from another thread than the loop's: the hook is taken off its
            # selector at once, while the loop sleeps in it.
            selector_wrapped = "select" in vars(loop._selector)  # type: ignore[attr-defined]
            left = package_handles(loop)
    finally:
        inst.uninstrument()
    assert not selector_wrapped and left == []
    assert gc.callbacks == baseline
    assert (asyncio.events._set_running_loop, asyncio._set_running_loop) == originals  # type: ignore[attr-defined]
    if uvloop:
        assert dict(vars(uvloop.Loop)) == uvloop_class
    assert not {TIME, MAX, *LOOP_METRICS} & set(collect(reader))

    # Again: one callback, and totals that count from zero.
    with gc_off():
        gc.collect()
        inst.instrument(meter_provider=provider, event_loop=True)
        try:
            assert len(own_callbacks(baseline)) == callbacks
            fresh = collect(reader)
            stats0 = collections()
            around = timed_collect()
            stats1 = collections()
            later = collect(reader)
        finally:
            inst.uninstrument()
    assert by_generation(fresh[TIME]) == {0: 0.0, 1: 0.0, 2: 0.0}
    assert minus(stats1, stats0) == (0, 0, 1)
    assert 0 < by_generation(later[TIME])[2] <= around
    assert gc.callbacks == baseline


def asleep_here(inst: ProcessInstrumentor, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` waits in its select through the instrumentor's probe."""
    return asleep(runtime_state(inst)["asyncio_loops"], loop)


def runtime_state(inst: ProcessInstrumentor) -> dict[str, Any]:
    """The states the instrumentor's runtime sources keep (the recorder, the monitor)."""
    assert inst._metrics is not None
    live = inst._metrics._live
    assert live is not None
    return live.cache._ctx.state  # type: ignore[no-any-return]


def each_fork(forks: list[Any] | None = None) -> Callable[[Callable[..., None]], Any]:
    """A test run once per kind of fork (``forks``: its params, by default every kind)."""

    def marked(test: Callable[..., None]) -> Any:
        for mark in (
            pytest.mark.parametrize("fork", list(FORKS) if forks is None else forks),
            pytest.mark.filterwarnings("ignore:This process .* is multi-threaded"),
            pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
        ):
            test = mark(test)
        return test

    return marked


def _forked_child_reads(
    fork: str, instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> tuple[dict[str, Any], dict[str, Metric]]:
    """What a child forked beside a running loop reads: its GC pauses, then its own loop.

    A child forked from C leaves the stalls out: naming one crashes it on 3.11 (a
    src bug of its own: ``test_a_stall_is_named_in_a_forked_child``).
    """
    baseline = list(gc.callbacks)
    if fork == "C fork, no Python hooks":
        instrument(event_loop=True, exclude=(STALL_LOOP,))
    else:
        instrument(event_loop=True)
    with idle_loop("parent-loop"):
        time.sleep(0.1)  # its probe reads a few ticks
        gc.collect()
        gc.collect()
        parent = collect(reader)
        assert by_generation(parent[TIME])[2] > 0
        assert "parent-loop" in by_loop(parent, DELAY_MAX)
        if fork == "C fork, no Python hooks" and FREE_THREADED:
            # CPython's limit, with or without this package: the free-threaded
            # collector stops the world, and waits for the parent's threads,
            # whose states only PyOS_AfterFork_Child() clears (it aborts when
            # called late, from the child's Python code). Whether the child's
            # first collection hangs depends on where those threads were: no
            # test can tell. The package warns in such a child (test_fork.py);
            # a server must run the hooks at fork (uWSGI: --py-call-osafterfork).
            pytest.skip("a fork from C beside running threads may hang on a free-threaded build")

        def child() -> dict[str, Any]:
            with gc_off():
                first = collect(reader)
                ours = len(own_callbacks(baseline))
                cyclic_garbage()
                around = timed_collect()
                second = collect(reader)
            blocks: list[float] = []
            stalls: list[float] = []  # the loop's own truth of how long it was held up
            asyncio.run(watched(periodic_app(blocks, count=1, every=0.3, block=0.1), stalls)())
            loops = collect(reader)
            return {
                "time": by_generation(first[TIME]),
                "max": by_generation(first[MAX]),
                "ours": ours,
                "around": around,
                "later": by_generation(second[TIME]),
                "later_max": by_generation(second[MAX]),
                "loops": by_loop(loops, DELAY_MAX),
                "blocks": blocks,
                "stalls": stalls,
            }

        # GC off from before the fork: a collection in the child before its first
        # collection of metrics would rightly count, and make this test flaky.
        with gc_off():
            got = in_child(child, 25, fork=FORKS[fork])
    assert "error" not in got, got
    return got, parent


@pytest.mark.parametrize(
    ("excluded", "measured"),
    [
        ("process_metrics.eventloop.utilization", "delays"),
        ("process_metrics.eventloop.delay.*", "utilization"),
    ],
)
def test_the_loop_monitor_measures_only_what_the_metrics_read(
    excluded: str, measured: str, instrument: Callable[..., ProcessInstrumentor]
) -> None:
    inst = instrument(event_loop=True, exclude=[excluded])
    # Stalls are named whenever event_loop is on.
    assert runtime_state(inst)["asyncio_loops"].parts == {measured, "stalls"}


@each_fork()
def test_a_forked_child_probes_its_own_loops_and_keeps_its_gc_callback(
    fork: str, instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    got, parent = _forked_child_reads(fork, instrument, reader)
    # The parent's callback, inherited with the memory: one, where one is needed.
    assert got["ours"] == (0 if TIMED_BY_INTERPRETER else 1)
    assert 0 < got["later"]["2"] - got["time"]["2"] <= got["around"]
    # The child's own loop, and not the parent's (its thread does not exist here).
    assert list(got["loops"]) == ["MainThread"]
    top = got["loops"]["MainThread"]
    # Above: held up past its block, by whatever held it (a busy machine, the child's first
    # writes to the pages it shares with the parent), its own timer was as late.
    assert max(got["blocks"]) - INTERVAL <= top <= max(got["stalls"]) + WATCH, got
    # The parent goes on with its own totals.
    assert by_generation(collect(reader)[TIME])[2] >= by_generation(parent[TIME])[2]


@each_fork()
def test_a_forked_child_starts_its_own_gc_pause_totals(
    fork: str, instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    """With or without Python's at-fork hooks: the source's after_fork, the one mechanism."""
    got, _ = _forked_child_reads(fork, instrument, reader)
    zero = {"0": 0.0, "1": 0.0, "2": 0.0}
    assert got["time"] == zero and got["max"] == zero, got  # nothing of the parent's
    assert 0 < got["later"]["2"] <= got["around"]
    assert got["later_max"]["2"] == got["later"]["2"]


def _blocker() -> None:
    time.sleep(0.3)  # blocks its loop: a stall the watch names by this function


@each_fork([pytest.param("os.fork"), pytest.param("C fork, no Python hooks")])
def test_a_stall_is_named_in_a_forked_child(
    fork: str, instrument: Callable[..., ProcessInstrumentor], reader: InMemoryMetricReader
) -> None:
    """A worker forked beside a running loop: its own loop's stall is named there as
    anywhere. Forked from C (uWSGI's default), it is recorded without a name: there the
    parent's thread states are still listed, and reading frames walks them (on 3.11 the
    program died of it, SIGSEGV, at its first stall), so the watch does not start again.
    Without a GIL (a free-threaded build) no stall is named, forked or not."""
    if fork == "C fork, no Python hooks" and FREE_THREADED:
        pytest.skip("a fork from C beside running threads may hang on a free-threaded build")
    instrument(event_loop=True)
    with idle_loop("parent-loop"):
        time.sleep(0.1)  # the parent's watch thread runs, and parks
        collect(reader)

        def child() -> dict[str, Any]:
            async def app() -> None:
                await asyncio.sleep(0.05)
                _blocker()
                await asyncio.sleep(0.05)

            collect(reader)
            asyncio.run(app())
            found = collect(reader).get(STALL_LOOP)
            points = [] if found is None else found.data.data_points
            return {"stalls": sorted((dict(p.attributes), p.count) for p in points)}

        with gc_off():
            got = in_child(child, 25, fork=FORKS[fork])
    assert "error" not in got, got
    named = {"thread.name": "MainThread", "code.function.name": f"{__name__}._blocker"}
    if fork == "C fork, no Python hooks" or not gil_enabled():  # no GIL: no frame read
        named = {"thread.name": "MainThread"}
    assert got["stalls"] == [[named, 1]], got


# --- GC pauses: collections where they hurt -------------------------------------------


def test_a_collection_inside_an_sdk_callback_that_runs_beside_ours(
    provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    """An observable callback of the application collects during the collection of ours."""
    seen: dict[str, Any] = {}
    graph: list[Any] = []

    def observe(options: CallbackOptions) -> Iterator[Observation]:
        if graph:
            seen["stats0"] = collections()
            graph.clear()  # now garbage
            seen["around"] = timed_collect()
            seen["stats1"] = collections()
        yield Observation(1)

    provider.get_meter("app").create_observable_gauge("app.collects", [observe])
    inst = ProcessInstrumentor()
    inst.instrument(meter_provider=provider)
    try:
        with gc_off():
            first = by_generation(collect(reader)[TIME])
            graph.extend([] for _ in range(100_000))
            for i, node in enumerate(graph):
                node.append(graph[i - 1])
            # Whether ours or the application's callback runs first is the SDK's
            # business: the collection shows in this one or in the next.
            second = collect(reader)
            third = collect(reader)
    finally:
        inst.uninstrument()
    assert minus(seen["stats1"], seen["stats0"]) == (0, 0, 1)
    pause = by_generation(third[TIME])[2] - first[2]
    assert 0 < pause <= seen["around"]
    longest = max(by_generation(second[MAX])[2], by_generation(third[MAX])[2])
    assert longest == pytest.approx(pause, abs=1e-9)


def test_collections_inside_our_own_callbacks_neither_recurse_nor_corrupt(
    provider: MeterProvider, reader: InMemoryMetricReader
) -> None:
    """Every allocation collects, so collections run inside our callbacks and our read
    (between its flip of the maxima and its take: the recorder takes no lock).

    On top, a full collection of a large graph is forced as our recorder's read
    begins (injected: no thread switch can be timed to land there). A test gc
    callback records the nesting depth. The recorder times each pause with its
    callback here (the histogram on): on 3.15 without one, the longest of many
    collections is not known.
    """
    inst = ProcessInstrumentor()
    inst.instrument(meter_provider=provider, gc_pause_histogram=True)
    recorder = runtime_state(inst)["cpython_gc_pauses"]
    original = recorder.read
    forced: list[float] = []
    depth, deepest, returned = [0], [0], []

    def nesting(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            depth[0] += 1
            deepest[0] = max(deepest[0], depth[0])
            returned.append(gc.collect())  # a collect inside a collection
        else:
            depth[0] -= 1

    def read_with_a_collection() -> Any:
        cyclic_garbage(100_000)
        forced.append(timed_collect())
        return original()

    results: list[Any] = []
    try:
        with gc_off():
            gc.collect()
            first = by_generation(collect(reader)[TIME])
        recorder.read = read_with_a_collection
        gc.callbacks.append(nesting)
        threshold = gc.get_threshold()
        gc.set_threshold(1)
        worker = threading.Thread(target=lambda: results.extend([collect(reader), collect(reader)]))
        t0 = time.perf_counter()
        try:
            worker.start()
            worker.join(60)
        finally:
            gc.set_threshold(*threshold)
            gc.callbacks.remove(nesting)
            recorder.read = original
        span = time.perf_counter() - t0
        assert not worker.is_alive(), "collection deadlocked"
    finally:
        inst.uninstrument()
    second, third = (by_generation(r[TIME]) for r in results)
    assert len(forced) == 2
    assert set(returned) == {0}  # CPython ignores a collect() during a collection
    if sys.version_info[:2] != (3, 12):  # 3.12 may nest one (see gc_pauses' docstring)
        assert deepest[0] == 1
    for g in (0, 1, 2):
        assert first[g] <= second[g] <= third[g], (first, second, third)
        assert third[g] - first[g] <= span
    # Each forced collection is in the reading it ran inside, to the tolerance.
    assert second[2] - first[2] >= forced[0] - TOLERANCE * ATTEMPTS
    assert third[2] - second[2] >= forced[1] - TOLERANCE * ATTEMPTS
    # A pause that ends between the two halves of a read counts in one window's
    # time and the next one's maximum: bounded by two windows' time.
    longest = by_generation(results[1][MAX])[2]
    assert forced[1] - TOLERANCE * ATTEMPTS <= longest <= third[2] - first[2]


# --- both: locks at fork, and the page -----------------------------------------------


@each_fork()
@pytest.mark.parametrize("lock", ["monitor", "hooks", "a loop's probe"])
def test_a_runtime_lock_held_by_another_thread_at_fork_does_not_deadlock_the_child(
    fork: str,
    lock: str,
    instrument: Callable[..., ProcessInstrumentor],
    reader: InMemoryMetricReader,
) -> None:
    """The exporter's thread may be reading the loops when a C server forks a worker.

    Which lock a thread holds at the instant of the fork cannot be arranged for
    real: a thread takes it here and keeps it across the fork. Each is renewed
    by the pid check of its owner's entry points (the GC recorder takes none).
    """
    from opentelemetry.instrumentation.process.probes.loops import discovery

    inst = instrument(event_loop=True)
    monitor = runtime_state(inst)["asyncio_loops"]
    with idle_loop("parent-loop"):
        assert eventually(lambda: bool(monitor._probes))
        target = {
            "monitor": monitor._lock,
            "hooks": discovery.hooks.lock,
            "a loop's probe": monitor._probes[0].lock,
        }[lock]
        got = _forked_with_a_lock_held(target, reader, fork)
    assert list(got["loops"]) == ["MainThread"]  # the child ran on, and read its own loop


def _forked_with_a_lock_held(
    target: Any, reader: InMemoryMetricReader, fork: str
) -> dict[str, Any]:
    def child() -> dict[str, Any]:
        with gc_off():
            first = collect(reader)
        blocks: list[float] = []
        asyncio.run(periodic_app(blocks, count=1, every=0.2, block=0.05)())
        return {"time": by_generation(first[TIME]), "loops": by_loop(collect(reader), DELAY_MAX)}

    with held_by_another_thread(target, hold_max=20), gc_off():  # gc off: as above
        got = in_child(child, 25, fork=FORKS[fork])
    assert "error" not in got, got
    return got


def test_the_runtime_page_gives_the_code_figures() -> None:
    """The figures docs/runtime.md states are the constants the code uses."""
    from opentelemetry.instrumentation.process.probes import gc_pauses
    from opentelemetry.instrumentation.process.probes.loops import monitor, stalls, window
    from opentelemetry.instrumentation.process.sources import runtime

    page = " ".join(
        (Path(__file__).resolve().parent.parent / "docs" / "runtime.md").read_text().split()
    )
    interval_ms = f"{monitor.DEFAULT_INTERVAL * 1000:g} ms"
    assert interval_ms == "20 ms" and f"every {interval_ms}" in page
    assert f"The interval is fixed at {interval_ms}" in page
    assert f"At most {monitor.MAX_LOOPS} loops" in page
    assert f"at most {round((window.BUCKET_RATIO - 1) * 100)} % above" in page
    low, high = gc_pauses.BOUNDS[0], gc_pauses.BOUNDS[-1]
    assert (low, high) == (1e-05, 1.0) and "from 10 µs to 1 s" in page
    assert f'`le="{low:g}"` to `le="{high:g}"`' in page
    assert f"less than {TOLERANCE * 1000:g} ms" in page
    stall_ms = f"{runtime.STALL_SECONDS * 1000:g} ms"
    assert stall_ms == f"{monitor.DEFAULT_STALL * 1000:g} ms" == "100 ms"
    assert f"each pause of {stall_ms} or more" in page
    assert f"each stretch of {stall_ms} or more" in page
    assert f"at most once per {stall_ms}" in page
    assert f"at most {gc_pauses.MAX_LONG} between two collections" in page
    assert f"At most {stalls.MAX_NAMES} function names" in page
    assert f"`{stalls.THREAD_NAME}`" in page and f"`{stalls.OTHER}`" in page
    assert "python benchmarks/instructions.py --suite probes" in page  # counts the figures


_GIL_PROBE = textwrap.dedent(
    """
    import asyncio, gc, sys
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.instrumentation.process import ProcessInstrumentor

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    ProcessInstrumentor().instrument(meter_provider=provider, event_loop=True, per_thread=True)
    for _ in range(3):
        gc.collect()
        reader.get_metrics_data()
    asyncio.run(asyncio.sleep(0.05))
    reader.get_metrics_data()
    print(sys._is_gil_enabled())
    """
)


@pytest.mark.skipif(not FREE_THREADED, reason="needs a free-threaded build")
def test_instrumenting_and_collecting_keep_the_gil_off() -> None:
    # A fresh interpreter: pytest and earlier tests have imported other modules.
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    done = subprocess.run(
        [sys.executable, "-c", _GIL_PROBE], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False"], (done.stdout, done.stderr[-2000:])
    assert "GIL" not in done.stderr, done.stderr[-2000:]


# --- garbage collections against gc.collect()


def test_gc_collections_follow_gc_collect(sdk: Sdk) -> None:
    import gc

    sdk.instrument()
    key = {"cpython.gc.generation": 2}
    gc.disable()  # no automatic collection in between: only the one below counts
    try:
        before = value(sdk.collect()["cpython.gc.collections"], **key)
        gc.collect()
        assert value(sdk.collect()["cpython.gc.collections"], **key) == before + 1
    finally:
        gc.enable()
