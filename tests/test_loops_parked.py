"""A probe that never wakes its loop (probes/loops/probe.py): parked while the loop sleeps.

On asyncio's selector loops a tick does not set the next timer; the loop's
next ``select`` measures instead, and the timer comes back when the loop is
busy. Wakes are counted by the OS (the voluntary context switches of the
loop's thread, in a forked child that has no other thread); the delays are
checked against the test's clock around each block.
"""

from __future__ import annotations

import asyncio
import resource
import selectors
import threading
import time
import types
from typing import Any

import pytest

from opentelemetry.instrumentation.process.probes.loops import select_timing
from opentelemetry.instrumentation.process.probes.loops.monitor import LoopMonitor
from opentelemetry.instrumentation.process.probes.loops.probe import PARKED_SELECTS

from .support.forked import in_child
from .support.gc import collector_paused  # noqa: F401 - autouse
from .support.loopapps import (
    UVLOOP_CLOCK,
    hooks_installed,
    in_thread,
    live_timers,
    monitor_fixture,
    parked,
    probed,
    read_lag,
    samples,
    selector_timed,
    uvloop,
)
from .support.waiting import eventually

INTERVAL = 0.01
SLACK = 0.05  # wake-up latency plus scheduling noise on a shared 2-core machine

monitor = monitor_fixture(INTERVAL)


def _wakes(body: Any) -> int:
    """Times the calling thread slept and was woken while ``await body`` ran."""
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw
    asyncio.run(body)
    return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw - before


def _sleeping_and_waking(probe: bool) -> dict[str, Any]:
    """In a forked child: wakes of an idle second, and of a second woken every 50 ms."""
    monitor = LoopMonitor(interval=INTERVAL)
    if probe:
        monitor.start()

    async def idle() -> None:
        await asyncio.sleep(1.0)

    async def periodic() -> None:
        for _ in range(20):
            await asyncio.sleep(0.05)

    got: dict[str, Any] = {"idle": _wakes(idle()), "periodic": _wakes(periodic())}
    if probe:
        lag = read_lag(monitor)["MainThread"]
        got.update(max=lag.max, mean=lag.mean)
        monitor.stop()
    return got


@pytest.mark.skipif(not hasattr(resource, "RUSAGE_THREAD"), reason="Linux only")
def test_the_probe_adds_no_wake_to_a_sleeping_loop() -> None:
    """Ticking every 10 ms would wake it 100 times a second; parked, it wakes it at most once."""
    without = in_child(lambda: _sleeping_and_waking(False))
    with_probe = in_child(lambda: _sleeping_and_waking(True))
    # The first tick, due 10 ms after the start, wakes the loop once; then none.
    assert with_probe["idle"] <= without["idle"] + 1, (without, with_probe)
    # Woken by its own timer every 50 ms, 5 ticks' worth: the probe stays parked.
    assert with_probe["periodic"] <= without["periodic"] + 1, (without, with_probe)
    # Two seconds asleep: every tick due meanwhile counts, on time.
    assert with_probe["max"] is not None and with_probe["max"] <= SLACK
    assert with_probe["mean"] <= with_probe["max"]


def test_a_read_while_the_loop_sleeps_counts_the_ticks_slept_through(
    monitor: LoopMonitor,
) -> None:
    """Delays of a sleeping loop are 0, counted at the read, without waking it."""
    running = threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        loop = asyncio.get_running_loop()
        holder["loop"] = loop
        done = loop.create_future()
        holder["done"] = done
        await asyncio.sleep(0.1)  # the first tick has parked
        running.set()
        await done

    thread = in_thread("sleeper", lambda: asyncio.run(app()))
    try:
        assert running.wait(10)
        # Asleep in its parked select before the first read: a stall of its thread on the
        # way there (a loaded host) would put a late tick in the window read next.
        assert eventually(lambda: any(p.asleep for p in monitor._probes), timeout=10)
        read_lag(monitor)
        time.sleep(0.3)
        lag = read_lag(monitor)["sleeper"]
        state = (parked(holder["loop"]), live_timers(holder["loop"]))
    finally:
        holder["loop"].call_soon_threadsafe(holder["done"].set_result, None)
        thread.join(10)
    assert state == (True, 0)  # asleep all along: no timer of the probe's
    # Samples, all 0: the ticks due while it slept (none would be None, never 0).
    assert (lag.max, lag.mean, lag.p50, lag.p99) == (0.0, 0.0, 0.0, 0.0)
    assert lag.utilization is not None and lag.utilization < 0.1


