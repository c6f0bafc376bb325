"""Finding loops (probes/loops/discovery.py): the hook on loop start, and ``watch_loop``.

The hook wraps ``asyncio._set_running_loop``, the one private asyncio API the
package touches. These tests run on every Python of the matrix: a Python
that stopped calling it would fail them.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import contextvars
import gc
import json
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import opentelemetry.instrumentation.process as package
from opentelemetry.instrumentation.process.probes.loops import discovery
from opentelemetry.instrumentation.process.probes.loops.monitor import LoopMonitor, watch_loop

from .support import loopapps
from .support.gc import collector_paused, gc_off  # noqa: F401 - autouse
from .support.loopapps import (
    WATCH,
    WitnessLoop,
    asleep,
    blocked_loop,
    blocking_app,
    hooked,
    hooks_installed,
    in_loop,
    in_thread,
    package_handles,
    probe_of,
    read_lag,
    uvloop,
    waiting_loop,
    watched,
)
from .support.waiting import eventually

needs_uvloop = pytest.mark.skipif(uvloop is None, reason="uvloop is not installed")

INTERVAL = 0.01

monitor = loopapps.monitor_fixture(INTERVAL)


def assert_blocked_max(top: float | None, blocks: list[float], stalls: list[float]) -> None:
    """At least the block less one interval; at most the loop's own longest stall (loopapps)."""
    assert top is not None
    assert max(blocks) - INTERVAL <= top <= max(stalls) + WATCH, (top, blocks, max(stalls))


# --- the hook


def test_the_hook_is_asyncios_set_running_loop_wrapped(monitor: LoopMonitor) -> None:
    """What asyncio's loops call when they start is ours, and ours calls asyncio's."""
    import asyncio.base_events

    ours = asyncio.events._set_running_loop
    original = ours.__wrapped__  # type: ignore[attr-defined]
    assert original.__module__ in ("asyncio.events", "_asyncio")
    assert asyncio._set_running_loop is not original  # type: ignore[attr-defined]
    assert asyncio._set_running_loop.__wrapped__ is original  # type: ignore[attr-defined]
    # BaseEventLoop reaches it through the events module, at each call: not a
    # name bound at import, which the wrapper would not replace.
    assert asyncio.base_events.events is asyncio.events
    assert "_set_running_loop" not in vars(asyncio.base_events)
    seen: list[object] = []

    async def app() -> None:
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0.05)

    asyncio.run(app())
    assert len(seen) == 1
    assert read_lag(monitor)["MainThread"].max is not None


Way = Callable[[Coroutine[Any, Any, None]], None]


def _until_complete(new_loop: Callable[[], asyncio.AbstractEventLoop]) -> Way:
    """Run a coroutine on a loop made by ``new_loop``, then close it."""

    def run(coro: Coroutine[Any, Any, None]) -> None:
        loop = new_loop()
        try:
            loop.run_until_complete(coro)
        finally:
            loop.close()

    return run


def _asyncio_ways() -> dict[str, Way]:

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
        "new_event_loop+run_until_complete": _until_complete(asyncio.new_event_loop),
        "new_event_loop+run_forever": loop_run_forever,
    }
    if sys.version_info >= (3, 11):

        def runner(coro: Coroutine[Any, Any, None]) -> None:
            with asyncio.Runner() as r:
                r.run(coro)

        def runner_with_factory(coro: Coroutine[Any, Any, None]) -> None:
            with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as r:
                r.run(coro)

        ways["asyncio.Runner"] = runner
        ways["asyncio.Runner(loop_factory)"] = runner_with_factory
    return ways


