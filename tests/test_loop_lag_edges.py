"""Event-loop lag monitor, the edges: restart, eviction, hand-over, fork, hooks of others.

Real loops in real threads; each value is checked against what the test
measures itself (its own clock around a block, the loop's own timer heap and
selector, weak references to the test's objects).
"""

from __future__ import annotations

import asyncio
import asyncio.events
import contextvars
import gc
import json
import math
import os
import selectors
import signal
import statistics
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from opentelemetry.instrumentation.process import ProcessMetricsOptions
from opentelemetry.instrumentation.process.facts import read_facts
from opentelemetry.instrumentation.process.faultlog import FaultLog
from opentelemetry.instrumentation.process.runtime import loop_lag
from opentelemetry.instrumentation.process.runtime.loop_lag import (
    LoopLag,
    LoopLagMonitor,
    hooks_installed,
)
from opentelemetry.instrumentation.process.sources import runtime as runtime_sources
from opentelemetry.instrumentation.process.sources.base import ReadContext

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the test environment
    uvloop = None

INTERVAL = 0.01
NO_TICK = 10.0  # an interval no test lasts: only the loop's own work runs


@pytest.fixture
def monitor() -> Iterator[LoopLagMonitor]:
    m = LoopLagMonitor(interval=INTERVAL)
    m.start()
    yield m
    m.stop()
    assert hooks_installed() == []


def _live_timers(loop: asyncio.AbstractEventLoop) -> int:
    """Timers of an asyncio loop that are not cancelled (asyncio's truth).

    Those on its heap, and those already due, moved to its ready queue in the
    iteration that runs the caller.
    """
    due = [h for h in loop._ready if isinstance(h, asyncio.TimerHandle)]  # type: ignore[attr-defined]
    return sum(1 for h in [*loop._scheduled, *due] if not h.cancelled())  # type: ignore[attr-defined]


def _in_thread(name: str, body: Any) -> threading.Thread:
    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread


class _Payload:
    """An object the test watches with a weak reference."""


# --- windows


def test_merged_windows_read_as_one_window_fed_every_sample() -> None:
    first = [0.0002, 0.0031, 0.0007, 0.25]
    second = [0.0011, 0.0004, 0.09, 0.0002, 0.0005]
    a, b, whole = loop_lag._Window(), loop_lag._Window(), loop_lag._Window()
    for lag in first:
        a.add(lag)
        whole.add(lag)
    for lag in second:
        b.add(lag)
        whole.add(lag)
    a.merge(b)
    got = a.summary(None)
    every = first + second
    assert got.samples == len(every)
    assert got.max == max(every) and got.min == min(every)
    assert got.mean is not None and math.isclose(got.mean, statistics.fmean(every))
    assert got.stddev is not None and math.isclose(got.stddev, statistics.pstdev(every))
    assert a.buckets == whole.buckets
    assert got == whole.summary(None)


def test_p99_of_a_long_window_leaves_out_its_top_one_percent() -> None:
    window = loop_lag._Window()
    for _ in range(199):
        window.add(0.001)
    window.add(0.5)
    window.add(150.0)  # above the last bucket (about 105 s)
    got = window.summary(None)
    # Buckets: 100 us * 2**(k/4); 0.001 s falls in the one up to 100 us * 2**3.5.
    bound = min(b for b in (1e-4 * 2 ** (k / 4) for k in range(81)) if b >= 0.001)
    # 201 samples: the 199th smallest is the p99, and it is 1 ms.
    assert got.p99 is not None and math.isclose(got.p99, bound)
    assert got.p50 is not None and math.isclose(got.p50, bound)
    assert got.max == 150.0 and got.samples == 201
    # The top sample is above every bucket: its percentile is the window's maximum.
    assert window.percentile(1.0) == 150.0


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


def test_a_timer_run_early_on_a_coarse_clock_reads_as_no_lag(monitor: LoopLagMonitor) -> None:
    loop = _CoarseClock()
    try:
        loop.run_until_complete(asyncio.sleep(0.3))
    finally:
        loop.close()
    lag = monitor.read()["MainThread"]
    assert lag.samples > 0
    assert lag.min is not None and lag.min >= 0.0  # early ticks are not negative lags
    assert lag.mean is not None and lag.mean >= 0.0


