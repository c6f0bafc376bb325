"""The probes of every loop (probes/loops/monitor.py): labels, windows, lifecycle, forks.

How a blocked loop reads: a virtual tick falls due every ``interval``. One
due while a callback blocks the loop from ``s`` for ``b`` seconds is read at
the loop's next ``select`` call, at ``s + b``: a tick due within the first
interval of the block reads at least ``b - interval``. At most, it reads as
late as a timer of the test's own beside the app ran, plus that timer's
period (support.loopapps.watched): the loop's own truth about how long it was
held up, whatever held it on a shared 2-core machine.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import logging
import os
import signal
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

import pytest

from opentelemetry.instrumentation.process.probes.loops import discovery, stalls
from opentelemetry.instrumentation.process.probes.loops.monitor import (
    DEFAULT_STALL,
    DELAYS,
    PARTS,
    STALLS,
    UTILIZATION,
    LoopMonitor,
    watch_loop,
)
from opentelemetry.instrumentation.process.probes.loops.window import Window

from .conftest import Records
from .support.forked import FORKS, in_child
from .support.gc import FREE_THREADED, collector_paused  # noqa: F401 - autouse
from .support.loopapps import (
    WATCH,
    LoopLag,
    Payload,
    blocked_loop,
    blocking_app,
    hooked,
    hooks_installed,
    idle_loop,
    in_loop,
    in_thread,
    loops_blocking,
    monitor_and_loop,
    monitor_fixture,
    package_handles,
    probe_of,
    read_lag,
    samples,
    uvloop,
    waiting_loop,
    watched,
)
from .support.waiting import eventually

INTERVAL = 0.01

monitor = monitor_fixture(INTERVAL)


def assert_blocked(lag: LoopLag, blocks: list[float], stalls: list[float], count: int) -> None:
    """The window of ``count`` delays of a loop blocked ``blocks`` times reads as said above."""
    assert lag.max is not None and lag.p99 is not None
    assert max(blocks) - INTERVAL <= lag.max <= max(stalls) + WATCH, (lag, blocks, max(stalls))
    assert lag.p99 <= lag.max
    if len(blocks) > count * 0.01:
        # Over 1 % of the samples are block lags: p99 is one (upper bound of its bucket).
        assert min(blocks) - INTERVAL <= lag.p99


def test_blocked_loop_reports_the_block_as_its_maximum_lag(monitor: LoopMonitor) -> None:
    """start() before any loop exists (the opentelemetry-instrument case), then asyncio.run."""
    blocks: list[float] = []
    stalls: list[float] = []
    t0 = time.monotonic()
    asyncio.run(watched(blocking_app(blocks), stalls)())
    ran = time.monotonic() - t0
    count = samples(monitor)
    got = read_lag(monitor)
    assert list(got) == ["MainThread"]
    lag = got["MainThread"]
    assert_blocked(lag, blocks, stalls, count)
    # One virtual tick per interval, from the loop's start to its last select.
    assert ran / INTERVAL / 2 <= count <= ran / INTERVAL + 1
    assert lag.p50 is not None and 0 <= lag.p50 < 0.2 / 2
    # Busy at least for its blocks, over a run no longer than the test's clock saw.
    assert lag.utilization is not None and sum(blocks) / ran <= lag.utilization < 1.0


def test_an_idle_loop_reads_no_later_than_it_woke(monitor: LoopMonitor) -> None:
    """Every tick due while it slept reads the lateness of its one wake, or less.

    The sleep's timer was due no earlier than ``t0 + 1``; the loop read its
    last tick before ``asyncio.run`` returned.
    """
    t0 = time.monotonic()
    asyncio.run(asyncio.sleep(1.0))
    late = time.monotonic() - t0 - 1.0
    count = samples(monitor)
    lag = read_lag(monitor)["MainThread"]
    assert lag.max is not None and lag.mean is not None and lag.p50 is not None
    assert 0 <= lag.mean <= lag.max <= late, (lag, late)
    assert lag.p50 <= lag.max
    assert 1.0 / INTERVAL - 1 <= count <= (1.0 + late) / INTERVAL + 1
    assert lag.utilization is not None and lag.utilization < 0.1


def test_read_starts_a_new_window_and_never_reports_zero_for_unknown(
    monitor: LoopMonitor,
) -> None:
    blocks: list[float] = []
    stalls: list[float] = []
    ready = threading.Event()
    release = threading.Event()

    async def app() -> None:
        await blocking_app(blocks, count=1)()
        await asyncio.sleep(0.05)  # the ticks of the block are read at the next select
        ready.set()
        while not release.is_set():
            await asyncio.sleep(0.05)

    thread = in_thread("app", lambda: asyncio.run(watched(app, stalls)()))
    assert ready.wait(10)
    count = samples(monitor, "app")
    first = read_lag(monitor)["app"]
    assert_blocked(first, blocks, stalls, count)
    since = len(stalls)
    time.sleep(0.3)
    second = read_lag(monitor)["app"]  # idle since the first read: the block is not in it
    assert second.max is not None and second.max <= max(stalls[since - 1 :]) + WATCH
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

    Each loop's upper bound is its own timer's: three loops and this thread
    share 2 cores with other jobs, and a loop thread can wait long for a core.
    """
    lengths = {"alpha": 0.05, "beta": 0.3, "gamma": 0.6}
    with loops_blocking(lengths) as seen:
        counts = {name: samples(monitor, name) for name in lengths}
        got = read_lag(monitor)  # from this thread, while the loops run
    assert sorted(got) == sorted(lengths)
    for name in lengths:
        assert_blocked(got[name], seen.blocks[name], seen.stalls[name], counts[name])


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
    """The loop past the cap is not hooked at all, and has no entry."""
    monitor = LoopMonitor(interval=INTERVAL, max_loops=1)
    monitor.start()
    ready = threading.Barrier(3)
    release = threading.Event()
    loops: list[asyncio.AbstractEventLoop] = []

    def body() -> None:
        async def app() -> None:
            loops.append(asyncio.get_running_loop())
            ready.wait()
            while not release.is_set():
                await asyncio.sleep(0.02)

        asyncio.run(app())

    threads = [in_thread("one", body), in_thread("two", body)]
    try:
        ready.wait(10)
        time.sleep(0.1)
        got = read_lag(monitor)
        on = sorted(hooked(loop) for loop in loops)
    finally:
        release.set()
        for thread in threads:
            thread.join(10)
        monitor.stop()
    assert len(got) == 1 and on == [False, True]


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
    stalls: list[float] = []
    asyncio.run(watched(blocking_app(blocks, count=1, block=0.1, tail=0.02), stalls)())
    asyncio.run(watched(lambda: asyncio.sleep(0.3), stalls)())
    count = samples(monitor)
    got = read_lag(monitor)
    assert list(got) == ["MainThread"]
    assert_blocked(got["MainThread"], blocks, stalls, count)


