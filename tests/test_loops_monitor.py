"""The probes of every loop (probes/loops/monitor.py, probe.py), against the test's clock.

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
import contextvars
import gc
import json
import logging
import math
import os
import signal
import sys
import threading
import time
import warnings
import weakref
from typing import Any

import pytest

from opentelemetry.instrumentation.process.probes.loops import discovery
from opentelemetry.instrumentation.process.probes.loops.monitor import (
    DELAYS,
    UTILIZATION,
    LoopMonitor,
    watch_loop,
)
from opentelemetry.instrumentation.process.probes.loops.probe import PARKED_SELECTS
from opentelemetry.instrumentation.process.probes.loops.window import Window

from .conftest import Records
from .support.forked import in_child
from .support.gc import collector_paused  # noqa: F401 - autouse
from .support.loopapps import (
    UVLOOP_CLOCK,
    Closing,
    LoopLag,
    Payload,
    blocking_app,
    hooks_installed,
    idle_loop,
    in_thread,
    live_timers,
    monitor_and_loop,
    monitor_fixture,
    parked,
    read_lag,
    samples,
    uvloop,
)

INTERVAL = 0.01
SLACK = 0.05  # wake-up latency plus scheduling noise on a shared 2-core machine
IDLE_MAX = 0.05  # an idle loop: a tick runs ~1 ms late here; 50 ms only under heavy noise

monitor = monitor_fixture(INTERVAL)


def assert_blocked(
    lag: LoopLag, blocks: list[float], count: int, interval: float = INTERVAL, slack: float = SLACK
) -> None:
    """The window of ``count`` delays of a loop blocked ``blocks`` times reads as said above."""
    assert lag.max is not None and lag.p99 is not None
    assert max(blocks) - interval - UVLOOP_CLOCK <= lag.max <= max(blocks) + slack, (lag, blocks)
    assert lag.p99 <= lag.max
    if len(blocks) > count * 0.01:
        # Over 1 % of the samples are block lags: p99 is one (upper bound of its bucket).
        assert min(blocks) - interval - UVLOOP_CLOCK <= lag.p99


def test_blocked_loop_reports_the_block_as_its_maximum_lag(monitor: LoopMonitor) -> None:
    """start() before any loop exists (the opentelemetry-instrument case), then asyncio.run."""
    blocks: list[float] = []
    t0 = time.monotonic()
    asyncio.run(blocking_app(blocks)())
    ran = time.monotonic() - t0
    count = samples(monitor)
    got = read_lag(monitor)
    assert list(got) == ["MainThread"]
    lag = got["MainThread"]
    assert_blocked(lag, blocks, count)
    # Each tick is scheduled one interval after the previous one ran.
    assert 3 <= count <= ran / INTERVAL + 1
    assert lag.p50 is not None and 0 <= lag.p50 < 0.2 / 2
    # Busy share: the blocks over the time the loop ran (a little less than `ran`).
    assert lag.utilization is not None
    assert abs(lag.utilization - sum(blocks) / ran) < 0.03, (lag.utilization, blocks, ran)


def test_an_idle_loop_reports_a_few_milliseconds_at_most(monitor: LoopMonitor) -> None:
    asyncio.run(asyncio.sleep(1.0))
    count = samples(monitor)
    lag = read_lag(monitor)["MainThread"]
    assert lag.max is not None and lag.mean is not None
    assert 0 <= lag.mean <= lag.max <= IDLE_MAX, lag
    # Most ticks run within a millisecond; a lag counted from the wrong time
    # (one interval early) would put the median at 10 ms.
    assert lag.p50 is not None and lag.p50 <= INTERVAL / 2, lag
    assert count >= 10
    assert lag.utilization is not None and lag.utilization < 0.1


def test_read_starts_a_new_window_and_never_reports_zero_for_unknown(
    monitor: LoopMonitor,
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
    count = samples(monitor, "app")
    first = read_lag(monitor)["app"]
    assert_blocked(first, blocks, count)
    time.sleep(0.3)
    second = read_lag(monitor)["app"]  # idle since the first read: the block is not in it
    assert second.max is not None and second.max <= IDLE_MAX
    release.set()
    thread.join(10)
    # Closed: its last window once, then nothing. A window without samples is all None.
    count = samples(monitor, "app")
    last = read_lag(monitor).get("app")
    if last is not None and count == 0:
        assert {last.max, last.mean, last.p50, last.p99} == {None}
    assert "app" not in read_lag(monitor)


def test_one_entry_per_loop_in_several_threads(monitor: LoopMonitor) -> None:
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
    counts = {name: samples(monitor, name) for name in lengths}
    got = read_lag(monitor)  # from this thread, while the loops run
    release.set()
    for thread in threads:
        thread.join(10)
    assert sorted(got) == sorted(lengths)
    for name in lengths:
        assert_blocked(got[name], blocks[name], counts[name], slack=0.2)


def test_loops_in_threads_of_the_same_name_get_distinct_labels(monitor: LoopMonitor) -> None:
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
    got = read_lag(monitor)
    release.set()
    for thread in threads:
        thread.join(10)
    assert sorted(got) == ["worker", "worker#2"]


def test_a_default_thread_name_loses_its_counter() -> None:
    """Thread-7 (f) and Thread-8 (f) are one series over time, not one per thread."""
    monitor = LoopMonitor(interval=INTERVAL)
    monitor.start()
    try:
        for _ in range(2):
            thread = threading.Thread(target=lambda: asyncio.run(asyncio.sleep(0.1)))
            assert thread.name.startswith("Thread-")
            thread.start()
            thread.join(10)
        got = read_lag(monitor)
    finally:
        monitor.stop()
    assert list(got) == ["Thread (<lambda>)"]


def test_max_loops_caps_the_loops_probed() -> None:
    monitor = LoopMonitor(interval=INTERVAL, max_loops=1)
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
        got = read_lag(monitor)
        skipped = monitor.skipped  # live loops not probed
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
        monitor.stop()
    assert len(got) == 1 and skipped == 1
    assert monitor.skipped == 0  # closed since


def test_a_closed_loop_vanishes_after_its_last_window(monitor: LoopMonitor) -> None:
    thread = in_thread("short", lambda: asyncio.run(asyncio.sleep(0.2)))
    thread.join(10)
    last = read_lag(monitor)
    assert last["short"].max is not None  # its last window
    assert read_lag(monitor) == {}
    assert monitor._probes == ()  # nothing kept for it either


def test_successive_loops_of_one_thread_are_one_series(monitor: LoopMonitor) -> None:
    """asyncio.run twice between two reads: one MainThread entry with both windows."""
    blocks: list[float] = []
    asyncio.run(blocking_app(blocks, count=1, block=0.1)())
    asyncio.run(asyncio.sleep(0.3))
    count = samples(monitor)
    got = read_lag(monitor)
    assert list(got) == ["MainThread"]
    assert_blocked(got["MainThread"], blocks, count)


@pytest.mark.parametrize("way", ["asyncio.run", *(["uvloop.run"] if uvloop else [])])
def test_shutdown_leaves_no_task_timer_or_warning(monitor: LoopMonitor, way: str) -> None:
    """asyncio.run returns without waiting for a tick: no task of ours, no live timer."""
    seen: dict[str, Any] = {}

    async def app() -> asyncio.AbstractEventLoop:
        await asyncio.sleep(0.1)
        seen["tasks"] = asyncio.all_tasks()
        seen["me"] = asyncio.current_task()
        return asyncio.get_running_loop()

    records = Records()
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


def test_a_stopped_loop_keeps_no_timer_and_resumes() -> None:
    with monitor_and_loop(INTERVAL) as (monitor, loop):
        loop.run_until_complete(asyncio.sleep(0.1))
        assert live_timers(loop) == 0  # paused with the loop
        first = read_lag(monitor)["MainThread"]
        time.sleep(0.3)  # not running: neither a lag nor idle time
        loop.run_until_complete(asyncio.sleep(0.2))
        second = read_lag(monitor)["MainThread"]
    assert first.max is not None and second.max is not None
    assert second.max is not None and second.max <= IDLE_MAX
    # The second window is the second run only, idle throughout: the 0.3 s
    # stopped in between would read as 0.3 / 0.5 busy if counted as running.
    assert second.utilization is not None and second.utilization < 0.2


def test_stop_inside_the_loop_cancels_its_tick_at_once() -> None:
    monitor = LoopMonitor(interval=5.0)

    async def app() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        monitor.start()
        during = live_timers(loop)
        monitor.stop()
        return during, live_timers(loop)

    assert asyncio.run(app()) == (1, 0)


def test_a_failing_probe_never_raises_into_the_loop(monitor: LoopMonitor) -> None:
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
    assert read_lag(monitor)["MainThread"].max is not None  # the samples before the fault


def test_bad_options_name_the_option() -> None:
    with pytest.raises(ValueError, match=r"interval must be 0\.001 to 10 seconds; got 0"):
        LoopMonitor(interval=0)
    with pytest.raises(ValueError, match="interval must be a number of seconds; got 'x"):
        LoopMonitor(interval="x" * 100)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_loops must be an int >= 1; got 0"):
        LoopMonitor(max_loops=0)


class _CoarseClock(asyncio.SelectorEventLoop):
    """A loop on a 16 ms clock (Windows' monotonic clock had that resolution).

    asyncio runs a timer up to one clock resolution before it is due.
    """

    RESOLUTION = 0.016

    def __init__(self) -> None:
        super().__init__()
        self._clock_resolution = self.RESOLUTION

    def time(self) -> float:
        return math.floor(super().time() / self.RESOLUTION) * self.RESOLUTION


def test_a_timer_run_early_on_a_coarse_clock_reads_as_no_lag(
    monitor: LoopMonitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded: list[float] = []
    add = Window.add

    def spy(window: Window, delay: float) -> None:  # sees each delay, changes nothing
        recorded.append(delay)
        add(window, delay)

    monkeypatch.setattr(Window, "add", spy)
    loop = _CoarseClock()
    try:
        loop.run_until_complete(asyncio.sleep(0.3))
    finally:
        loop.close()
    lag = read_lag(monitor)["MainThread"]
    assert recorded and min(recorded) >= 0.0  # early ticks are not negative lags
    assert lag.mean is not None and lag.mean >= 0.0


def test_a_stopped_monitor_starts_again(monitor: LoopMonitor) -> None:
    asyncio.run(asyncio.sleep(0.05))
    assert read_lag(monitor)["MainThread"].max is not None
    monitor.stop()
    assert monitor.started is False
    asyncio.run(asyncio.sleep(0.05))
    assert read_lag(monitor) == {}  # stopped: nothing probed
    monitor.start()
    assert monitor.started is True
    asyncio.run(asyncio.sleep(0.05))
    assert read_lag(monitor)["MainThread"].max is not None


def test_at_max_loops_a_closed_loop_makes_room_for_a_new_one() -> None:
    monitor = LoopMonitor(interval=INTERVAL, max_loops=1)
    monitor.start()
    try:
        in_thread("first", lambda: asyncio.run(asyncio.sleep(0.05))).join(10)
        # Closed, its last window not read yet: still held, but it gives way.
        in_thread("second", lambda: asyncio.run(asyncio.sleep(0.1))).join(10)
        got = read_lag(monitor)
        skipped = monitor.skipped
    finally:
        monitor.stop()
    assert list(got) == ["second"]
    assert got["second"].max is not None
    assert skipped == 0


def test_labels_skip_unbegun_and_closed_loops_and_stay_unique() -> None:
    """A loop not begun yet, a closed one of another name, a live one of the same name."""
    monitor = LoopMonitor(interval=INTERVAL)
    busy, release, live_running = threading.Event(), threading.Event(), threading.Event()

    holder: dict[str, asyncio.AbstractEventLoop] = {}

    async def blocked() -> None:
        holder["loop"] = asyncio.get_running_loop()
        busy.set()
        release.wait(10)  # blocks its loop: the begin queued by watch_loop() waits

    async def live() -> None:
        await asyncio.sleep(0.05)  # its first tick, due in 10 ms, has run: it has a sample
        live_running.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)

    threads = [in_thread("unbegun", lambda: asyncio.run(blocked()))]
    try:
        assert busy.wait(10)
        monitor.start()
        watch_loop(holder.pop("loop"))  # attached first; its label comes when it runs
        in_thread("x", lambda: asyncio.run(asyncio.sleep(0.05))).join(10)  # closed, unread
        threads.append(in_thread("w", lambda: asyncio.run(live())))
        assert live_running.wait(10)
        in_thread("w", lambda: asyncio.run(asyncio.sleep(0.05))).join(10)
        got = read_lag(monitor)
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
        monitor.stop()
    # The second "w" loop ran while the first still did: a label of its own.
    assert sorted(got) == ["w", "w#2", "x"]
    assert all(lag.max is not None for lag in got.values())


def test_the_next_loop_of_a_thread_takes_over_the_last_window_of_the_closed_one(
    monitor: LoopMonitor,
) -> None:
    blocks: list[float] = []

    async def block(seconds: float) -> None:
        await asyncio.sleep(INTERVAL * 2)
        t0 = time.perf_counter()
        time.sleep(seconds)
        blocks.append(time.perf_counter() - t0)
        await asyncio.sleep(INTERVAL * 2)

    asyncio.run(block(0.1))
    asyncio.run(block(0.3))  # a new loop, probed from its start under the same name
    count = samples(monitor)
    got = read_lag(monitor)
    assert list(got) == ["MainThread"]
    lag = got["MainThread"]
    assert lag.max is not None and lag.max >= blocks[1] - INTERVAL
    assert count >= 2  # at least the two block lags, one per loop
    assert read_lag(monitor) == {}


def _message(value: object) -> str:
    with pytest.raises(ValueError) as caught:
        LoopMonitor(interval=value)  # type: ignore[arg-type]
    return str(caught.value)


def test_a_bad_value_is_quoted_whole_up_to_40_characters_then_cut() -> None:
    fits, over = "x" * 38, "y" * 39
    assert len(repr(fits)) == 40 and len(repr(over)) == 41
    assert _message(fits) == f"interval must be a number of seconds; got {fits!r}"
    assert _message(over) == "interval must be a number of seconds; got '" + "y" * 34 + "...)'"


def test_stop_from_another_thread_keeps_nothing_of_the_callers_context() -> None:
    """The pause queued on a stopped loop runs in the probe's empty context."""
    var: contextvars.ContextVar[Payload] = contextvars.ContextVar("var")
    with monitor_and_loop(INTERVAL) as (monitor, loop):
        loop.run_until_complete(asyncio.sleep(0.05))  # probed, then stopped
        payload = Payload()
        ref = weakref.ref(payload)
        token = var.set(payload)
        monitor.stop()  # not the loop's thread: the pause waits in the loop's queue
        var.reset(token)
        del payload
        gc.collect()
        assert ref() is None
        loop.run_until_complete(asyncio.sleep(0))  # the queued pause runs harmlessly
        assert live_timers(loop) == 0


class _FailingTickClock(asyncio.SelectorEventLoop):
    """A loop whose clock fails when the probe's tick reads it, from the third tick on."""

    def __init__(self) -> None:
        super().__init__()
        self.tick_reads = 0

    def time(self) -> float:
        # Only the probe is hurt: asyncio itself reads the clock too.
        if "tick" in sys._getframe(1).f_code.co_name:
            self.tick_reads += 1
            if self.tick_reads > 2:
                raise OSError("clock failed")
        return super().time()


def _failed_probe() -> tuple[LoopMonitor, _FailingTickClock, list[dict[str, Any]]]:
    """A monitor whose probe failed on its loop's third tick; the loop stopped, not closed."""
    monitor = LoopMonitor(interval=INTERVAL)
    monitor.start()
    loop = _FailingTickClock()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    loop.run_until_complete(asyncio.sleep(0.3))
    assert loop.tick_reads == 3
    return monitor, loop, errors


def test_a_failed_probe_gives_its_last_window_once() -> None:
    monitor, loop, errors = _failed_probe()
    try:
        count = samples(monitor)
        last = read_lag(monitor)
        after = read_lag(monitor)
    finally:
        monitor.stop()
        loop.close()
    assert count == 2  # the two ticks before the fault
    assert last["MainThread"].max is not None
    assert after == {}  # the loop is still open, but its probe is gone
    assert errors == []


def test_stop_after_a_probe_failed_leaves_its_loop_clean() -> None:
    monitor, loop, errors = _failed_probe()
    try:
        monitor.stop()  # not from the loop's thread: its pause waits in the loop's queue
        loop.run_until_complete(asyncio.sleep(0.05))  # ... and runs here
    finally:
        loop.close()
        monitor.stop()
    assert errors == []


def test_ticks_keep_nothing_of_the_context_that_started_the_loop() -> None:
    var: contextvars.ContextVar[Payload] = contextvars.ContextVar("var")
    with monitor_and_loop(INTERVAL) as (_, loop):
        payload = Payload()
        ref = weakref.ref(payload)
        token = var.set(payload)
        loop.run_until_complete(asyncio.sleep(0.1))  # started here, ticked many times
        var.reset(token)
        del payload
        gc.collect()
        assert ref() is None  # the loop is still open, its cancelled tick still on its heap


def test_stop_on_a_loop_closed_meanwhile_does_not_raise() -> None:
    monitor = LoopMonitor(interval=INTERVAL)
    monitor.start()
    loop = asyncio.new_event_loop()
    closing = Closing()
    try:
        loop.run_until_complete(asyncio.sleep(0.05))
        loop.call_soon_threadsafe = closing  # type: ignore[method-assign,assignment]
        monitor.stop()
        assert closing.calls == 1
        assert not monitor.started
    finally:
        del loop.call_soon_threadsafe
        loop.close()
        monitor.stop()


def test_a_closed_loop_is_read_once_by_each_part_then_forgotten() -> None:
    monitor = LoopMonitor(interval=INTERVAL)
    monitor.start()
    try:
        in_thread("short", lambda: asyncio.run(asyncio.sleep(0.2))).join(10)
        delays = monitor.read_delays()
        kept = len(monitor._probes)  # its utilisation is not read yet
        again = monitor.read_delays()
        busy = monitor.read_utilization()
        after = (monitor._probes, read_lag(monitor))
    finally:
        monitor.stop()
    assert delays["short"].max is not None and kept == 1
    assert again["short"].max is None  # nothing new since
    assert busy["short"] is not None and 0.0 <= busy["short"] < 0.5
    assert after == ((), {})


def test_a_monitor_of_one_part_forgets_a_closed_loop_at_its_first_read() -> None:
    monitor = LoopMonitor(interval=INTERVAL, utilization=False)
    monitor.start()
    try:
        in_thread("short", lambda: asyncio.run(asyncio.sleep(0.1))).join(10)
        delays = monitor.read_delays()
        probes = monitor._probes
    finally:
        monitor.stop()
    assert monitor.parts == {DELAYS}
    assert delays["short"].max is not None and probes == ()


def test_measure_takes_a_part_name() -> None:
    monitor = LoopMonitor(delays=False, utilization=False)
    assert monitor.parts == frozenset()
    with pytest.raises(ValueError, match="part must be 'delays' or 'utilization'; got 'lag'"):
        monitor.measure("lag")
    monitor.measure(UTILIZATION)
    monitor.measure(UTILIZATION)
    assert monitor.parts == {UTILIZATION}


# --- fork


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_fork_forgets_the_parents_loops(monitor: LoopMonitor) -> None:
    def body() -> dict[str, Any]:
        at_fork = sorted(read_lag(monitor))
        blocks: list[float] = []
        asyncio.run(blocking_app(blocks, count=1, block=0.1)())
        got = read_lag(monitor)
        result: dict[str, Any] = {"at_fork": at_fork, "labels": sorted(got), "blocks": blocks}
        result["max"] = got["MainThread"].max if "MainThread" in got else None
        return result

    with idle_loop("parent-loop"):
        time.sleep(0.1)
        child = in_child(body, fork=_fork_quietly)
        parent = read_lag(monitor)
    assert child["at_fork"] == []  # the parent's loop is not the child's
    assert child["labels"] == ["MainThread"]
    assert max(child["blocks"]) - INTERVAL <= child["max"] <= max(child["blocks"]) + SLACK
    assert "parent-loop" in parent and parent["parent-loop"].max is not None


def _fork_quietly() -> int:
    """os.fork(), without its warning of a fork beside running threads (3.12+)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def _child_report(write_end: int, result: dict[str, Any]) -> None:
    os.write(write_end, json.dumps(result).encode())
    os._exit(0)


def _wait_child(pid: int, read_end: int) -> dict[str, Any]:
    with os.fdopen(read_end, "rb") as f:
        child: dict[str, Any] = json.loads(f.read() or b"{}")
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and "error" not in child, child
    return child


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_reset_is_a_no_op_here_and_forgets_the_parents_loops_in_a_child(
    monitor: LoopMonitor,
) -> None:
    asyncio.run(asyncio.sleep(0.05))  # closed, its last window not read: still held
    monitor.reset()  # same process: nothing to forget
    discovery.hooks.after_fork_in_child()  # same process: resets nothing either

    def body() -> dict[str, Any]:
        at_fork = read_lag(monitor)
        asyncio.run(asyncio.sleep(0.1))
        count = samples(monitor, "MainThread")
        own = read_lag(monitor)
        return {"at_fork": sorted(at_fork), "labels": sorted(own), "samples": count}

    child = in_child(body, fork=_fork_quietly)
    assert child["at_fork"] == []  # the parent's window is not the child's
    assert child["labels"] == ["MainThread"] and child["samples"] > 0
    parent = read_lag(monitor)
    assert list(parent) == ["MainThread"] and parent["MainThread"].max is not None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("state", ["ticking", "parked"])
def test_a_loop_forked_from_its_own_callback_keeps_no_tick_in_the_child(
    monitor: LoopMonitor, state: str
) -> None:
    """The loop goes on running in the child; the parent's probe must not re-arm there.

    At the fork the probe has a tick pending (the loop was busy) or is parked
    on the loop's select (it slept).
    """
    parent_pid = os.getpid()
    read_end, write_end = os.pipe()

    async def app() -> int:
        loop = asyncio.get_running_loop()
        selector = loop._selector  # type: ignore[attr-defined]
        await asyncio.sleep(0.1)  # slept: parked
        if state == "ticking":
            # Busy until the timer is back: more than PARKED_SELECTS selects in a row,
            # counted again should a due time pass meanwhile (a stall of the host).
            for _ in range(10 * PARKED_SELECTS):
                if not parked(loop):
                    break
                await asyncio.sleep(0)
        monitor.reset()  # same process: a no-op, the probe goes on
        expected = (1, False) if state == "ticking" else (0, True)
        assert (live_timers(loop), parked(loop)) == expected
        pid = _fork_quietly()
        if pid:
            return pid
        try:  # child: the loop runs on from here
            signal.alarm(20)
            time.sleep(3 * INTERVAL)  # the parent's tick falls due in the child
            assert not parked(loop)  # the parked select went at the fork

            def report() -> None:
                labels = sorted(read_lag(monitor))
                hooked = "select" in vars(selector)
                _child_report(
                    write_end, {"timers": live_timers(loop), "hooked": hooked, "labels": labels}
                )

            loop.call_later(0.1, report)
            await loop.create_future()  # never done: report() ends the child
        finally:
            os._exit(1)
        return 0  # pragma: no cover - unreachable

    try:
        pid = asyncio.run(app())
    finally:
        if os.getpid() != parent_pid:  # pragma: no cover - a child never goes on
            os._exit(2)
    os.close(write_end)
    child = _wait_child(pid, read_end)
    assert child == {"timers": 0, "hooked": False, "labels": []}
    assert read_lag(monitor)["MainThread"].max is not None  # the parent goes on


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_the_at_fork_hook_renews_the_locks_and_forgets_the_parents_loops(
    monitor: LoopMonitor,
) -> None:
    """Only that: the hooks stay installed, and the child's loops are probed as before."""
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.sleep(0.05))  # probed, stopped, still open
        watch_loop(loop)
        parent = {"hooks": discovery.hooks.lock, "monitor": monitor._lock}
        probes = monitor._probes

        def body() -> dict[str, Any]:
            return {
                "hooks_lock": discovery.hooks.lock is not parent["hooks"],
                "monitor_lock": monitor._lock is not parent["monitor"],
                "watched": len(discovery.hooks.watched),
                "probes": len(monitor._probes),
                "dead": all(p.dead for p in probes),
                "installed": hooks_installed() != [],
            }

        child = in_child(body, fork=_fork_quietly)
    finally:
        loop.close()
    assert child == {
        "hooks_lock": True,
        "monitor_lock": True,
        "watched": 0,
        "probes": 0,
        "dead": True,
        "installed": True,
    }
    assert len(monitor._probes) == 1 and not monitor._probes[0].dead  # the parent's, kept
