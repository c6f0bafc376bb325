"""Event-loop lag monitor: real loops in real threads, checked against the test's own clock.

How a blocked loop reads: while a loop runs, its probe always has one tick
pending, due at most one interval ahead. A callback that blocks the loop for
``b`` seconds from time ``s`` delays that tick from its due time ``d`` (in
``(s, s + interval]``) to ``s + b``: a lag of ``b - interval`` to ``b``. A tick
already due when the block starts (it waits behind the blocking callback in
the same iteration) reads a little more than ``b``. So the maximum lag of a
loop blocked for at most ``b`` lies in ``[b - interval, b + slack]``; ``slack``
covers the wake-up latency and the machine's scheduling noise (2 shared
cores: a thread can wait tens of milliseconds for a core).
"""

from __future__ import annotations

import asyncio
import asyncio.events
import gc
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opentelemetry.instrumentation.process.runtime import loop_lag
from opentelemetry.instrumentation.process.runtime.loop_lag import (
    BUCKET_RATIO,
    LoopLag,
    LoopLagMonitor,
    hooks_installed,
)

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the test environment
    uvloop = None

needs_uvloop = pytest.mark.skipif(uvloop is None, reason="uvloop is not installed")

INTERVAL = 0.01
SLACK = 0.05  # wake-up latency plus scheduling noise on a shared 2-core machine
IDLE_MAX = 0.05  # an idle loop: a tick runs ~1 ms late here; 50 ms only under heavy noise
UVLOOP_CLOCK = 0.002  # uvloop's clock and timers have 1 ms resolution, each end rounds


@pytest.fixture
def monitor() -> Iterator[LoopLagMonitor]:
    m = LoopLagMonitor(interval=INTERVAL)
    m.start()
    yield m
    m.stop()
    assert hooks_installed() == []


def blocking_app(blocks: list[float], count: int = 3, block: float = 0.2) -> Callable[[], Any]:
    """An app that sleeps 0.8 s, then blocks its loop with time.sleep, ``count`` times.

    The actual length of each block, by the test's clock, is appended to ``blocks``.
    """

    async def app() -> None:
        for _ in range(count):
            await asyncio.sleep(0.8)
            t0 = time.monotonic()
            time.sleep(block)
            blocks.append(time.monotonic() - t0)

    return app


