"""Utilisation (probes/loops/select_timing.py): time outside ``select`` over running time.

Real selector loops; each figure is checked against the test's own clock
around a block, and the loop's own selector.
"""

from __future__ import annotations

import asyncio
import functools
import selectors
import threading
import time
from typing import Any

import pytest

from opentelemetry.instrumentation.process.probes.loops import select_timing
from opentelemetry.instrumentation.process.probes.loops.monitor import (
    UTILIZATION,
    LoopMonitor,
)

from .support.loopapps import (
    LoopLag,
    in_thread,
    live_timers,
    monitor_and_loop,
    monitor_fixture,
    read_lag,
    selector_timed,
)

INTERVAL = 0.01
NO_TICK = 10.0  # an interval no test lasts: only the loop's own work runs

monitor = monitor_fixture(INTERVAL)


def _run_windows(monitor: LoopMonitor, loop: asyncio.AbstractEventLoop) -> list[Any]:
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
        out.append((read_lag(monitor)["MainThread"].utilization, outer))
    return out


def test_each_window_has_the_utilisation_of_its_own_run() -> None:
    """Running and idle times are differences from the previous window, each its own."""
    monitor = LoopMonitor(interval=NO_TICK)
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


def test_utilisation_alone_times_select_and_sets_no_timer() -> None:
    """Only the utilisation measured: select is timed, and the loop gets no tick."""
    monitor = LoopMonitor(interval=INTERVAL, delays=False)
    monitor.start()
    loop = asyncio.new_event_loop()

    async def app() -> tuple[bool, int]:
        await asyncio.sleep(0.05)
        return selector_timed(loop), live_timers(loop)

    try:
        timed, timers = loop.run_until_complete(app())
        (idle, _), (busy, outer), _ = _run_windows(monitor, loop)
        got = read_lag(monitor)
    finally:
        loop.close()
        monitor.stop()
    assert (timed, timers) == (True, 0)
    assert idle is not None and idle < 0.5
    assert busy is not None and busy >= 0.4 / outer
    assert got["MainThread"].max is None  # no delay measured


def test_a_loop_that_did_not_run_since_the_last_read_has_no_utilisation() -> None:
    with monitor_and_loop(INTERVAL) as (monitor, loop):
        loop.run_until_complete(asyncio.sleep(0.05))
        first = read_lag(monitor)
        again = read_lag(monitor)  # stopped in between: no running time at all
    assert first["MainThread"].utilization is not None
    assert again == {"MainThread": LoopLag(None, None, None, None, None)}


def test_utilisation_stays_within_0_and_1_when_idle_reads_ahead() -> None:
    # The loop's thread can stamp a select start after the reader's clock:
    # idle then reads slightly negative (or above running) for one window.
    assert select_timing.utilization(0.5, -0.01) == 1.0
    assert select_timing.utilization(0.5, 0.6) == 0.0
    assert select_timing.utilization(0.5, 0.125) == 0.75
    assert select_timing.utilization(0.0, 0.0) is None


def test_a_read_during_a_run_counts_that_run_from_its_start() -> None:
    monitor = LoopMonitor(interval=NO_TICK)
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
        thread = in_thread("reading", lambda: asyncio.run(app()))
        assert blocked.wait(10)
        time.sleep(0.05)  # the loop now waits in select
        got = read_lag(monitor)
        outer = time.perf_counter() - t0
    finally:
        release.set()
        thread.join(10)
        monitor.stop()
    lag = got["reading"]
    assert lag.utilization is not None
    # Busy at least for the block, running no longer than the test's clock saw.
    assert lag.utilization >= blocks[0] / outer