@pytest.mark.parametrize("utilization", [True, False], ids=["all", "delays only"])
def test_a_busy_loop_gets_the_timer_back_and_a_sleeping_one_parks_it(utilization: bool) -> None:
    """Parked: the probe's select on the selector. Not: the timing wrapper, or nothing."""
    monitor = LoopMonitor(interval=INTERVAL, utilization=utilization)

    async def app() -> list[tuple[int, bool, bool]]:
        loop = asyncio.get_running_loop()
        selector = loop._selector  # type: ignore[attr-defined]

        def state() -> tuple[int, bool, bool]:
            return live_timers(loop), parked(loop), "select" in vars(selector)

        await asyncio.sleep(0.1)  # slept: parked
        seen = [state()]
        for _ in range(100):  # work ready again and again
            if not parked(loop):
                break
            await asyncio.sleep(0)
        seen.append(state())
        await asyncio.sleep(0.1)  # the next tick parks it again
        seen.append(state())
        return seen

    monitor.start()
    try:
        seen = asyncio.run(app())
    finally:
        monitor.stop()
    assert seen == [(0, True, True), (1, False, utilization), (0, True, True)]


def _after_a_parked_sleep(monitor: LoopMonitor, then: Any) -> list[int]:
    """Timers of the loop (its probe's) after each step of ``then(loop, note)``.

    First the loop sleeps 0.6 s: its probe, ticking every 0.5 s, has parked,
    and no tick falls due during what follows unless it stalls for 0.4 s.
    """

    async def app() -> list[int]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.6)
        assert parked(loop)
        seen: list[int] = []
        await then(loop, lambda: seen.append(live_timers(loop)))
        return seen

    monitor.start()
    try:
        return asyncio.run(app())
    finally:
        monitor.stop()


def test_a_loop_polled_again_and_again_gets_the_timer_back() -> None:
    """Each ``await asyncio.sleep(0)``: one ``select`` that does not wait."""

    async def polls(_loop: Any, note: Any) -> None:
        for _ in range(2 * PARKED_SELECTS):
            note()
            await asyncio.sleep(0)

    seen = _after_a_parked_sleep(LoopMonitor(interval=0.5), polls)
    back = seen.index(1)
    assert 0 < back <= PARKED_SELECTS and set(seen[back:]) == {1}, seen


def test_a_tick_that_falls_due_while_the_loop_works_restarts_the_count() -> None:
    """Busy past a due time: that tick ran late, and the selects are counted from it."""
    few = PARKED_SELECTS // 2

    async def polls_around_a_block(_loop: Any, note: Any) -> None:
        for _ in range(few):
            await asyncio.sleep(0)
        time.sleep(0.5)  # past the next due time
        for _ in range(few + 1):
            await asyncio.sleep(0)
            note()

    seen = _after_a_parked_sleep(LoopMonitor(interval=0.5), polls_around_a_block)
    assert seen == [0] * (few + 1), seen  # still parked: counted afresh since the block


def test_a_loop_woken_again_and_again_gets_the_timer_back() -> None:
    """Woken by another thread every 2 ms: each ``select`` waits, none polls."""

    async def wakes(loop: asyncio.AbstractEventLoop, note: Any) -> None:
        done = loop.create_future()

        def note_and_say(noted: threading.Event) -> None:
            note()
            noted.set()

        def other_thread() -> None:
            for _ in range(2 * PARKED_SELECTS):
                time.sleep(0.002)
                # One wake per note, the next one once it ran: two calls before a loop
                # slow to run (a loaded host) would share one select.
                noted = threading.Event()
                loop.call_soon_threadsafe(note_and_say, noted)
                noted.wait(10)
            loop.call_soon_threadsafe(done.set_result, None)

        thread = in_thread("waker", other_thread)
        await done
        thread.join(10)

    seen = _after_a_parked_sleep(LoopMonitor(interval=0.5), wakes)
    back = seen.index(1)
    assert 0 < back <= PARKED_SELECTS + 1 and set(seen[back:]) == {1}, seen