def in_thread(name: str, body: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread


def assert_blocked(
    lag: LoopLag, blocks: list[float], interval: float = INTERVAL, slack: float = SLACK
) -> None:
    """The window of a loop blocked ``blocks`` times reads as the module docstring says."""
    assert lag.max is not None and lag.p99 is not None
    assert max(blocks) - interval - UVLOOP_CLOCK <= lag.max <= max(blocks) + slack, (lag, blocks)
    assert lag.p99 <= lag.max
    if len(blocks) > lag.samples * 0.01:
        # Over 1 % of the samples are block lags: p99 is one (upper bound of its bucket).
        assert min(blocks) - interval - UVLOOP_CLOCK <= lag.p99


# --- the truth tests


def test_blocked_loop_reports_the_block_as_its_maximum_lag(monitor: LoopLagMonitor) -> None:
    """start() before any loop exists (the opentelemetry-instrument case), then asyncio.run."""
    blocks: list[float] = []
    t0 = time.monotonic()
    asyncio.run(blocking_app(blocks)())
    ran = time.monotonic() - t0
    got = monitor.read()
    assert list(got) == ["MainThread"]
    lag = got["MainThread"]
    assert_blocked(lag, blocks)
    # Each tick is scheduled one interval after the previous one ran.
    assert 3 <= lag.samples <= ran / INTERVAL + 1
    assert lag.p50 is not None and lag.p50 < 0.2 / 2
    assert lag.min is not None and 0 <= lag.min <= lag.p50
    # Busy share: the blocks over the time the loop ran (a little less than `ran`).
    assert lag.utilization is not None
    assert abs(lag.utilization - sum(blocks) / ran) < 0.03, (lag.utilization, blocks, ran)


def test_an_idle_loop_reports_a_few_milliseconds_at_most(monitor: LoopLagMonitor) -> None:
    asyncio.run(asyncio.sleep(1.0))
    lag = monitor.read()["MainThread"]
    assert lag.max is not None and lag.mean is not None and lag.min is not None
    assert 0 <= lag.min <= lag.mean <= lag.max <= IDLE_MAX, lag
    # Most ticks run within a millisecond; a lag counted from the wrong time
    # (one interval early) would put the median at 10 ms.
    assert lag.p50 is not None and lag.p50 <= INTERVAL / 2, lag
    assert lag.samples >= 10
    assert lag.utilization is not None and lag.utilization < 0.1


def test_read_starts_a_new_window_and_never_reports_zero_for_unknown(
    monitor: LoopLagMonitor,
) -> None:
    blocks: list[float] = []
    ready = threading.Event()
    release = threading.Event()

    async def app() -> None:
        await blocking_app(blocks, count=1)()
        await asyncio.sleep(0.05)  # the late tick runs in the next iteration
        ready.set()
        while not release.is_set():
            await asyncio.sleep(0.05)

    thread = in_thread("app", lambda: asyncio.run(app()))
    assert ready.wait(10)
    first = monitor.read()["app"]
    assert_blocked(first, blocks)
    time.sleep(0.3)
    second = monitor.read()["app"]  # idle since the first read: the block is not in it
    assert second.max is not None and second.max <= IDLE_MAX
    release.set()
    thread.join(10)
    # Closed: its last window once, then nothing. A window without samples is all None.
    last = monitor.read().get("app")
    if last is not None and last.samples == 0:
        assert {last.max, last.mean, last.p99, last.min, last.stddev} == {None}
    assert "app" not in monitor.read()


def test_start_inside_a_running_loop() -> None:
    monitor = LoopLagMonitor(interval=INTERVAL)
    blocks: list[float] = []

    async def app() -> LoopLag:
        monitor.start()
        await blocking_app(blocks, count=1)()
        await asyncio.sleep(0.05)
        return monitor.read()["MainThread"]

    try:
        lag = asyncio.run(app())
    finally:
        monitor.stop()
    assert_blocked(lag, blocks)


def test_start_while_loops_run_in_other_threads() -> None:
    """Found by the one-off heap scan; each one begins in its own thread."""
    started = threading.Barrier(3)
    blocks: dict[str, list[float]] = {"a": [], "b": []}

    def body(name: str, block: float) -> None:
        async def app() -> None:
            started.wait()
            await asyncio.sleep(0.3)  # the monitor starts meanwhile
            await blocking_app(blocks[name], count=1, block=block)()
            await asyncio.sleep(0.1)

        asyncio.run(app())

    threads = [in_thread("a", lambda: body("a", 0.1)), in_thread("b", lambda: body("b", 0.25))]
    started.wait()
    monitor = LoopLagMonitor(interval=INTERVAL)
    monitor.start()
    try:
        for thread in threads:
            thread.join(10)
        got = monitor.read()
    finally:
        monitor.stop()
    assert sorted(got) == ["a", "b"]
    assert_blocked(got["a"], blocks["a"])
    assert_blocked(got["b"], blocks["b"])


# --- every way to start a loop


def _asyncio_ways() -> dict[str, Callable[[Coroutine[Any, Any, None]], None]]:
    def loop_run_until_complete(coro: Coroutine[Any, Any, None]) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(coro)
        finally:
            loop.close()

    def loop_run_forever(coro: Coroutine[Any, Any, None]) -> None:
        loop = asyncio.new_event_loop()
        task = loop.create_task(coro)
        task.add_done_callback(lambda _: loop.stop())
        try:
            loop.run_forever()
        finally:
            loop.close()

    ways = {
        "asyncio.run": asyncio.run,
        "new_event_loop+run_until_complete": loop_run_until_complete,
        "new_event_loop+run_forever": loop_run_forever,
    }
    if sys.version_info >= (3, 11):

        def runner_with_factory(coro: Coroutine[Any, Any, None]) -> None:
            with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
                runner.run(coro)

        ways["asyncio.Runner(loop_factory)"] = runner_with_factory
    return ways


def _uvloop_ways() -> dict[str, Callable[[Coroutine[Any, Any, None]], None]]:
    if uvloop is None:
        return {}

    def policy(coro: Coroutine[Any, Any, None]) -> None:
        previous = asyncio.get_event_loop_policy()
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        try:
            asyncio.run(coro)
        finally:
            asyncio.set_event_loop_policy(previous)

    def new_loop(coro: Coroutine[Any, Any, None]) -> None:
        loop = uvloop.new_event_loop()
        try:
            loop.run_until_complete(coro)
        finally:
            loop.close()

    ways = {"uvloop.run": uvloop.run, "uvloop.EventLoopPolicy": policy, "uvloop.new": new_loop}
    if sys.version_info >= (3, 11):

        def runner(coro: Coroutine[Any, Any, None]) -> None:
            # What uvicorn --loop uvloop does on 3.11+.
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as r:
                r.run(coro)

        ways["asyncio.Runner(uvloop)"] = runner
    return ways


@pytest.mark.parametrize("way", [*_asyncio_ways(), *_uvloop_ways()])
def test_every_way_to_run_a_loop_is_probed(monitor: LoopLagMonitor, way: str) -> None:
    run = {**_asyncio_ways(), **_uvloop_ways()}[way]
    blocks: list[float] = []
    run(blocking_app(blocks, count=1, block=0.1)())
    lag = monitor.read()["MainThread"]
    assert_blocked(lag, blocks)
    if way.startswith("uvloop") or "uvloop" in way:
        assert lag.utilization is None  # not measured on uvloop
    else:
        assert lag.utilization is not None


UVLOOP_AFTER_START = """
import asyncio, json, sys, time
from opentelemetry.instrumentation.process.runtime.loop_lag import LoopLagMonitor, hooks_installed
monitor = LoopLagMonitor(interval={interval})
monitor.start()
import uvloop  # after start(): uvloop binds the wrapped asyncio._set_running_loop
blocks = []
async def app():
    await asyncio.sleep(0.3)
    t0 = time.monotonic(); time.sleep(0.1); blocks.append(time.monotonic() - t0)
uvloop.run(app())
lag = monitor.read()["MainThread"]
monitor.stop()
print(json.dumps({{"max": lag.max, "samples": lag.samples, "blocks": blocks,
                  "hooks": hooks_installed(), "util": lag.utilization}}))
"""


@needs_uvloop
def test_uvloop_imported_after_start_is_probed() -> None:
    script = UVLOOP_AFTER_START.format(interval=INTERVAL)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    got = json.loads(out.stdout)
    assert max(got["blocks"]) - INTERVAL - UVLOOP_CLOCK <= got["max"] <= max(got["blocks"]) + SLACK
    assert got["util"] is None
    assert got["hooks"] == []


# --- several loops


def test_one_entry_per_loop_in_several_threads(monitor: LoopLagMonitor) -> None:
    """Each thread blocks for its own length; each entry shows its own loop's block.

    Three loops and this thread share 2 cores with other jobs: a loop thread can
    wait well over 50 ms for a core. The blocks are far enough apart that a
    0.2 s slack still tells each loop's window from the others'.
    """
    lengths = {"alpha": 0.05, "beta": 0.3, "gamma": 0.6}
    blocks: dict[str, list[float]] = {name: [] for name in lengths}
    ready = {name: threading.Event() for name in lengths}
    release = threading.Event()

    def body(name: str) -> None:
        async def app() -> None:
            await blocking_app(blocks[name], count=2, block=lengths[name])()
            await asyncio.sleep(0.05)  # the late tick runs in the next iteration
            ready[name].set()
            while not release.is_set():
                await asyncio.sleep(0.02)

        asyncio.run(app())

    threads = [in_thread(name, lambda n=name: body(n)) for name in lengths]  # type: ignore[misc]
    assert all(event.wait(20) for event in ready.values())
    got = monitor.read()  # from this thread, while the loops run
    release.set()
    for thread in threads:
        thread.join(10)
    assert sorted(got) == sorted(lengths)
    for name in lengths:
        assert_blocked(got[name], blocks[name], slack=0.2)


def test_loops_in_threads_of_the_same_name_get_distinct_labels(monitor: LoopLagMonitor) -> None:
    ready = threading.Barrier(3)
    release = threading.Event()

    def body() -> None:
        async def app() -> None:
            await asyncio.sleep(0.1)
            ready.wait()
            while not release.is_set():
                await asyncio.sleep(0.02)

        asyncio.run(app())

    threads = [in_thread("worker", body), in_thread("worker", body)]
    ready.wait(10)
    got = monitor.read()
    release.set()
    for thread in threads:
        thread.join(10)
    assert sorted(got) == ["worker", "worker#2"]


def test_a_default_thread_name_loses_its_counter() -> None:
    """Thread-7 (f) and Thread-8 (f) are one series over time, not one per thread."""
    monitor = LoopLagMonitor(interval=INTERVAL)
    monitor.start()
    try:
        for _ in range(2):
            thread = threading.Thread(target=lambda: asyncio.run(asyncio.sleep(0.1)))
            assert thread.name.startswith("Thread-")
            thread.start()
            thread.join(10)
        got = monitor.read()
    finally:
        monitor.stop()
    assert list(got) == ["Thread (<lambda>)"]


def test_max_loops_caps_the_loops_probed() -> None:
    monitor = LoopLagMonitor(interval=INTERVAL, max_loops=1)
    monitor.start()
    ready = threading.Barrier(3)
    release = threading.Event()

    def body() -> None:
        async def app() -> None:
            ready.wait()
            while not release.is_set():
                await asyncio.sleep(0.02)

        asyncio.run(app())

    threads = [in_thread("one", body), in_thread("two", body)]
    try:
        ready.wait(10)
        time.sleep(0.1)
        got = monitor.read()
        skipped = monitor.skipped  # live loops not probed
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
        monitor.stop()
    assert len(got) == 1 and skipped == 1
    assert monitor.skipped == 0  # closed since


# --- lifecycle


def test_a_closed_loop_vanishes_after_its_last_window(monitor: LoopLagMonitor) -> None:
    thread = in_thread("short", lambda: asyncio.run(asyncio.sleep(0.2)))
    thread.join(10)
    last = monitor.read()
    assert last["short"].samples > 0  # its last window
    assert monitor.read() == {}
    assert monitor._probes == ()  # nothing kept for it either


def test_successive_loops_of_one_thread_are_one_series(monitor: LoopLagMonitor) -> None:
    """asyncio.run twice between two reads: one MainThread entry with both windows."""
    blocks: list[float] = []
    asyncio.run(blocking_app(blocks, count=1, block=0.1)())
    asyncio.run(asyncio.sleep(0.3))
    got = monitor.read()
    assert list(got) == ["MainThread"]
    assert_blocked(got["MainThread"], blocks)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize("way", ["asyncio.run", *(["uvloop.run"] if uvloop else [])])
def test_shutdown_leaves_no_task_timer_or_warning(monitor: LoopLagMonitor, way: str) -> None:
    """asyncio.run returns without waiting for a tick: no task of ours, no live timer."""
    seen: dict[str, Any] = {}

    async def app() -> asyncio.AbstractEventLoop:
        await asyncio.sleep(0.1)
        seen["tasks"] = asyncio.all_tasks()
        seen["me"] = asyncio.current_task()
        return asyncio.get_running_loop()

    records = _Records()
    logging.getLogger("asyncio").addHandler(records)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loop = asyncio.run(app()) if way == "asyncio.run" else uvloop.run(app())
            assert loop.is_closed()
            del loop
            gc.collect()
    finally:
        logging.getLogger("asyncio").removeHandler(records)
    assert seen["tasks"] == {seen["me"]}  # the probe is a timer, not a task
    assert [str(w.message) for w in caught] == []
    assert [r.getMessage() for r in records.records if r.levelno >= logging.WARNING] == []


def _live_timers(loop: asyncio.AbstractEventLoop) -> int:
    """Timers on an asyncio loop's own heap that are not cancelled (asyncio's truth)."""
    return sum(1 for h in loop._scheduled if not h.cancelled())  # type: ignore[attr-defined]


def test_a_stopped_loop_keeps_no_timer_and_resumes() -> None:
    monitor = LoopLagMonitor(interval=INTERVAL)
    monitor.start()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.sleep(0.1))
        assert _live_timers(loop) == 0  # paused with the loop
        first = monitor.read()["MainThread"]
        time.sleep(0.3)  # not running: neither a lag nor idle time
        loop.run_until_complete(asyncio.sleep(0.2))
        second = monitor.read()["MainThread"]
    finally:
        loop.close()
        monitor.stop()
    assert first.samples > 0 and second.samples > 0
    assert second.max is not None and second.max <= IDLE_MAX
    # The second window is the second run only, idle throughout: the 0.3 s
    # stopped in between would read as 0.3 / 0.5 busy if counted as running.
    assert second.utilization is not None and second.utilization < 0.2