@pytest.mark.parametrize("way", ["asyncio.run", *(["uvloop.run"] if uvloop else [])])
def test_shutdown_leaves_no_task_handle_hook_or_warning(monitor: LoopMonitor, way: str) -> None:
    """asyncio.run returns at once: no task of ours, nothing in the loop, no warning."""
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
            left = package_handles(loop) if way == "asyncio.run" else []
            del loop
            gc.collect()
    finally:
        logging.getLogger("asyncio").removeHandler(records)
    assert seen["tasks"] == {seen["me"]}  # the probe is not a task
    assert left == []
    assert [str(w.message) for w in caught] == []
    assert [r.getMessage() for r in records.records if r.levelno >= logging.WARNING] == []


def test_a_stopped_loop_is_not_measured_while_stopped_and_resumes() -> None:
    stalls: list[float] = []
    with monitor_and_loop(INTERVAL) as (monitor, loop):
        loop.run_until_complete(asyncio.sleep(0.1))
        assert package_handles(loop) == [] and hooked(loop)  # paused, hook in place
        first = read_lag(monitor)["MainThread"]
        time.sleep(0.3)  # not running: neither a lag nor idle time
        t0 = time.monotonic()
        loop.run_until_complete(watched(lambda: asyncio.sleep(0.2), stalls)())
        ran = time.monotonic() - t0
        count = samples(monitor)
        second = read_lag(monitor)["MainThread"]
    assert first.max is not None and second.max is not None
    assert second.max <= max(stalls) + WATCH
    # The second window is the second run only: the 0.3 s stopped in between
    # would add 30 ticks, and read as 0.3 / 0.5 busy if counted as running.
    assert count <= ran / INTERVAL + 1
    assert second.utilization is not None and second.utilization < 0.2


def test_stop_inside_the_loop_takes_the_hook_off_at_once() -> None:
    monitor = LoopMonitor(interval=5.0)

    async def app() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        monitor.start()
        during = hooked(loop)
        monitor.stop()
        return during, hooked(loop)

    assert asyncio.run(app()) == (True, False)