def _uvloop_ways() -> dict[str, Way]:
    if uvloop is None:
        return {}

    def policy(coro: Coroutine[Any, Any, None]) -> None:
        previous = asyncio.get_event_loop_policy()
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        try:
            asyncio.run(coro)
        finally:
            asyncio.set_event_loop_policy(previous)

    ways = {
        "uvloop.run": uvloop.run,
        "uvloop.EventLoopPolicy": policy,
        "uvloop.new": _until_complete(uvloop.new_event_loop),
    }
    if sys.version_info >= (3, 11):

        def runner(coro: Coroutine[Any, Any, None]) -> None:
            # What uvicorn --loop uvloop does on 3.11+.
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as r:
                r.run(coro)

        ways["asyncio.Runner(uvloop)"] = runner
    return ways


@pytest.mark.parametrize("way", list(_asyncio_ways()))
def test_every_way_to_run_an_asyncio_loop_is_probed(monitor: LoopMonitor, way: str) -> None:
    """The block reads as the block, and no longer than the loop was really held up.

    The upper bound is the loop's own longest stall, seen by a timer of the
    test's beside the app, not the block plus a slack: in a full run the
    process can be held up longer than the slack by other things (another
    thread holding the GIL, a machine too busy to run it), which the probe
    rightly reports. The garbage collector is off: a full collection of the
    test session's heap is such a stall too.
    """
    run = _asyncio_ways()[way]
    blocks: list[float] = []
    stalls: list[float] = []
    with gc_off():
        run(watched(blocking_app(blocks, count=1, block=0.1, tail=0.02), stalls)())
    lag = read_lag(monitor)["MainThread"]
    assert_blocked_max(lag.max, blocks, stalls)
    assert lag.p99 is not None and lag.p99 <= lag.max  # type: ignore[operator]
    assert lag.utilization is not None


@pytest.mark.parametrize("way", list(_uvloop_ways()))
def test_every_way_to_run_a_uvloop_loop_runs_unprobed(monitor: LoopMonitor, way: str) -> None:
    """uvloop runs its loop in C, on a clock of its own: not probed, and nothing of it wrapped."""
    assert uvloop is not None
    before = dict(vars(uvloop.Loop))
    blocks: list[float] = []
    _uvloop_ways()[way](blocking_app(blocks, count=1, block=0.05, idle=0.05)())
    assert len(blocks) == 1  # it ran
    assert (read_lag(monitor), monitor._probes) == ({}, ())
    assert dict(vars(uvloop.Loop)) == before


def test_the_matrix_runs_every_way_there_is() -> None:
    """asyncio.Runner exists from 3.11: its ways are tested wherever it does."""
    ways = set(_asyncio_ways())
    assert ("asyncio.Runner" in ways) == hasattr(asyncio, "Runner")
    assert ("asyncio.Runner(loop_factory)" in ways) == hasattr(asyncio, "Runner")


UVLOOP_AFTER_START = """
import asyncio, json
from opentelemetry.instrumentation.process.probes.loops import discovery
from opentelemetry.instrumentation.process.probes.loops.monitor import LoopMonitor
monitor = LoopMonitor(interval={interval})
monitor.start()
import uvloop  # after start(): uvloop binds the wrapped asyncio._set_running_loop
before = dict(vars(uvloop.Loop))
async def app():
    await asyncio.sleep(0.1)
    return "ran"
ran = uvloop.run(app())
delays = monitor.read_delays()
during = [(o.__name__, n) for o, n, _, _ in discovery.hooks.installed]
untouched = dict(vars(uvloop.Loop)) == before
monitor.stop()
hooks = [(o.__name__, n) for o, n, _, _ in discovery.hooks.installed]
print(json.dumps({{"ran": ran, "delays": list(delays), "during": during, "hooks": hooks,
                  "untouched": untouched}}))
"""


@needs_uvloop
def test_uvloop_imported_after_start_runs_unprobed() -> None:
    """Through the wrapped asyncio hook it binds: the loop is seen, and left alone."""
    script = UVLOOP_AFTER_START.format(interval=INTERVAL)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    got = json.loads(out.stdout)
    assert got == {
        "ran": "ran",
        "delays": [],
        "during": [["asyncio.events", "_set_running_loop"], ["asyncio", "_set_running_loop"]],
        "hooks": [],
        "untouched": True,
    }
    assert out.stderr == ""