# --- utilisation


def _run_windows(monitor: LoopLagMonitor, loop: asyncio.AbstractEventLoop) -> list[Any]:
    """Idle 0.2 s, blocked 0.4 s, idle 0.2 s: one read after each run of ``loop``."""

    async def block() -> None:
        time.sleep(0.4)

    async def idle() -> None:
        await asyncio.sleep(0.2)

    out: list[Any] = []
    for body in (idle, block, idle):
        t0 = time.perf_counter()
        loop.run_until_complete(body())
        outer = time.perf_counter() - t0
        out.append((monitor.read()["MainThread"].utilization, outer))
    return out


def test_each_window_has_the_utilisation_of_its_own_run() -> None:
    """Running and idle times are differences from the previous window, each its own."""
    monitor = LoopLagMonitor(interval=NO_TICK)
    monitor.start()
    loop = asyncio.new_event_loop()
    try:
        (idle1, _), (busy, outer), (idle2, _) = _run_windows(monitor, loop)
    finally:
        loop.close()
        monitor.stop()
    assert idle1 is not None and busy is not None and idle2 is not None
    # Busy for 0.4 s of a run no longer than the test's clock around it.
    assert busy >= 0.4 / outer
    # The loop waited in select for the whole sleep: the busy window before
    # (or the idle one before it) does not leak into this one.
    assert idle1 < 0.5 and idle2 < 0.5


def test_a_loop_that_did_not_run_since_the_last_read_has_no_utilisation() -> None:
    monitor = LoopLagMonitor(interval=INTERVAL)
    monitor.start()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.sleep(0.05))
        first = monitor.read()
        again = monitor.read()  # stopped in between: no running time at all
    finally:
        loop.close()
        monitor.stop()
    assert first["MainThread"].utilization is not None
    assert again == {"MainThread": LoopLag(None, None, None, None, None, None, None, 0, None)}


def test_utilisation_stays_within_0_and_1_when_idle_reads_ahead() -> None:
    # The loop's thread can stamp a select start after the reader's clock:
    # idle then reads slightly negative (or above running) for one window.
    assert loop_lag._utilization(0.5, -0.01) == 1.0
    assert loop_lag._utilization(0.5, 0.6) == 0.0
    assert loop_lag._utilization(0.5, 0.125) == 0.75


# --- start, stop, restart


def test_a_stopped_monitor_starts_again(monitor: LoopLagMonitor) -> None:
    asyncio.run(asyncio.sleep(0.05))
    assert monitor.read()["MainThread"].samples > 0
    monitor.stop()
    assert monitor.started is False
    asyncio.run(asyncio.sleep(0.05))
    assert monitor.read() == {}  # stopped: nothing probed
    monitor.start()
    assert monitor.started is True
    asyncio.run(asyncio.sleep(0.05))
    assert monitor.read()["MainThread"].samples > 0


def test_at_max_loops_a_closed_loop_makes_room_for_a_new_one() -> None:
    monitor = LoopLagMonitor(interval=INTERVAL, max_loops=1)
    monitor.start()
    try:
        _in_thread("first", lambda: asyncio.run(asyncio.sleep(0.05))).join(10)
        # Closed, its last window not read yet: still held, but it gives way.
        _in_thread("second", lambda: asyncio.run(asyncio.sleep(0.1))).join(10)
        got = monitor.read()
        skipped = monitor.skipped
    finally:
        monitor.stop()
    assert list(got) == ["second"]
    assert got["second"].samples > 0
    assert skipped == 0