def test_a_failing_probe_never_raises_into_the_loop(
    monitor: LoopMonitor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault injected where the hook records a delay: the app must never see it.

    No real fault of the probe's can be had on demand (it reads the clock,
    compares and adds); but the loop's ``select`` is the app's, and a fault of
    the probe's must not end the app's loop (never crash the host application).
    """

    def broken(window: Window, delay: float, count: int) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(Window, "add_many", broken)
    errors: list[dict[str, Any]] = []
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        loop.run_until_complete(asyncio.sleep(0.1))  # ticks fall due while it sleeps
        probes = list(monitor._probes)
        after = (hooked(loop), probe_of(monitor, loop))
        loop.run_until_complete(asyncio.sleep(0.05))  # and it runs on, unprobed
    finally:
        loop.close()
    assert errors == []
    # The fault detached the probe: off the loop for good.
    assert len(probes) == 1 and probes[0].dead and after == (False, None)


# --- the stalls part: one thread that names what holds a loop


def _watch_threads() -> set[int | None]:
    return {t.ident for t in threading.enumerate() if t.name == stalls.THREAD_NAME}


def test_the_stalls_part_runs_one_watch_thread_while_the_monitor_runs() -> None:
    before = _watch_threads()
    monitor = LoopMonitor(interval=INTERVAL, stalls=True)
    monitor.start()
    monitor.start()
    one = _watch_threads() - before
    monitor.stop()
    gone = eventually(lambda: not _watch_threads() - before)
    later = LoopMonitor(interval=INTERVAL)
    later.start()
    none = _watch_threads() - before
    later.measure(STALLS)  # asked for while it runs: starts at once
    measured = _watch_threads() - before
    later.stop()
    assert len(one) == 1 and gone and none == set() and len(measured) == 1


def _held(blocks: list[float]) -> None:
    t0 = time.monotonic()
    time.sleep(0.2)  # holds its loop: the function the watch names
    blocks.append(time.monotonic() - t0)


def _wakes(thread_id: int) -> int:
    """The thread's voluntary context switches, the OS's count of its sleeps that ended."""
    status = Path(f"/proc/self/task/{thread_id}/status").read_text()
    return int(next(x for x in status.splitlines() if x.startswith("voluntary_ctxt")).split()[1])


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_a_stall_is_named_while_it_lasts_and_the_watch_parks_while_loops_sleep() -> None:
    monitor = LoopMonitor(interval=INTERVAL, stall=0.05, stalls=True)
    blocks: list[float] = []
    monitor.start()
    try:
        with waiting_loop("held") as loop:
            in_loop(loop, lambda: _held(blocks))
            in_loop(loop, lambda: None, after=0.05)  # its next select has ended the stall
            got, again = monitor.read_stalls(), monitor.read_stalls()
            parked = eventually(lambda: monitor._watch.parked)  # the loop sleeps: no wake due
            (watch,) = [t for t in threading.enumerate() if t.name == stalls.THREAD_NAME]
            assert watch.native_id is not None
            time.sleep(0.1)  # the flag is up just before it blocks: a switch the OS counts
            wakes = _wakes(watch.native_id)
            time.sleep(0.5)
            woken = _wakes(watch.native_id) - wakes
    finally:
        monitor.stop()
    (stall,) = got["held"]
    assert stall.seconds >= blocks[0] and again == {} and parked and woken == 0
    if FREE_THREADED:  # another thread's frames change while they are read: no name
        assert (stall.code, stall.context) == (None, None)
    else:
        assert stall.code == f"{__name__}._held", stall.code
        assert isinstance(stall.context, contextvars.Context)  # the task's, for its span


def test_bad_options_name_the_option() -> None:
    with pytest.raises(ValueError, match=r"interval must be 0\.001 to 10 seconds; got 0"):
        LoopMonitor(interval=0)
    with pytest.raises(ValueError, match="interval must be a number of seconds; got 'x"):
        LoopMonitor(interval="x" * 100)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"stall must be 0\.001 to 60 seconds; got 61"):
        LoopMonitor(stall=61)
    with pytest.raises(ValueError, match="stall must be a number of seconds; got True"):
        LoopMonitor(stall=True)
    with pytest.raises(ValueError, match="max_loops must be an int >= 1; got 0"):
        LoopMonitor(max_loops=0)
    assert LoopMonitor().stall == DEFAULT_STALL == 0.1


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
    finally:
        monitor.stop()
    assert list(got) == ["second"]
    assert got["second"].max is not None


def test_labels_stay_unique_among_live_loops_and_a_closed_one_gives_way() -> None:
    """A watched loop blocked since before (no select yet: unknown, not 0), a closed one
    of another name, a live one of the same name."""
    monitor = LoopMonitor(interval=INTERVAL)
    try:
        with blocked_loop("blocked") as (loop, _):
            monitor.start()
            watch_loop(loop)  # begun now, from this thread, named after its own
            in_thread("x", lambda: asyncio.run(asyncio.sleep(0.05))).join(10)  # closed, unread
            with idle_loop("w"):
                in_thread("w", lambda: asyncio.run(asyncio.sleep(0.05))).join(10)
                time.sleep(2 * INTERVAL)  # the first "w" has ticks due too
                got = read_lag(monitor)
    finally:
        monitor.stop()
    # The second "w" loop ran while the first still did: a label of its own.
    assert sorted(got) == ["blocked", "w", "w#2", "x"]
    assert got["blocked"].max is None
    assert all(got[label].max is not None for label in ("w", "w#2", "x"))


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

    asyncio.run(block(0.3))
    asyncio.run(block(0.1))  # a new loop, probed from its start under the same name
    count = samples(monitor)
    got = read_lag(monitor)
    assert list(got) == ["MainThread"]
    lag = got["MainThread"]
    # The longer block was the closed loop's: its window is merged into the series.
    assert lag.max is not None and lag.max >= blocks[0] - INTERVAL
    assert count >= 2  # at least the two block lags, one per loop
    assert read_lag(monitor) == {}


def test_a_closed_loop_and_a_new_one_under_one_numbered_label_are_read_as_one(
    monitor: LoopMonitor,
) -> None:
    """Threads of one name: while the first's loop lives, the others are ``T#2``. A closed
    ``T#2`` is not handed over to the next (its name is ``T``'s), so one read finds both
    under ``T#2``: its delays are the two loops' together, the longer block the closed one's."""
    blocks: list[float] = []
    with idle_loop("T"):
        time.sleep(INTERVAL * 3)  # begun: "T" is taken
        for seconds in (0.3, 0.1):
            with idle_loop("T") as loop:
                in_loop(loop, lambda s=seconds: _block(blocks, s), after=INTERVAL * 2)  # type: ignore[misc]
                time.sleep(INTERVAL * 3)  # its next select reads the ticks of the block
        got = read_lag(monitor)
    assert sorted(got) == ["T", "T#2"]
    lag = got["T#2"]
    assert lag.max is not None and lag.max >= blocks[0] - INTERVAL, (blocks, lag)