def test_hooks_installed_names_each_hook_while_a_monitor_runs(monitor: LoopMonitor) -> None:
    """asyncio's two names of _set_running_loop; nothing of uvloop's."""
    expected = [("asyncio.events", "_set_running_loop"), ("asyncio", "_set_running_loop")]
    assert hooks_installed() == expected
    assert asyncio.events._set_running_loop.__wrapped__ is not None  # type: ignore[attr-defined]


def test_a_hooks_registry_installs_and_removes_its_hooks() -> None:
    original = asyncio.events._set_running_loop
    hooks = discovery.Hooks()
    lock = hooks.lock
    assert hooks._locked() is lock  # same process: the same lock
    monitor = LoopMonitor(interval=INTERVAL)
    hooks.add(monitor)
    try:
        assert asyncio.events._set_running_loop is not original
        assert [name for _, name, _, _ in hooks.installed].count("_set_running_loop") == 2
    finally:
        hooks.discard(monitor)
    assert asyncio.events._set_running_loop is original
    assert hooks.installed == [] and hooks.watchers == ()


def test_a_hook_wrapped_again_by_someone_else_stays_and_the_others_go() -> None:
    events_original = asyncio.events._set_running_loop
    asyncio_original = asyncio._set_running_loop  # type: ignore[attr-defined]
    monitor = LoopMonitor(interval=INTERVAL)
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
        assert hooks_installed() == []
    finally:
        asyncio._set_running_loop = asyncio_original  # type: ignore[attr-defined]


def test_stop_from_another_thread_leaves_no_hook_anywhere() -> None:
    """The loop's select is its own again at once, the asyncio hooks go; the loop runs on."""
    originals = (
        asyncio.events._set_running_loop,
        asyncio._set_running_loop,  # type: ignore[attr-defined]
        asyncio.get_event_loop_policy(),
    )
    monitor = LoopMonitor(interval=INTERVAL)
    monitor.start()
    assert asyncio.events._set_running_loop is not originals[0]
    with waiting_loop("loop") as loop:  # no timer of the app's own
        assert eventually(lambda: asleep(monitor, loop))
        during = (hooked(loop), package_handles(loop))
        monitor.stop()  # from another thread than the loop's
        after_stop = hooked(loop)
        after = in_loop(loop, lambda: (hooked(loop), package_handles(loop)), after=0.01)
    assert (during, after_stop, after) == ((True, []), False, (False, []))
    assert asyncio.events._set_running_loop is originals[0]
    assert asyncio._set_running_loop is originals[1]  # type: ignore[attr-defined]
    assert asyncio.get_event_loop_policy() is originals[2]
    assert hooks_installed() == []


def test_two_monitors_share_the_hooks() -> None:
    original = asyncio.events._set_running_loop
    a, b = LoopMonitor(interval=INTERVAL), LoopMonitor(interval=INTERVAL)
    a.start()
    b.start()
    a.stop()
    assert asyncio.events._set_running_loop is not original  # b still runs
    asyncio.run(asyncio.sleep(0.1))
    assert read_lag(b)["MainThread"].max is not None
    assert read_lag(a) == {}
    b.stop()
    assert asyncio.events._set_running_loop is original


def test_a_second_monitor_leaves_a_loop_the_first_one_probes_alone() -> None:
    """The first one's hook is on the selector: someone else's select, for the second."""
    first, second = LoopMonitor(interval=INTERVAL), LoopMonitor(interval=INTERVAL)
    first.start()
    second.start()
    try:
        asyncio.run(asyncio.sleep(0.1))
        got = (list(read_lag(first)), read_lag(second))
    finally:
        first.stop()
        second.stop()
    assert got == (["MainThread"], {})