def test_labels_skip_unbegun_and_closed_loops_and_stay_unique() -> None:
    """A loop not begun yet, a closed one of another name, a live one of the same name."""
    monitor = LoopLagMonitor(interval=INTERVAL)
    busy, release, live_running = threading.Event(), threading.Event(), threading.Event()

    async def blocked() -> None:
        busy.set()
        release.wait(10)  # blocks its loop: the begin queued by start() waits

    async def live() -> None:
        live_running.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)

    threads = [_in_thread("unbegun", lambda: asyncio.run(blocked()))]
    try:
        assert busy.wait(10)
        monitor.start()  # attaches the blocked loop first; its label comes when it runs
        _in_thread("x", lambda: asyncio.run(asyncio.sleep(0.05))).join(10)  # closed, unread
        threads.append(_in_thread("w", lambda: asyncio.run(live())))
        assert live_running.wait(10)
        _in_thread("w", lambda: asyncio.run(asyncio.sleep(0.05))).join(10)
        got = monitor.read()
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
        monitor.stop()
    # The second "w" loop ran while the first still did: a label of its own.
    assert sorted(got) == ["w", "w#2", "x"]
    assert all(lag.samples > 0 for lag in got.values())


def test_the_next_loop_of_a_thread_takes_over_the_last_window_of_the_closed_one(
    monitor: LoopLagMonitor,
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
    got = monitor.read()
    assert list(got) == ["MainThread"]
    lag = got["MainThread"]
    assert lag.max is not None and lag.max >= blocks[1] - INTERVAL
    assert lag.samples >= 2  # at least the two block lags, one per loop
    assert monitor.read() == {}


def _message(value: object) -> str:
    with pytest.raises(ValueError) as caught:
        LoopLagMonitor(interval=value)  # type: ignore[arg-type]
    return str(caught.value)


def test_a_bad_value_is_quoted_whole_up_to_40_characters_then_cut() -> None:
    fits, over = "x" * 38, "y" * 39
    assert len(repr(fits)) == 40 and len(repr(over)) == 41
    assert _message(fits) == f"interval must be a number of seconds; got {fits!r}"
    assert _message(over) == f"interval must be a number of seconds; got {repr(over)[:37]}..."


# --- the hooks


def test_hooks_installed_names_each_hook_while_a_monitor_runs(monitor: LoopLagMonitor) -> None:
    expected = [("asyncio.events", "_set_running_loop"), ("asyncio", "_set_running_loop")]
    if uvloop is not None:
        expected.append((uvloop.Loop.__name__, "run_forever"))
    assert hooks_installed() == expected
    assert asyncio.events._set_running_loop.__wrapped__ is not None  # type: ignore[attr-defined]


def test_a_hooks_registry_installs_and_removes_its_hooks() -> None:
    original = asyncio.events._set_running_loop
    hooks = loop_lag._Hooks()
    lock = hooks.lock
    assert hooks._locked() is lock  # same process: the same lock
    monitor = LoopLagMonitor(interval=INTERVAL)
    hooks.add(monitor)
    try:
        assert asyncio.events._set_running_loop is not original
        assert [name for _, name, _, _ in hooks.installed].count("_set_running_loop") == 2
    finally:
        hooks.discard(monitor)
    assert asyncio.events._set_running_loop is original
    assert hooks.installed == [] and hooks.monitors == ()


def test_a_hook_wrapped_again_by_someone_else_stays_and_the_others_go() -> None:
    events_original = asyncio.events._set_running_loop
    asyncio_original = asyncio._set_running_loop  # type: ignore[attr-defined]
    monitor = LoopLagMonitor(interval=INTERVAL)
    monitor.start()
    ours = asyncio._set_running_loop  # type: ignore[attr-defined]
    calls: list[object] = []

    def theirs(loop: Any) -> None:
        calls.append(loop)
        ours(loop)

    asyncio._set_running_loop = theirs  # type: ignore[attr-defined]
    try:
        monitor.stop()
        assert asyncio._set_running_loop is theirs  # type: ignore[attr-defined]
        assert asyncio.events._set_running_loop is events_original
        if uvloop is not None:
            assert "run_forever" not in vars(uvloop.Loop)
        assert hooks_installed() == []
    finally:
        asyncio._set_running_loop = asyncio_original  # type: ignore[attr-defined]


def test_stop_leaves_a_select_wrapped_by_someone_else_in_place() -> None:
    monitor = LoopLagMonitor(interval=INTERVAL)
    monitor.start()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.sleep(0.05))
        selector: Any = loop._selector  # type: ignore[attr-defined]
        ours = selector.select
        assert ours.__wrapped__ is not None

        def theirs(timeout: float | None = None) -> Any:
            return ours(timeout)

        selector.select = theirs
        monitor.stop()
        assert vars(selector)["select"] is theirs
        loop.run_until_complete(asyncio.sleep(0.01))  # still works through both
    finally:
        loop.close()
        monitor.stop()