def test_stop_leaves_no_timer_and_no_hook() -> None:
    originals = (
        asyncio.events._set_running_loop,
        asyncio._set_running_loop,  # type: ignore[attr-defined]
        asyncio.get_event_loop_policy(),
    )
    uvloop_dict = dict(vars(uvloop.Loop)) if uvloop else {}
    # A tick only every 5 s: a tick left pending by stop() would still be there.
    monitor = LoopLagMonitor(interval=5.0)
    running = threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        loop = asyncio.get_running_loop()
        holder["loop"] = loop
        holder["before"] = _live_timers(loop)
        holder["release"] = release = loop.create_future()  # no timer of the app's own
        running.set()
        await release
        holder["after"] = _live_timers(loop)
        holder["select"] = "select" in vars(loop._selector)  # type: ignore[attr-defined]

    monitor.start()
    assert asyncio.events._set_running_loop is not originals[0]
    if uvloop:
        assert "run_forever" in vars(uvloop.Loop)
    thread = in_thread("loop", lambda: asyncio.run(app()))
    assert running.wait(10)
    loop = holder["loop"]
    during = asyncio.run_coroutine_threadsafe(_count(loop), loop).result(10)
    monitor.stop()  # from another thread than the loop's
    loop.call_soon_threadsafe(holder["release"].set_result, None)
    thread.join(10)
    # The probe's tick from the loop's start until stop(), then none.
    assert (holder["before"], during, holder["after"]) == (1, 1, 0)
    assert holder["select"] is False
    assert asyncio.events._set_running_loop is originals[0]
    assert asyncio._set_running_loop is originals[1]  # type: ignore[attr-defined]
    assert asyncio.get_event_loop_policy() is originals[2]
    if uvloop:
        assert dict(vars(uvloop.Loop)) == uvloop_dict
    assert hooks_installed() == []


