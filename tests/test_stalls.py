"""Stalls that point at the span they froze: the two histograms of stalls, and their exemplars.

A garbage collection of 100 ms or more, and a stretch of 100 ms or more in which
an asyncio loop called no ``select``, are recorded at the next collection of
metrics with the context they ran under: the SDK's default ``trace_based``
exemplar filter keeps a sampled span there as the point's exemplar. Real
tracing (the SDK's ``TracerProvider``), a real ``MeterProvider``, real
collections and real blocks of a real loop.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics import Meter, MeterProvider
from opentelemetry.sdk.metrics.export import Histogram, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from opentelemetry import trace
from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions
from opentelemetry.instrumentation.process.instruments import STALL_BOUNDS
from opentelemetry.instrumentation.process.metrics import METRICS_BY_NAME
from opentelemetry.instrumentation.process.probes.gc_pauses import TIMED_BY_INTERPRETER
from opentelemetry.instrumentation.process.probes.gil_wait import gil_enabled
from opentelemetry.instrumentation.process.sources.runtime import STALL_SECONDS

from .conftest import collect
from .support.gc import GC_STALL, cyclic_garbage, gc_off, needs_gc_stalls
from .support.semconv import check_shape

LOOP_STALL = "process_metrics.eventloop.stall.duration"
INJECTED = 20
BLOCK = 0.2

pytestmark = needs_gc_stalls


@pytest.fixture
def tracer() -> trace.Tracer:
    return TracerProvider().get_tracer("test_stalls")  # samples every trace


Reporting = tuple[InMemoryMetricReader, MeterProvider, list[ProcessMetrics]]


@pytest.fixture
def reporting() -> Iterator[Reporting]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    made: list[ProcessMetrics] = []
    try:
        yield reader, provider, made
    finally:
        for m in made:
            m.close()
        provider.shutdown()


def _start(reporting: Reporting, **options: Any) -> InMemoryMetricReader:
    reader, provider, made = reporting
    made.append(ProcessMetrics(ProcessMetricsOptions(**options), meter_provider=provider))
    return reader


def _exemplar_traces(reader: InMemoryMetricReader, name: str) -> tuple[list[int | None], Any]:
    """The trace ids of the exemplars of ``name`` in one collection, and the metric."""
    found = collect(reader).get(name)
    if found is None:
        return [], None
    return [e.trace_id for p in found.data.data_points for e in p.exemplars], found


def _full_collection_of_at_least(seconds: float) -> list[Any]:
    """A heap whose full collections take ``seconds`` or more here: it grows until the
    shorter of two in a row does (one slowed by a busy machine does not size it)."""
    heap: list[Any] = []
    with gc_off():
        while True:
            heap.extend([i] for i in range(500_000))
            took = []
            for _ in range(2):
                t0 = time.perf_counter()
                gc.collect()
                took.append(time.perf_counter() - t0)
            if min(took) >= seconds or len(heap) > 20_000_000:
                return heap


def test_long_gc_pauses_carry_the_span_of_the_thread_that_collected(
    tracer: trace.Tracer, reporting: Reporting
) -> None:
    # On an interpreter that times its own collections, only the callback sees
    # what ran: the buckets option installs it (docs/runtime.md).
    options = {"gc_pause_histogram": True} if TIMED_BY_INTERPRETER else {}
    reader = _start(reporting, **options)
    heap = _full_collection_of_at_least(3 * STALL_SECONDS)
    collect(reader)
    carried = 0
    with gc_off():
        for i in range(INJECTED):
            with tracer.start_as_current_span(f"request {i}") as span:
                gc.collect()  # inside the span, as an allocation would start it
            traces, found = _exemplar_traces(reader, GC_STALL)
            carried += span.get_span_context().trace_id in traces
    del heap
    assert carried >= 0.95 * INJECTED, carried
    check_histogram(found)


def test_loop_stalls_carry_the_span_and_the_function_of_the_handler_that_blocked(
    tracer: trace.Tracer, reporting: Reporting
) -> None:
    reader = _start(reporting, event_loop=True)
    collect(reader)
    handled: list[int] = []

    async def slow_handler(i: int) -> None:
        with tracer.start_as_current_span(f"request {i}") as span:
            handled.append(span.get_span_context().trace_id)
            time.sleep(BLOCK)  # blocks the loop, as a synchronous call in a handler does

    carried = 0
    names: set[Any] = set()
    found: Any = None

    async def serve() -> None:
        nonlocal carried, found
        for i in range(INJECTED):
            await asyncio.create_task(slow_handler(i))
            await asyncio.sleep(0.05)  # the loop selects: the stall has ended
            # Collected in another thread: a slow collection in the loop is a stall too.
            traces, found = await asyncio.to_thread(_exemplar_traces, reader, LOOP_STALL)
            carried += handled[-1] in traces
            names.update(
                dict(p.attributes).get("code.function.name") for p in found.data.data_points
            )

    with gc_off():  # a long collection during the test would be a stall of its own
        asyncio.run(serve())
    if gil_enabled():
        assert carried >= 0.95 * INJECTED, carried
        # Before 3.11 a frame's code has no qualified name (co_qualname): its name alone.
        name = slow_handler.__qualname__ if sys.version_info >= (3, 11) else slow_handler.__name__
        assert names == {f"{__name__}.{name}"}, names
    else:  # without a GIL the watch reads no frame: the stalls are kept, unnamed, no span
        assert (carried, names) == (0, {None})
    (point,) = found.data.data_points
    assert point.count == INJECTED
    assert INJECTED * BLOCK <= point.sum <= INJECTED * (BLOCK + 0.5)
    check_histogram(found)


def test_stalls_without_a_span_are_recorded_without_an_exemplar(
    reporting: Reporting,
) -> None:
    reader = _start(reporting, event_loop=True)
    collect(reader)

    async def block() -> None:
        time.sleep(BLOCK)
        await asyncio.sleep(0.05)

    with gc_off():
        asyncio.run(block())
    traces, found = _exemplar_traces(reader, LOOP_STALL)
    assert found is not None and found.data.data_points[0].count == 1
    assert traces == []


def test_short_blocks_and_pauses_are_not_stalls(tracer: trace.Tracer, reporting: Reporting) -> None:
    reader = _start(reporting, event_loop=True)
    collect(reader)

    async def short() -> None:
        for _ in range(5):
            with tracer.start_as_current_span("quick"):
                time.sleep(STALL_SECONDS / 5)
            await asyncio.sleep(0.01)

    with gc_off():
        cyclic_garbage(1000)
        gc.collect()
        asyncio.run(short())
    got = collect(reader)
    assert LOOP_STALL not in got
    gc_stalls: Any = got.get(GC_STALL)
    assert gc_stalls is None or all(p.min >= STALL_SECONDS for p in gc_stalls.data.data_points)


def check_histogram(found: Any) -> None:
    """The shape of a stall histogram: the row's, with buckets advised in seconds."""
    assert isinstance(found.data, Histogram)
    row = METRICS_BY_NAME[found.name]
    check_shape(row, found)
    # The API advises buckets from 1.29 on; before, the SDK's defaults stand.
    advised = inspect.signature(Meter.create_histogram).parameters
    if "explicit_bucket_boundaries_advisory" in advised:
        assert {tuple(p.explicit_bounds) for p in found.data.data_points} == {STALL_BOUNDS}