# --- context kept by queued callbacks


def test_stop_from_another_thread_keeps_nothing_of_the_callers_context() -> None:
    """The pause queued on a stopped loop runs in the probe's empty context."""
    var: contextvars.ContextVar[_Payload] = contextvars.ContextVar("var")
    monitor = LoopLagMonitor(interval=INTERVAL)
    monitor.start()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.sleep(0.05))  # probed, then stopped
        payload = _Payload()
        ref = weakref.ref(payload)
        token = var.set(payload)
        monitor.stop()  # not the loop's thread: the pause waits in the loop's queue
        var.reset(token)
        del payload
        gc.collect()
        assert ref() is None
        loop.run_until_complete(asyncio.sleep(0))  # the queued pause runs harmlessly
        assert _live_timers(loop) == 0
    finally:
        loop.close()


def test_a_loop_found_running_elsewhere_begins_without_the_starters_context() -> None:
    var: contextvars.ContextVar[_Payload] = contextvars.ContextVar("var")
    running, release = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        loop = asyncio.get_running_loop()
        running.set()
        release.wait(10)  # blocks the loop: the begin call waits in its queue
        holder["wrapped"] = "select" in vars(loop._selector)  # type: ignore[attr-defined]
        await asyncio.sleep(0.1)
        # Read while this run goes on: the loop's later runs begin from the hook.
        await loop.run_in_executor(None, lambda: holder.setdefault("got", found.read()))

    found = LoopLagMonitor(interval=INTERVAL)
    thread = _in_thread("elsewhere", lambda: asyncio.run(app()))
    assert running.wait(10)
    payload = _Payload()
    ref = weakref.ref(payload)
    token = var.set(payload)
    try:
        found.start()
        var.reset(token)
        del payload
        gc.collect()
        kept = ref() is not None
        release.set()
        thread.join(10)
    finally:
        release.set()
        found.stop()
    assert kept is False
    assert holder["wrapped"] is False  # begun only once the loop ran again
    lag = holder["got"]["elsewhere"]
    assert lag.samples > 0
    # A selector loop: its select is timed, as for a loop that starts later.
    assert lag.utilization is not None and 0.0 <= lag.utilization <= 1.0


def test_stopped_before_its_queued_begin_ran_a_probe_leaves_nothing_on_the_loop() -> None:
    """start() finds a busy loop elsewhere and queues its begin; stop() comes first."""
    running, release = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        loop = asyncio.get_running_loop()
        running.set()
        release.wait(10)  # blocks the loop: the begin, then the pause, wait in its queue
        await asyncio.sleep(0.05)  # both have run
        holder["select"] = "select" in vars(loop._selector)  # type: ignore[attr-defined]
        holder["timers"] = _live_timers(loop)

    thread = _in_thread("queued", lambda: asyncio.run(app()))
    assert running.wait(10)
    monitor = LoopLagMonitor(interval=INTERVAL)
    try:
        monitor.start()
        monitor.stop()
    finally:
        release.set()
        thread.join(10)
    assert holder == {"select": False, "timers": 0}


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


def _failed_probe() -> tuple[LoopLagMonitor, _FailingTickClock, list[dict[str, Any]]]:
    """A monitor whose probe failed on its loop's third tick; the loop stopped, not closed."""
    monitor = LoopLagMonitor(interval=INTERVAL)
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
        last = monitor.read()
        after = monitor.read()
    finally:
        monitor.stop()
        loop.close()
    assert last["MainThread"].samples == 2  # the two ticks before the fault
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
    var: contextvars.ContextVar[_Payload] = contextvars.ContextVar("var")
    monitor = LoopLagMonitor(interval=INTERVAL)
    monitor.start()
    loop = asyncio.new_event_loop()
    try:
        payload = _Payload()
        ref = weakref.ref(payload)
        token = var.set(payload)
        loop.run_until_complete(asyncio.sleep(0.1))  # started here, ticked many times
        var.reset(token)
        del payload
        gc.collect()
        assert ref() is None  # the loop is still open, its cancelled tick still on its heap
    finally:
        loop.close()
        monitor.stop()