async def _count(loop: asyncio.AbstractEventLoop) -> int:
    return _live_timers(loop)


def test_stop_inside_the_loop_cancels_its_tick_at_once() -> None:
    monitor = LoopLagMonitor(interval=5.0)

    async def app() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        monitor.start()
        during = _live_timers(loop)
        monitor.stop()
        return during, _live_timers(loop)

    assert asyncio.run(app()) == (1, 0)


def test_two_monitors_share_the_hooks() -> None:
    original = asyncio.events._set_running_loop
    a, b = LoopLagMonitor(interval=INTERVAL), LoopLagMonitor(interval=INTERVAL)
    a.start()
    b.start()
    a.stop()
    assert asyncio.events._set_running_loop is not original  # b still runs
    asyncio.run(asyncio.sleep(0.1))
    assert b.read()["MainThread"].samples > 0
    assert a.read() == {}
    b.stop()
    assert asyncio.events._set_running_loop is original


def test_a_failing_probe_never_raises_into_the_loop(monitor: LoopLagMonitor) -> None:
    """A loop whose clock fails after a while: the probe stops, the app never sees it."""

    class FailingClock(asyncio.SelectorEventLoop):
        calls = 0

        def time(self) -> float:
            FailingClock.calls += 1
            # Only the probe's tick is hurt: asyncio itself calls self.time() too.
            if FailingClock.calls > 20 and sys._getframe(1).f_code.co_name == "tick":
                raise OSError("clock failed")
            return super().time()

    errors: list[dict[str, Any]] = []
    loop = FailingClock()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        loop.run_until_complete(asyncio.sleep(0.3))
    finally:
        loop.close()
    assert errors == []
    assert monitor.read()["MainThread"].samples > 0  # the samples before the fault