@pytest.mark.parametrize("hook", ["loop_started", "loop_stopped"])
def test_a_failing_hook_never_breaks_the_loops_start_or_stop(hook: str) -> None:
    """A fault injected into the monitor's hook: the loop starts, runs and stops as ever."""
    monitor = LoopMonitor(interval=INTERVAL)
    monitor.start()

    def fail(loop: asyncio.AbstractEventLoop) -> None:
        raise RuntimeError("injected")

    setattr(monitor, hook, fail)  # the fault, injected
    try:
        results = [asyncio.run(asyncio.sleep(0.05, result=n)) for n in range(2)]  # normally
        got = read_lag(monitor)
    finally:
        monitor.stop()
    assert results == [0, 1]
    # Not begun, nothing read; or begun and never paused: read as a loop that worked.
    assert list(got) == ([] if hook == "loop_started" else ["MainThread"])


# --- loops running before start(): this thread's, watched ones, and the others


def test_start_inside_a_running_loop_probes_it_at_once() -> None:
    monitor = LoopMonitor(interval=INTERVAL)
    blocks: list[float] = []
    stalls: list[float] = []

    async def app() -> tuple[bool, Any]:
        monitor.start()
        on = hooked(asyncio.get_running_loop())
        await blocking_app(blocks, count=1, idle=0.1, tail=0.05)()
        return on, read_lag(monitor)["MainThread"]

    try:
        on, lag = asyncio.run(watched(app, stalls)())
    finally:
        monitor.stop()
    assert on
    assert_blocked_max(lag.max, blocks, stalls)