def test_a_read_during_a_run_counts_that_run_from_its_start() -> None:
    monitor = LoopLagMonitor(interval=NO_TICK)
    blocked, release = threading.Event(), threading.Event()
    blocks: list[float] = []

    async def app() -> None:
        t0 = time.perf_counter()
        time.sleep(0.3)
        blocks.append(time.perf_counter() - t0)
        blocked.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)

    monitor.start()
    try:
        t0 = time.perf_counter()
        thread = _in_thread("reading", lambda: asyncio.run(app()))
        assert blocked.wait(10)
        time.sleep(0.05)  # the loop now waits in select
        got = monitor.read()
        outer = time.perf_counter() - t0
    finally:
        release.set()
        thread.join(10)
        monitor.stop()
    lag = got["reading"]
    assert lag.utilization is not None
    # Busy at least for the block, running no longer than the test's clock saw.
    assert lag.utilization >= blocks[0] / outer


class _SlottedSelector:
    """A selector whose instances have no ``__dict__``: its select cannot be wrapped."""

    __slots__ = ("inner",)

    def __init__(self) -> None:
        self.inner = selectors.DefaultSelector()

    def register(self, *args: Any) -> Any:
        return self.inner.register(*args)

    def unregister(self, fileobj: Any) -> Any:
        return self.inner.unregister(fileobj)

    def modify(self, *args: Any) -> Any:
        return self.inner.modify(*args)

    def select(self, timeout: float | None = None) -> Any:
        return self.inner.select(timeout)

    def get_key(self, fileobj: Any) -> Any:
        return self.inner.get_key(fileobj)

    def get_map(self) -> Any:
        return self.inner.get_map()

    def close(self) -> None:
        self.inner.close()


def test_a_loop_whose_select_cannot_be_timed_is_probed_without_utilisation(
    monitor: LoopLagMonitor,
) -> None:
    loop = asyncio.SelectorEventLoop(selector=_SlottedSelector())  # type: ignore[arg-type]
    try:
        loop.run_until_complete(asyncio.sleep(0.1))
    finally:
        loop.close()
    lag = monitor.read()["MainThread"]
    assert lag.samples > 0
    assert lag.utilization is None


def test_a_select_wrapped_by_someone_else_first_is_left_alone(monitor: LoopLagMonitor) -> None:
    loop = asyncio.new_event_loop()
    selector: Any = loop._selector  # type: ignore[attr-defined]
    original = selector.select

    def theirs(timeout: float | None = None) -> Any:
        return original(timeout)

    selector.select = theirs
    try:
        loop.run_until_complete(asyncio.sleep(0.1))
        during = vars(selector)["select"]
    finally:
        loop.close()
    assert during is theirs
    lag = monitor.read()["MainThread"]
    assert lag.samples > 0
    assert lag.utilization is None  # not measured rather than measured through theirs


def test_a_failing_stop_hook_never_breaks_the_loops_stop() -> None:
    failing, working = LoopLagMonitor(interval=INTERVAL), LoopLagMonitor(interval=INTERVAL)
    failing.start()
    working.start()

    def fail(loop: asyncio.AbstractEventLoop) -> None:
        raise RuntimeError("injected")

    failing._on_stop = fail  # type: ignore[method-assign]  # the fault, injected
    try:
        asyncio.run(asyncio.sleep(0.05))  # returns normally
        got = working.read()
    finally:
        failing.stop()
        working.stop()
    assert got["MainThread"].samples > 0


def test_a_failing_start_hook_never_breaks_the_loops_start() -> None:
    failing, working = LoopLagMonitor(interval=INTERVAL), LoopLagMonitor(interval=INTERVAL)
    failing.start()
    working.start()

    def fail(loop: asyncio.AbstractEventLoop) -> None:
        raise RuntimeError("injected")

    failing._on_start = fail  # type: ignore[method-assign]  # the fault, injected
    try:
        asyncio.run(asyncio.sleep(0.05))  # returns normally
        got = working.read()
    finally:
        failing.stop()
        working.stop()
    assert got["MainThread"].samples > 0