def _block(blocks: list[float], seconds: float) -> None:
    t0 = time.monotonic()
    time.sleep(seconds)
    blocks.append(time.monotonic() - t0)


def _message(value: object) -> str:
    with pytest.raises(ValueError) as caught:
        LoopMonitor(interval=value)  # type: ignore[arg-type]
    return str(caught.value)


def test_a_bad_value_is_quoted_whole_up_to_40_characters_then_cut() -> None:
    fits, over = "x" * 38, "y" * 39
    assert len(repr(fits)) == 40 and len(repr(over)) == 41
    assert _message(fits) == f"interval must be a number of seconds; got {fits!r}"
    assert _message(over) == "interval must be a number of seconds; got '" + "y" * 34 + "...)'"


def test_neither_start_nor_stop_keeps_the_callers_context() -> None:
    """Started in one context, stopped from another thread in another: both go."""
    var: contextvars.ContextVar[Payload] = contextvars.ContextVar("var")
    with monitor_and_loop(INTERVAL) as (monitor, loop):
        payload = Payload()
        ref = weakref.ref(payload)
        token = var.set(payload)
        loop.run_until_complete(asyncio.sleep(0.1))  # started here, read many ticks
        stopper = in_thread("stopper", monitor.stop)
        stopper.join(10)
        var.reset(token)
        del payload
        gc.collect()
        assert ref() is None
        assert package_handles(loop) == [] and not hooked(loop)
        loop.run_until_complete(asyncio.sleep(0))  # runs on, as without the probe