def test_start_scans_no_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loops of other threads are not searched for: start() costs nothing per object."""

    def no_scan() -> list[Any]:  # the fault, injected: a heap scan would fail the test
        raise AssertionError("gc.get_objects() called")

    running, release = threading.Event(), threading.Event()

    async def app() -> None:
        running.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)

    thread = in_thread("elsewhere", lambda: asyncio.run(app()))
    monitor = LoopMonitor(interval=INTERVAL)
    try:
        assert running.wait(10)
        monkeypatch.setattr(gc, "get_objects", no_scan)
        monitor.start()
        time.sleep(0.1)
        got = read_lag(monitor)
    finally:
        release.set()
        thread.join(10)
        monitor.stop()
    assert got == {}  # running before start(), not watched: not probed


def test_a_loop_running_elsewhere_is_found_when_it_next_starts() -> None:
    release, running = threading.Event(), threading.Event()
    first_run, second_run = threading.Event(), threading.Event()
    blocks: list[float] = []
    stalls: list[float] = []

    def body() -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.call_soon(running.set)  # once it runs
            loop.run_until_complete(loop.run_in_executor(None, release.wait, 10))
            first_run.set()
            app = blocking_app(blocks, count=1, block=0.1, idle=0.1, tail=0.05)
            loop.run_until_complete(watched(app, stalls)())
            second_run.set()
        finally:
            loop.close()

    thread = in_thread("restarts", body)
    monitor = LoopMonitor(interval=INTERVAL)
    try:
        assert running.wait(10)  # not a fixed sleep: a loaded host may start it later
        monitor.start()  # the loop runs: not seen now
        before = read_lag(monitor)
        release.set()
        thread.join(10)
        got = read_lag(monitor)
    finally:
        release.set()
        monitor.stop()
    assert before == {}
    assert first_run.is_set() and second_run.is_set()
    assert_blocked_max(got["restarts"].max, blocks, stalls)


def _watched_apps(
    order: str, blocks: dict[str, list[float]], stalls: dict[str, list[float]]
) -> dict[str, Any]:
    """Loops a and b run in their threads, then ``watch_loop()`` each, then each blocks once.

    Each is awake (a timer of the test's every 2 ms) when it is handed over.
    """
    started = threading.Barrier(3)
    watching = threading.Event()
    loops: dict[str, asyncio.AbstractEventLoop] = {}

    def body(name: str, block: float) -> None:
        async def app() -> None:
            loops[name] = asyncio.get_running_loop()
            started.wait()
            while not watching.is_set():  # the monitor starts meanwhile
                await asyncio.sleep(0.01)
            await blocking_app(blocks[name], count=1, block=block, idle=0.1)()
            await asyncio.sleep(0.1)

        asyncio.run(watched(app, stalls[name])())

    threads = [in_thread("a", lambda: body("a", 0.1)), in_thread("b", lambda: body("b", 0.25))]
    started.wait()
    monitor = LoopMonitor(interval=INTERVAL)
    if order == "watch before start":
        for loop in loops.values():
            package.watch_loop(loop)
    monitor.start()
    if order == "watch after start":
        for loop in loops.values():
            package.watch_loop(loop)
    watching.set()
    try:
        for thread in threads:
            thread.join(10)
        return read_lag(monitor)
    finally:
        monitor.stop()


@pytest.mark.parametrize("order", ["watch after start", "watch before start"])
def test_watch_loop_probes_loops_running_in_other_threads(order: str) -> None:
    """Each one begins at once, from the caller's thread: nothing is put in its queue."""
    blocks: dict[str, list[float]] = {"a": [], "b": []}
    stalls: dict[str, list[float]] = {"a": [], "b": []}
    got = _watched_apps(order, blocks, stalls)
    assert sorted(got) == ["a", "b"]
    assert_blocked_max(got["a"].max, blocks["a"], stalls["a"])
    assert_blocked_max(got["b"].max, blocks["b"], stalls["b"])
    assert got["a"].utilization is not None


def test_a_loop_watched_while_it_sleeps_reads_no_delay_for_that_sleep() -> None:
    monitor = LoopMonitor(interval=INTERVAL)
    holder: dict[str, Any] = {}
    ready = threading.Event()

    async def app() -> None:
        holder["loop"] = asyncio.get_running_loop()
        ready.set()
        t0 = time.monotonic()
        await asyncio.sleep(1.0)  # asleep in its own select when watched
        holder["late"] = time.monotonic() - t0 - 1.0
        await asyncio.sleep(0.05)  # through the hook now

    thread = in_thread("idle", lambda: asyncio.run(app()))
    try:
        assert ready.wait(10)  # running before start(): found by watch_loop() only
        monitor.start()
        time.sleep(0.1)
        watch_loop(holder["loop"])
        thread.join(10)
        lag = read_lag(monitor)["idle"]
    finally:
        monitor.stop()
    # Its one wake was this late; the 50 ms sleep after it is a few ms at most.
    assert lag.max is not None and lag.max <= holder["late"] + 0.05, (lag, holder["late"])


def test_watch_loop_of_this_threads_loop_or_of_a_stopped_one_adds_no_second_probe() -> None:
    """A stopped loop is found by the hook when it runs; this thread's, by the hook too."""
    monitor = LoopMonitor(interval=INTERVAL)
    monitor.start()
    loop = asyncio.new_event_loop()

    async def app() -> bool:
        watch_loop(asyncio.get_running_loop())
        on = hooked(asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        return on

    try:
        watch_loop(loop)  # not running: nothing to do now
        on = loop.run_until_complete(app())
        probes = len(monitor._probes)
        got = read_lag(monitor)
    finally:
        loop.close()
        monitor.stop()
    assert (on, probes) == (True, 1)  # one probe
    assert got["MainThread"].max is not None


def test_watch_loop_takes_only_a_loop() -> None:
    with pytest.raises(ValueError, match="loop must be an asyncio event loop; got 42"):
        watch_loop(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"got 'x{34}\.\.\.\)'$"):
        watch_loop("x" * 100)  # type: ignore[arg-type]
    assert package.watch_loop is watch_loop and "watch_loop" in package.__all__


def test_a_watched_loop_is_held_weakly() -> None:
    loop = asyncio.new_event_loop()
    ref = weakref.ref(loop)
    watch_loop(loop)
    loop.close()
    del loop
    gc.collect()
    assert ref() is None
    assert ref not in [weakref.ref(x) for x in discovery.hooks.watched]


def test_a_watched_loop_is_begun_at_once_without_the_watchers_context() -> None:
    """Even while it blocks: nothing of the probe's waits in its queue for it to run.

    Handed over from another thread, a loop is measured from its first select
    through the hook (it may have been asleep in one of its own): the block it
    was in then is not read; a block after it is.
    """
    var: contextvars.ContextVar[loopapps.Payload] = contextvars.ContextVar("var")
    found = LoopMonitor(interval=INTERVAL)
    payload = loopapps.Payload()
    ref = weakref.ref(payload)
    token = var.set(payload)
    blocks: list[float] = []

    def block() -> bool:
        t0 = time.monotonic()
        time.sleep(0.05)
        blocks.append(time.monotonic() - t0)
        return hooked(loop)

    try:
        with blocked_loop("elsewhere") as (loop, release):
            found.start()
            t0 = time.monotonic()
            watch_loop(loop)
            on, ours = hooked(loop), package_handles(loop)
            var.reset(token)
            del payload
            gc.collect()
            kept = ref() is not None
            time.sleep(0.5)  # ticks would fall due while it blocks: not read
            release.set()
            first = time.monotonic() - t0
            after = in_loop(loop, block, after=0.05)
            in_loop(loop, lambda: None, after=0.05)  # its next select reads the second block
            got = read_lag(found)
    finally:
        found.stop()
    assert (kept, on, ours, after) == (False, True, [], True)
    lag = got["elsewhere"]
    # At least the second block less a tick; far below the first (about 0.5 s).
    assert lag.max is not None and blocks[0] - INTERVAL <= lag.max < first / 2, (lag, blocks)
    # A selector loop: its select is timed, as for a loop that starts later.
    assert lag.utilization is not None and 0.0 <= lag.utilization <= 1.0


def test_watched_and_stopped_while_it_blocks_a_loop_keeps_nothing_of_the_probes() -> None:
    monitor = LoopMonitor(interval=INTERVAL)
    try:
        with blocked_loop("blocked") as (loop, release):
            monitor.start()
            watch_loop(loop)
            during = hooked(loop)
            monitor.stop()
            release.set()
            after = in_loop(loop, lambda: (hooked(loop), package_handles(loop)), after=0.05)
    finally:
        monitor.stop()
    assert (during, after) == (True, (False, []))


def test_watch_loop_puts_nothing_in_the_watched_loops_queues() -> None:
    """A loop of the test's notes every handle it is given, and calls from other threads too."""
    loop = WitnessLoop()
    running, release = threading.Event(), threading.Event()
    threadsafe: list[Any] = []
    original = loop.call_soon_threadsafe

    def noted(callback: Any, *args: Any, context: Any = None) -> Any:
        threadsafe.append(callback)
        return original(callback, *args, context=context)

    loop.call_soon_threadsafe = noted  # type: ignore[method-assign]

    async def app() -> None:
        running.set()
        while not release.is_set():
            await asyncio.sleep(0.01)

    thread = in_thread("noted", lambda: loop.run_until_complete(app()))
    monitor = LoopMonitor(interval=INTERVAL)
    try:
        assert running.wait(10)
        monitor.start()
        watch_loop(loop)
        assert eventually(lambda: probe_of(monitor, loop) is not None)
        time.sleep(0.1)
        got = read_lag(monitor)
        monitor.stop()
    finally:
        release.set()
        thread.join(10)
        monitor.stop()
        loop.close()
    assert got["noted"].max is not None  # probed
    assert (threadsafe, loop.package_handles()) == ([], [])