def test_the_stall_thread_survives_a_stopped_loop_stepped_by_hand() -> None:
    """A stopped loop has no stall threshold (infinite): the thread must not wait that long.

    CPython's test_asyncio found the thread dead of an OverflowError there.
    """
    from opentelemetry.instrumentation.process.probes.loops.monitor import LoopMonitor

    raised: list[BaseException | None] = []
    before = threading.excepthook
    threading.excepthook = lambda args: raised.append(args.exc_value)
    monitor = LoopMonitor(stalls=True, stall=0.05)
    monitor.start()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.sleep(0.01))  # probed, then stopped
        for _ in range(5):
            loop.call_soon(lambda: None)
            loop._run_once()  # type: ignore[attr-defined]
            time.sleep(0.06)  # the thread looks meanwhile
        assert monitor._watch.running, raised  # the thread still runs
    finally:
        loop.close()
        monitor.stop()
        threading.excepthook = before
    assert raised == []


def test_the_stall_thread_sleeps_through_a_stall_it_has_named(reporting: Reporting) -> None:
    """Named once, a stall is looked at again only a stall's length later: no spinning.

    A thread that spun for the 2 s of the block would use a large part of that in
    CPU time even on a loaded machine; one that sleeps uses a few milliseconds.
    """
    from opentelemetry.instrumentation.process.probes.loops.stalls import THREAD_NAME

    reader = _start(reporting, event_loop=True)
    collect(reader)
    used: list[float] = []

    def cpu_of(thread: threading.Thread) -> float:
        times = [t for t in psutil.Process().threads() if t.id == thread.native_id]
        return times[0].user_time + times[0].system_time

    async def block() -> None:
        await asyncio.sleep(0.05)  # probed, and the watch thread started
        (watch,) = [t for t in threading.enumerate() if t.name == THREAD_NAME]
        before = cpu_of(watch)
        time.sleep(2.0)  # the GIL is free: a spinning watch would have it
        used.append(cpu_of(watch) - before)

    with gc_off():
        asyncio.run(block())
    assert collect(reader)[LOOP_STALL].data.data_points[0].count == 1
    assert used[0] < 0.1, used