def test_stop_after_the_loop_closed_does_not_raise() -> None:
    monitor = LoopMonitor(interval=INTERVAL)
    monitor.start()
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.sleep(0.05))
        loop.close()
        monitor.stop()
        assert not monitor.started
        assert monitor._probes == ()
    finally:
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
    with pytest.raises(
        ValueError, match="part must be one of delays, utilization, stalls; got 'lag'"
    ):
        monitor.measure("lag")
    monitor.measure(UTILIZATION)
    monitor.measure(UTILIZATION)
    assert monitor.parts == {UTILIZATION}
    monitor.measure(STALLS)
    assert monitor.parts == {UTILIZATION, STALLS} and PARTS == (DELAYS, UTILIZATION, STALLS)


def test_measure_delays_later_begins_the_ticks_of_a_loop_probed_already() -> None:
    """Utilisation first (its hook on), the delays added while the loop runs."""
    monitor = LoopMonitor(interval=INTERVAL, delays=False)
    blocks: list[float] = []
    stalls: list[float] = []

    async def app() -> tuple[Any, Any]:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.05)
        before = (hooked(loop), read_lag(monitor)["MainThread"].max)
        monitor.measure(DELAYS)
        await blocking_app(blocks, count=1, block=0.1, idle=0.05, tail=0.02)()
        return before, read_lag(monitor)["MainThread"]

    monitor.start()
    try:
        before, lag = asyncio.run(watched(app, stalls)())
    finally:
        monitor.stop()
    assert before == (True, None)
    assert lag.max is not None and blocks[0] - INTERVAL <= lag.max <= max(stalls) + WATCH


# --- fork


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("fork", list(FORKS))
def test_fork_forgets_the_parents_loops(monitor: LoopMonitor, fork: str) -> None:
    def body() -> dict[str, Any]:
        at_fork = sorted(read_lag(monitor))
        blocks: list[float] = []
        stalls: list[float] = []
        asyncio.run(watched(blocking_app(blocks, count=1, block=0.1, tail=0.02), stalls)())
        got = read_lag(monitor)
        result: dict[str, Any] = {"at_fork": at_fork, "labels": sorted(got), "blocks": blocks}
        result["max"] = got["MainThread"].max if "MainThread" in got else None
        result["stalls"] = max(stalls)
        return result

    with idle_loop("parent-loop"):
        time.sleep(0.1)
        child = in_child(body, fork=FORKS[fork])
        parent = read_lag(monitor)
    assert "error" not in child, child
    assert child["at_fork"] == []  # the parent's loop is not the child's
    assert child["labels"] == ["MainThread"]
    assert max(child["blocks"]) - INTERVAL <= child["max"] <= child["stalls"] + WATCH, child
    assert "parent-loop" in parent and parent["parent-loop"].max is not None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("fork", list(FORKS))
def test_the_pid_checks_renew_the_locks_and_forget_the_parents_loops(
    monitor: LoopMonitor, fork: str
) -> None:
    """The one fork mechanism of the monitor and of the hooks, with or without Python's hooks.

    Only that: the hooks stay installed, and the child's loops are probed as before.
    """
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.sleep(0.05))  # probed, stopped, still open
        watch_loop(loop)
        parent = {"hooks": discovery.hooks.lock, "monitor": monitor._lock}
        probes = monitor._probes
        assert len(probes) == 1 and len(discovery.hooks.watched) == 1

        def body() -> dict[str, Any]:
            got = read_lag(monitor)  # the monitor's entry point
            own = asyncio.new_event_loop()
            watch_loop(own)  # the hooks' entry point
            asyncio.run(asyncio.sleep(0.05))
            labels = sorted(read_lag(monitor))
            return {
                "read": sorted(got),
                "hooks_lock": discovery.hooks.lock is not parent["hooks"],
                "monitor_lock": monitor._lock is not parent["monitor"],
                "watched": [x is own for x in discovery.hooks.watched],
                "probes": len(monitor._probes),
                "dead": all(p.dead for p in probes),
                "unhooked": not hooked(loop),
                "installed": hooks_installed() != [],
                "labels": labels,
            }

        child = in_child(body, fork=FORKS[fork])
    finally:
        loop.close()
    assert child == {
        "read": [],
        "hooks_lock": True,
        "monitor_lock": True,
        "watched": [True],
        "probes": 0,  # the child's own loop, closed and read: forgotten too
        "dead": True,
        "unhooked": True,
        "installed": True,
        "labels": ["MainThread"],
    }
    assert len(monitor._probes) == 1 and not monitor._probes[0].dead  # the parent's, kept
    assert len(discovery.hooks.watched) == 1