def test_utilisation_off_leaves_select_alone() -> None:
    monitor = LoopLagMonitor(interval=INTERVAL, utilization=False)
    monitor.start()
    loop = asyncio.new_event_loop()

    async def app() -> bool:
        await asyncio.sleep(0.05)
        return "select" in vars(loop._selector)  # type: ignore[attr-defined]

    try:
        wrapped = loop.run_until_complete(app())
        lag = monitor.read()["MainThread"]
    finally:
        loop.close()
        monitor.stop()
    assert wrapped is False
    assert lag.samples > 0 and lag.utilization is None


class _Closing:
    """A loop's ``call_soon_threadsafe`` as it fails once the loop closed meanwhile."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        raise RuntimeError("Event loop is closed")


def test_a_loop_closed_between_the_scan_and_the_begin_is_passed_over() -> None:
    running, release = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        holder["loop"] = asyncio.get_running_loop()
        running.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)

    thread = _in_thread("closing", lambda: asyncio.run(app()))
    assert running.wait(10)
    closing = _Closing()
    holder["loop"].call_soon_threadsafe = closing  # the close, injected
    monitor = LoopLagMonitor(interval=INTERVAL)
    try:
        monitor.start()  # must not raise
        assert closing.calls == 1
        assert monitor.started
    finally:
        del holder["loop"].call_soon_threadsafe
        release.set()
        thread.join(10)
        monitor.stop()


def test_stop_on_a_loop_closed_meanwhile_does_not_raise() -> None:
    monitor = LoopLagMonitor(interval=INTERVAL)
    monitor.start()
    loop = asyncio.new_event_loop()
    closing = _Closing()
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


# --- fork


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
    monitor: LoopLagMonitor,
) -> None:
    asyncio.run(asyncio.sleep(0.05))  # closed, its last window not read: still held
    monitor.reset()  # same process: nothing to forget
    loop_lag._hooks.after_fork_in_child()  # same process: resets nothing either
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # child
        try:
            signal.alarm(20)
            at_fork = monitor.read()
            asyncio.run(asyncio.sleep(0.1))
            own = monitor.read()
            result = {
                "at_fork": sorted(at_fork),
                "labels": sorted(own),
                "samples": own["MainThread"].samples if "MainThread" in own else 0,
            }
        except BaseException as exc:  # noqa: BLE001 - report anything to the parent
            result = {"error": repr(exc)}
        _child_report(write_end, result)
    os.close(write_end)
    child = _wait_child(pid, read_end)
    assert child["at_fork"] == []  # the parent's window is not the child's
    assert child["labels"] == ["MainThread"] and child["samples"] > 0
    parent = monitor.read()
    assert list(parent) == ["MainThread"] and parent["MainThread"].samples > 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_loop_forked_from_its_own_callback_keeps_no_tick_in_the_child(
    monitor: LoopLagMonitor,
) -> None:
    """The loop goes on running in the child; the parent's probe must not re-arm there."""
    parent_pid = os.getpid()
    read_end, write_end = os.pipe()

    async def app() -> int:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.1)  # ticking
        monitor.reset()  # same process: a no-op, the probe goes on
        assert _live_timers(loop) == 1  # the probe's pending tick
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid:
            return pid
        try:  # child: the loop runs on from here
            signal.alarm(20)
            time.sleep(3 * INTERVAL)  # the parent's tick falls due in the child

            def report() -> None:
                labels = sorted(monitor.read())
                _child_report(write_end, {"timers": _live_timers(loop), "labels": labels})

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
    assert child == {"timers": 0, "labels": []}
    assert monitor.read()["MainThread"].samples > 0  # the parent goes on


# --- the source


def test_closing_the_loops_source_that_never_opened_does_nothing() -> None:
    process = psutil.Process()
    ctx = ReadContext(
        process=process,
        facts=read_facts(process, cpu_frequency=False),
        options=ProcessMetricsOptions(),
        faults=FaultLog(),
        direct=False,
    )
    before = (asyncio.events._set_running_loop, hooks_installed())
    runtime_sources._close_loops(ctx)
    assert ctx.state == {}
    assert (asyncio.events._set_running_loop, hooks_installed()) == before