class _Probe:
    """A probe as the watch reads it (:class:`Watched`), set by hand."""

    def __init__(self, ran_at: float, stall: float) -> None:
        self.ran_at = ran_at
        self.stall = stall
        self.dead = False
        self.seen: Any = None
        self.thread_id: int | None = threading.get_ident()


def test_the_watch_names_a_stalled_loop_listed_after_idle_and_working_ones() -> None:
    """Each loop is looked at: one in ``select``, one stopped, one dead and one working but not
    yet stalled come first, and the stalled one after them is still named."""
    from opentelemetry.instrumentation.process.probes.loops.stalls import Watch

    now = time.monotonic()
    idle, stopped, dead, working = (
        _Probe(0.0, 0.05),
        _Probe(now, float("inf")),
        _Probe(now - 10.0, 0.05),
        _Probe(now, 3600.0),
    )
    dead.dead = True
    stalled = _Probe(now - 10.0, 0.05)
    watch = Watch(lambda: (idle, stopped, dead, working, stalled))
    watch.start()
    try:
        deadline = time.monotonic() + 10.0
        while stalled.seen is None and time.monotonic() < deadline:
            time.sleep(0.01)  # this frame is what the "loop's" thread runs
    finally:
        watch.stop()
    if gil_enabled():
        assert stalled.seen is not None and stalled.seen.began == stalled.ran_at
        # What this thread ran when looked at: this test, or starting the watch's thread
        # (threading.Condition.wait; before 3.11, without a qualified name: threading.wait).
        assert stalled.seen.code in {
            f"{__name__}.{sys._getframe().f_code.co_name}",
            "threading.Condition.wait",
            "threading.wait",
        }, stalled.seen.code
    else:  # without a GIL the watch reads no frame
        assert stalled.seen is None
    assert [p.seen for p in (idle, stopped, dead, working)] == [None] * 4


def test_the_names_of_stalled_code_are_bounded_and_a_known_one_stays_itself() -> None:
    """``code.function.name`` is an attribute: at most ``MAX_NAMES`` distinct values a process,
    then ``(other)``; a name seen before keeps its value."""
    from opentelemetry.instrumentation.process.probes.loops.stalls import MAX_NAMES, OTHER, Watch

    watch = Watch(lambda: ())
    first = [watch._bounded(f"module.f{i}") for i in range(MAX_NAMES)]
    assert first == [f"module.f{i}" for i in range(MAX_NAMES)]
    assert watch._bounded("module.one_too_many") == OTHER
    assert watch._bounded("module.f7") == "module.f7"