def _child_report(write_end: int, result: dict[str, Any]) -> None:
    os.write(write_end, json.dumps(result).encode())
    os._exit(0)


def _wait_child(pid: int, read_end: int) -> dict[str, Any]:
    with os.fdopen(read_end, "rb") as f:
        child: dict[str, Any] = json.loads(f.read() or b"{}")
    _, status = os.waitpid(pid, 0)
    child["status"] = (os.WIFEXITED(status), os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1)
    return child


def _fork_from_the_loop(
    monitor: LoopMonitor, fork: str, *, hold_probe_lock: bool
) -> dict[str, Any]:
    """A loop forks from its own callback; the child runs it on, then reports.

    With ``hold_probe_lock``, another thread holds the probe's lock across the
    fork (as the exporter's thread does while it takes the probe's window):
    which lock a thread holds at the instant of a fork cannot be arranged for
    real otherwise.
    """
    parent_pid = os.getpid()
    read_end, write_end = os.pipe()

    async def app() -> int:
        loop = asyncio.get_running_loop()
        selector = loop._selector  # type: ignore[attr-defined]
        await asyncio.sleep(0.1)
        probe = probe_of(monitor, loop)
        assert probe is not None
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with probe.lock:
                held.set()
                release.wait(20)

        holder = in_thread("reader", hold) if hold_probe_lock else None
        assert holder is None or held.wait(10)
        pid = FORKS[fork]()
        if pid:
            release.set()
            if holder is not None:
                holder.join(10)
            return pid
        try:  # child: the loop runs on from here, its ticks fall due
            signal.alarm(10)
            done = loop.create_future()

            def before_read() -> None:
                loop.call_later(0.05, after_read, hooked(loop), len(package_handles(loop)))

            def after_read(was: bool, handles: int) -> None:
                labels = sorted(read_lag(monitor))
                report = {
                    "hooked before a read": was,
                    "handles": handles,
                    "hooked after": "select" in vars(selector),
                    "labels": labels,
                }
                _child_report(write_end, report)

            loop.call_later(3 * INTERVAL, before_read)
            await done  # never done: after_read() ends the child
        finally:
            os._exit(1)
        return 0  # pragma: no cover - unreachable

    try:
        pid = asyncio.run(app())
    finally:
        if os.getpid() != parent_pid:  # pragma: no cover - a child never goes on
            os._exit(2)
    os.close(write_end)
    return _wait_child(pid, read_end)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("fork", list(FORKS))
def test_a_loop_forked_from_its_own_callback_runs_on_in_the_child_and_is_forgotten_there(
    monitor: LoopMonitor, fork: str
) -> None:
    """The parent's probe goes at its first slow path in the child (its pid check), before
    any read: it takes no lock there, and measures nothing of the child's."""
    child = _fork_from_the_loop(monitor, fork, hold_probe_lock=False)
    assert child == {
        "hooked before a read": False,
        "handles": 0,
        "hooked after": False,
        "labels": [],
        "status": (True, 0),
    }
    assert read_lag(monitor)["MainThread"].max is not None  # the parent goes on


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("fork", list(FORKS))
def test_a_probe_lock_held_by_another_thread_at_the_fork_does_not_hang_the_forked_loop(
    monitor: LoopMonitor, fork: str
) -> None:
    child = _fork_from_the_loop(monitor, fork, hold_probe_lock=True)
    assert child["status"] == (True, 0), child  # killed by its alarm if it hung
    assert child["labels"] == []


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("fork", list(FORKS))
def test_the_watch_starts_again_in_a_child_only_where_its_threads_are_its_own(fork: str) -> None:
    """After Python's fork the child's watch thread starts again; after one from C (uWSGI's),
    where the parent's threads are still listed and ``sys._current_frames()`` would walk them,
    it does not: the child's stalls are then kept without a name."""
    monitor = LoopMonitor(interval=INTERVAL, stalls=True)
    monitor.start()

    def body() -> dict[str, Any]:
        monitor.read_delays()  # an entry point: the pid check finds the fork
        tasks = set(os.listdir("/proc/self/task"))
        live = [
            t
            for t in threading.enumerate()
            if t.name == stalls.THREAD_NAME and str(t.native_id) in tasks
        ]
        return {"watching": len(live)}

    try:
        child = in_child(body, fork=FORKS[fork])
    finally:
        monitor.stop()
    assert child == {"watching": 1 if fork == "os.fork" else 0}, child
