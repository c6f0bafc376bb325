"""Utilisation (probes/loops/select_timing.py): time outside ``select`` over running time.

Real selector loops; each figure is checked against the test's own clock
around a block, and the loop's own selector. The same hook on ``select``
reads the delays and the utilisation: either part alone puts it there.
"""

from __future__ import annotations

import asyncio
import functools
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
    hooked,
    idle_loop,
    in_thread,
    monitor_and_loop,
    package_handles,
    probe_of,
    read_lag,
)

INTERVAL = 0.01
NO_TICK = 10.0  # an interval no test lasts: no tick falls due


def timed(monitor: LoopMonitor, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``monitor`` measures the utilisation of ``loop`` (its probe's ``Busy``)."""
    probe = probe_of(monitor, loop)
    return probe is not None and probe.busy.timed


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


def test_utilisation_alone_hooks_select_and_reads_no_delay() -> None:
    """Only the utilisation measured: the hook on select, nothing in the loop, no delay."""
    monitor = LoopMonitor(interval=INTERVAL, delays=False)
    monitor.start()
    loop = asyncio.new_event_loop()

    async def app() -> tuple[bool, list[Any]]:
        await asyncio.sleep(0.05)
        return hooked(loop) and timed(monitor, loop), package_handles(loop)

    try:
        on, handles = loop.run_until_complete(app())
        (idle, _), (busy, outer), _ = _run_windows(monitor, loop)
        got = read_lag(monitor)
    finally:
        loop.close()
        monitor.stop()
    assert (on, handles) == (True, [])
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

    One loop runs in this thread, one in another (begun from this one).
    """
    monitor = LoopMonitor(interval=INTERVAL, utilization=False)
    holder: dict[str, Any] = {}

    async def here() -> tuple[bool, ...]:
        loop = asyncio.get_running_loop()
        monitor.start()
        with idle_loop("other") as theirs:
            await asyncio.sleep(0.1)
            before = (timed(monitor, loop), timed(monitor, theirs), hooked(loop), hooked(theirs))
            read_lag(monitor)
            monitor.measure(UTILIZATION)
            holder["at once"] = (timed(monitor, loop), timed(monitor, theirs))
            await asyncio.sleep(0.3)
            holder["got"] = read_lag(monitor)
        return before

    try:
        before = asyncio.run(here())
    finally:
        monitor.stop()
    assert before == (False, False, True, True)  # hooked for the delays
    assert holder["at once"] == (True, True)
    for label in ("MainThread", "other"):
        busy = holder["got"][label].utilization
        assert busy is not None and 0.0 <= busy < 0.5, holder["got"]


def test_utilisation_measured_later_leaves_a_select_wrapped_since_alone() -> None:
    """Someone wrapped select (around the hook) after the probe began: theirs stays, and
    the loop is left alone from then on, not measured through theirs."""
    monitor = LoopMonitor(interval=INTERVAL, utilization=False)

    async def app() -> list[Any]:
        loop = asyncio.get_running_loop()
        selector: Any = loop._selector  # type: ignore[attr-defined]
        await asyncio.sleep(0.05)
        inner = selector.select
        selector.select = lambda timeout=None: inner(timeout)
        theirs = selector.select
        monitor.measure(UTILIZATION)
        await asyncio.sleep(0.1)
        first = read_lag(monitor).get("MainThread")
        await asyncio.sleep(0.1)
        assert vars(selector)["select"] is theirs
        return [first, read_lag(monitor)]

    monitor.start()
    try:
        first, later = asyncio.run(app())
    finally:
        monitor.stop()
    assert later == {}
    assert first is None or first.utilization is None, first


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


def test_utilisation_off_reads_delays_only() -> None:
    monitor = LoopMonitor(interval=INTERVAL, utilization=False)
    monitor.start()
    loop = asyncio.new_event_loop()

    async def app() -> tuple[bool, bool]:
        await asyncio.sleep(0.05)
        return hooked(loop), timed(monitor, loop)

    try:
        state = loop.run_until_complete(app())
        lag = read_lag(monitor)["MainThread"]
    finally:
        loop.close()
        monitor.stop()
    assert state == (True, False)
    assert lag.max is not None and lag.utilization is None