def test_a_loop_woken_between_due_times_reads_no_delay() -> None:
    """Woken by its own timer 0.35 s past a due time, idle otherwise: no tick was late."""
    monitor = LoopMonitor(interval=0.5)

    async def app() -> Any:
        await asyncio.sleep(0.6)  # the first tick (0.5 s) parks
        read_lag(monitor)
        for _ in range(2):
            await asyncio.sleep(0.75)  # wakes 0.35 s, then 0.1 s, past a due time
        return read_lag(monitor)["MainThread"]

    monitor.start()
    try:
        lag = asyncio.run(app())
    finally:
        monitor.stop()
    assert lag.max is not None and lag.max < 0.1, lag  # 0.35 if counted from the due time


def test_a_block_on_a_busy_loop_reads_as_the_block(monitor: LoopMonitor) -> None:
    """The loop never sleeps: the timer measures, as it always did."""
    blocks: list[float] = []

    async def app() -> None:
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            await asyncio.sleep(0)
            if not blocks and time.monotonic() > end - 0.4:
                t0 = time.monotonic()
                time.sleep(0.2)
                blocks.append(time.monotonic() - t0)

    asyncio.run(app())
    lag = read_lag(monitor)["MainThread"]
    assert lag.max is not None
    assert blocks[0] - INTERVAL <= lag.max <= blocks[0] + SLACK, (lag, blocks)
    assert lag.utilization is not None and lag.utilization > 0.9  # it never waited


def test_stop_while_parked_takes_the_hook_off_the_sleeping_loop() -> None:
    monitor = LoopMonitor(interval=INTERVAL)
    running = threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        loop = asyncio.get_running_loop()
        holder["loop"] = loop
        holder["done"] = done = loop.create_future()
        await asyncio.sleep(0.1)
        running.set()
        await done  # asleep in the parked select when stop() comes
        await asyncio.sleep(0.05)  # it would tick here if it had set its timer again
        holder["after"] = (probed(loop), selector_timed(loop))

    monitor.start()
    thread = in_thread("sleeper", lambda: asyncio.run(app()))
    assert running.wait(10)
    time.sleep(0.05)
    before = parked(holder["loop"])
    monitor.stop()
    during = "select" in vars(holder["loop"]._selector)
    holder["loop"].call_soon_threadsafe(holder["done"].set_result, None)
    thread.join(10)
    assert (before, during, holder["after"]) == (True, False, (0, False))
    assert hooks_installed() == []


def test_a_select_wrapped_by_someone_else_while_parked_keeps_working(
    monitor: LoopMonitor,
) -> None:
    """Theirs is never replaced; the probe falls back to its timer and still measures."""
    blocks: list[float] = []
    holder: dict[str, Any] = {}

    async def app() -> None:
        loop = asyncio.get_running_loop()
        selector: Any = loop._selector  # type: ignore[attr-defined]
        await asyncio.sleep(0.1)
        assert parked(loop)
        inner = selector.select
        calls = []

        def theirs(timeout: float | None = None) -> Any:
            calls.append(timeout)
            return inner(timeout)

        selector.select = theirs
        # Busy until the probe sets its timer again (the count starts again should a due
        # time pass meanwhile, a stall of the host); theirs stays.
        for _ in range(10 * PARKED_SELECTS):
            if live_timers(loop):
                break
            await asyncio.sleep(0)
        await asyncio.sleep(0.1)  # its next tick cannot park: theirs is there
        holder["state"] = (vars(selector)["select"] is theirs, live_timers(loop), bool(calls))
        t0 = time.monotonic()
        time.sleep(0.1)
        blocks.append(time.monotonic() - t0)
        await asyncio.sleep(0.05)

    asyncio.run(app())
    assert holder["state"] == (True, 1, True)
    lag = read_lag(monitor)["MainThread"]
    assert lag.max is not None and blocks[0] - INTERVAL <= lag.max <= blocks[0] + SLACK


class _OwnClock(asyncio.SelectorEventLoop):
    """A loop whose clock is not ``time.monotonic()``: a probe cannot park on it."""

    def time(self) -> float:
        return time.monotonic() + 1000.0