def test_bad_options_name_the_option() -> None:
    with pytest.raises(ValueError, match=r"interval must be 0\.001 to 10 seconds; got 0"):
        LoopLagMonitor(interval=0)
    with pytest.raises(ValueError, match="interval must be a number of seconds; got 'x"):
        LoopLagMonitor(interval="x" * 100)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_loops must be an int >= 1; got 0"):
        LoopLagMonitor(max_loops=0)


# --- fork


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_forgets_the_parents_loops(monitor: LoopLagMonitor) -> None:
    release = threading.Event()
    running = threading.Event()

    async def parent_app() -> None:
        running.set()
        while not release.is_set():
            await asyncio.sleep(0.02)

    thread = in_thread("parent-loop", lambda: asyncio.run(parent_app()))
    assert running.wait(10)
    time.sleep(0.1)
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        pid = os.fork()
    if pid == 0:  # child
        signal.alarm(20)
        result: dict[str, Any]
        try:
            at_fork = sorted(monitor.read())
            blocks: list[float] = []
            asyncio.run(blocking_app(blocks, count=1, block=0.1)())
            got = monitor.read()
            result = {"at_fork": at_fork, "labels": sorted(got), "blocks": blocks}
            result["max"] = got["MainThread"].max if "MainThread" in got else None
        except BaseException as exc:  # noqa: BLE001 - report anything to the parent
            result = {"error": repr(exc)}
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        child = json.loads(f.read() or b"{}")
    _, status = os.waitpid(pid, 0)
    parent = monitor.read()
    release.set()
    thread.join(10)
    assert os.WIFEXITED(status) and "error" not in child, child
    assert child["at_fork"] == []  # the parent's loop is not the child's
    assert child["labels"] == ["MainThread"]
    assert max(child["blocks"]) - INTERVAL <= child["max"] <= max(child["blocks"]) + SLACK
    assert "parent-loop" in parent and parent["parent-loop"].samples > 0


# --- the histogram


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.floats(min_value=0, max_value=loop_lag.BUCKETS[-1], allow_nan=False),
        min_size=1,
        max_size=300,
    )
)
def test_percentiles_are_within_one_bucket_above_the_truth(lags: list[float]) -> None:
    window = loop_lag._Window()
    for lag in lags:
        window.add(lag)
    got = window.summary(None)
    ordered = sorted(lags)
    assert got.max == ordered[-1] and got.min == ordered[0] and got.samples == len(lags)
    assert got.mean is not None and math.isclose(got.mean, sum(lags) / len(lags), abs_tol=1e-9)
    for q, value in ((0.5, got.p50), (0.9, got.p90), (0.99, got.p99)):
        truth = ordered[math.ceil(q * len(ordered)) - 1]
        assert value is not None
        assert truth <= value <= max(truth * BUCKET_RATIO, truth + 1e-4), (q, truth, value)


def test_an_empty_window_is_unknown_not_zero() -> None:
    got = loop_lag._Window().summary(None)
    assert got == LoopLag(None, None, None, None, None, None, None, 0, None)