def test_utilisation_measured_later_times_a_loop_probed_already() -> None:
    """The utilisation source may open after the delays source: the loops begun get it too.

    One loop runs in this thread, one in another (its begin runs in its own thread).
    """
    monitor = LoopMonitor(interval=INTERVAL, utilization=False)
    running, release = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}

    async def other() -> None:
        loop = asyncio.get_running_loop()
        running.set()
        while not release.is_set():
            holder["timed"] = selector_timed(loop)
            await asyncio.sleep(0.02)

    async def here() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        monitor.start()
        thread = in_thread("other", lambda: asyncio.run(other()))
        holder["thread"] = thread
        await loop.run_in_executor(None, running.wait, 10)
        await asyncio.sleep(0.1)
        before = (selector_timed(loop), holder["timed"])
        read_lag(monitor)
        monitor.measure(UTILIZATION)
        assert selector_timed(loop)  # this thread's loop: at once
        await asyncio.sleep(0.3)
        holder["got"] = read_lag(monitor)
        return before

    try:
        before = asyncio.run(here())
    finally:
        release.set()
        if "thread" in holder:
            holder["thread"].join(10)
        monitor.stop()
    assert before == (False, False)
    assert holder["timed"] is True
    for label in ("MainThread", "other"):
        busy = holder["got"][label].utilization
        assert busy is not None and 0.0 <= busy < 0.5, holder["got"]


def test_utilisation_measured_later_leaves_a_select_wrapped_since_alone() -> None:
    """Someone wrapped select after the probe began: not measured, rather than through theirs."""
    monitor = LoopMonitor(interval=NO_TICK, utilization=False)

    async def app() -> Any:
        loop = asyncio.get_running_loop()
        selector: Any = loop._selector  # type: ignore[attr-defined]
        inner = selector.select
        selector.select = lambda timeout=None: inner(timeout)
        theirs = selector.select
        monitor.measure(UTILIZATION)
        await asyncio.sleep(0.1)
        assert vars(selector)["select"] is theirs
        return read_lag(monitor)["MainThread"]

    monitor.start()
    try:
        lag = asyncio.run(app())
    finally:
        monitor.stop()
    assert lag.utilization is None


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
    monitor: LoopMonitor,
) -> None:
    loop = asyncio.SelectorEventLoop(selector=_SlottedSelector())  # type: ignore[arg-type]
    try:
        loop.run_until_complete(asyncio.sleep(0.1))
    finally:
        loop.close()
    lag = read_lag(monitor)["MainThread"]
    assert lag.max is not None
    assert lag.utilization is None


def test_a_select_wrapped_by_someone_else_first_is_left_alone(monitor: LoopMonitor) -> None:
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
    lag = read_lag(monitor)["MainThread"]
    assert lag.max is not None
    assert lag.utilization is None  # not measured rather than measured through theirs


@pytest.mark.parametrize("wraps", [False, True], ids=["plain", "functools.wraps"])
def test_stop_leaves_a_select_wrapped_by_someone_else_in_place(wraps: bool) -> None:
    with monitor_and_loop(INTERVAL) as (monitor, loop):
        loop.run_until_complete(asyncio.sleep(0.05))
        selector: Any = loop._selector  # type: ignore[attr-defined]
        ours = selector.select
        assert ours.__wrapped__ is not None

        def theirs(timeout: float | None = None) -> Any:
            return ours(timeout)

        if wraps:  # theirs has a __wrapped__ too: only ours is ours
            theirs = functools.wraps(ours)(theirs)
        selector.select = theirs
        monitor.stop()
        assert vars(selector)["select"] is theirs
        loop.run_until_complete(asyncio.sleep(0.01))  # still works through both


def test_utilisation_off_leaves_select_alone() -> None:
    monitor = LoopMonitor(interval=INTERVAL, utilization=False)
    monitor.start()
    loop = asyncio.new_event_loop()

    async def app() -> bool:
        await asyncio.sleep(0.05)
        return selector_timed(loop)

    try:
        wrapped = loop.run_until_complete(app())
        lag = read_lag(monitor)["MainThread"]
    finally:
        loop.close()
        monitor.stop()
    assert wrapped is False
    assert lag.max is not None and lag.utilization is None