def test_a_loop_with_a_clock_of_its_own_keeps_the_timer(monitor: LoopMonitor) -> None:
    blocks: list[float] = []

    async def app() -> tuple[int, bool]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.1)
        state = (live_timers(loop), parked(loop))
        t0 = time.monotonic()
        time.sleep(0.1)
        blocks.append(time.monotonic() - t0)
        await asyncio.sleep(0.05)
        return state

    loop = _OwnClock()
    try:
        state = loop.run_until_complete(app())
    finally:
        loop.close()
    assert state == (1, False)
    lag = read_lag(monitor)["MainThread"]
    assert lag.max is not None and blocks[0] - INTERVAL <= lag.max <= blocks[0] + SLACK


class _SlottedSelector:
    """A selector whose instances have no ``__dict__``: its select cannot be hooked."""

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


def test_only_a_select_of_the_selectors_own_can_be_hooked() -> None:
    plain = asyncio.new_event_loop()
    slotted = asyncio.SelectorEventLoop(selector=_SlottedSelector())  # type: ignore[arg-type]
    wrapped = asyncio.new_event_loop()
    wrapped._selector.select = lambda timeout=None: []  # type: ignore[attr-defined]
    rebound = asyncio.new_event_loop()
    selector: Any = rebound._selector  # type: ignore[attr-defined]
    selector.select = types.MethodType(lambda self, timeout=None: [], selector)
    try:
        selector, select = select_timing.hookable(plain)
        assert selector is plain._selector  # type: ignore[attr-defined]
        assert select == plain._selector.select  # type: ignore[attr-defined]
        assert select_timing.hookable(slotted) == (None, None)  # nowhere to put a hook
        assert select_timing.hookable(wrapped) == (None, None)  # someone else's
        assert select_timing.hookable(rebound) == (None, None)  # someone's, bound to it
        assert select_timing.hookable(object()) == (None, None)  # no selector (uvloop)
        no_select = types.SimpleNamespace(_selector=types.SimpleNamespace())
        assert select_timing.hookable(no_select) == (None, None)
    finally:
        for loop in (plain, slotted, wrapped, rebound):
            loop.close()


@pytest.mark.parametrize("utilization", [True, False], ids=["all", "delays only"])
def test_a_selector_without_a_dict_keeps_the_timer(utilization: bool) -> None:
    """Nowhere to park: the loop keeps its timer, and a block reads as before."""
    monitor = LoopMonitor(interval=INTERVAL, utilization=utilization)
    monitor.start()
    blocks: list[float] = []

    async def app() -> int:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.1)  # ticks, none parked
        timers = live_timers(loop)
        t0 = time.monotonic()
        time.sleep(0.1)
        blocks.append(time.monotonic() - t0)
        await asyncio.sleep(0.05)
        return timers

    loop = asyncio.SelectorEventLoop(selector=_SlottedSelector())  # type: ignore[arg-type]
    try:
        timers = loop.run_until_complete(app())
        lag = read_lag(monitor)["MainThread"]
    finally:
        loop.close()
        monitor.stop()
    assert timers == 1
    assert lag.max is not None and blocks[0] - INTERVAL <= lag.max <= blocks[0] + SLACK
    assert lag.utilization is None


@pytest.mark.skipif(uvloop is None, reason="uvloop is not installed")
def test_uvloop_keeps_the_timer(monitor: LoopMonitor) -> None:
    """No Python selector: a tick every interval, as before."""

    async def app() -> bool:
        await asyncio.sleep(0.1)
        probe = monitor._find(asyncio.get_running_loop())
        return probe is not None and probe.parkable

    assert uvloop is not None
    # Each tick is a wake: a stall of the host (2 busy cores) is lag it rightly reports,
    # and fewer ticks; up to 3 rounds.
    for _ in range(3):
        parkable = uvloop.run(app())
        count = samples(monitor)
        lag = read_lag(monitor)["MainThread"]
        if count >= 0.1 / INTERVAL / 2 and lag.max is not None and lag.max <= SLACK + UVLOOP_CLOCK:
            break
    assert parkable is False
    assert count >= 0.1 / INTERVAL / 2  # ticks that ran, not ticks slept through
    assert lag.max is not None and lag.max <= SLACK + UVLOOP_CLOCK
