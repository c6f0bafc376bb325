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
    UVLOOP_CLOCK,
    WATCH,
    blocking_app,
    hooks_installed,
    in_thread,
    live_timers,
    read_lag,
    uvloop,
    watched,
)

needs_uvloop = pytest.mark.skipif(uvloop is None, reason="uvloop is not installed")

INTERVAL = 0.01
SLACK = 0.05  # wake-up latency plus scheduling noise on a shared 2-core machine

monitor = loopapps.monitor_fixture(INTERVAL)


def assert_blocked_max(top: float | None, blocks: list[float]) -> None:
    assert top is not None
    assert max(blocks) - INTERVAL - UVLOOP_CLOCK <= top <= max(blocks) + SLACK, (top, blocks)


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


@pytest.mark.parametrize("way", [*_asyncio_ways(), *_uvloop_ways()])
def test_every_way_to_run_a_loop_is_probed(monitor: LoopMonitor, way: str) -> None:
    """The block reads as the block, and no longer than the loop was really held up.

    The upper bound is the loop's own longest stall, seen by a timer of the
    test's beside the app, not the block plus a slack: in a full run the
    process can be held up longer than the slack by other things (another
    thread holding the GIL, a machine too busy to run it), which the probe
    rightly reports. The garbage collector is off: a full collection of the
    test session's heap is such a stall too.
    """
    run = {**_asyncio_ways(), **_uvloop_ways()}[way]
    blocks: list[float] = []
    stalls: list[float] = []
    with gc_off():
        run(watched(blocking_app(blocks, count=1, block=0.1), stalls)())
    lag = read_lag(monitor)["MainThread"]
    assert lag.max is not None
    assert max(blocks) - INTERVAL - UVLOOP_CLOCK <= lag.max <= max(stalls) + WATCH + UVLOOP_CLOCK, (
        lag.max,
        blocks,
        max(stalls),
    )
    assert lag.p99 is not None and lag.p99 <= lag.max
    if "uvloop" in way:
        assert lag.utilization is None  # not measured on uvloop
    else:
        assert lag.utilization is not None


def test_the_matrix_runs_every_way_there_is() -> None:
    """asyncio.Runner exists from 3.11: its ways are tested wherever it does."""
    ways = set(_asyncio_ways())
    assert ("asyncio.Runner" in ways) == hasattr(asyncio, "Runner")
    assert ("asyncio.Runner(loop_factory)" in ways) == hasattr(asyncio, "Runner")


UVLOOP_AFTER_START = """
import asyncio, json, sys, time
from opentelemetry.instrumentation.process.probes.loops import discovery
from opentelemetry.instrumentation.process.probes.loops.monitor import LoopMonitor
monitor = LoopMonitor(interval={interval})
monitor.start()
import uvloop  # after start(): uvloop binds the wrapped asyncio._set_running_loop
blocks = []
async def app():
    await asyncio.sleep(0.3)
    t0 = time.monotonic(); time.sleep(0.1); blocks.append(time.monotonic() - t0)
uvloop.run(app())
delays = monitor.read_delays()["MainThread"]
util = monitor.read_utilization().get("MainThread")
monitor.stop()
hooks = [(o.__name__, n) for o, n, _, _ in discovery.hooks.installed]
print(json.dumps({{"max": delays.max, "blocks": blocks, "hooks": hooks, "util": util}}))
"""


@needs_uvloop
def test_uvloop_imported_after_start_is_probed() -> None:
    script = UVLOOP_AFTER_START.format(interval=INTERVAL)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    got = json.loads(out.stdout)
    assert_blocked_max(got["max"], got["blocks"])
    assert got["util"] is None
    assert got["hooks"] == []


def test_hooks_installed_names_each_hook_while_a_monitor_runs(monitor: LoopMonitor) -> None:
    expected = [("asyncio.events", "_set_running_loop"), ("asyncio", "_set_running_loop")]
    if uvloop is not None:
        expected.append((uvloop.Loop.__name__, "run_forever"))
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
        if uvloop is not None:
            assert "run_forever" not in vars(uvloop.Loop)
        assert hooks_installed() == []
    finally:
        asyncio._set_running_loop = asyncio_original  # type: ignore[attr-defined]


def test_stop_leaves_no_timer_and_no_hook() -> None:
    originals = (
        asyncio.events._set_running_loop,
        asyncio._set_running_loop,  # type: ignore[attr-defined]
        asyncio.get_event_loop_policy(),
    )
    uvloop_dict = dict(vars(uvloop.Loop)) if uvloop else {}
    # A tick only every 5 s: a tick left pending by stop() would still be there.
    monitor = LoopMonitor(interval=5.0)
    running = threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        loop = asyncio.get_running_loop()
        holder["loop"] = loop
        holder["before"] = live_timers(loop)
        holder["release"] = release = loop.create_future()  # no timer of the app's own
        running.set()
        await release
        holder["after"] = live_timers(loop)
        holder["select"] = loopapps.selector_timed(loop)

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
    return live_timers(loop)


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


@pytest.mark.parametrize("hook", ["loop_started", "loop_stopped"])
def test_a_failing_hook_never_breaks_the_loops_start_or_stop(hook: str) -> None:
    failing, working = LoopMonitor(interval=INTERVAL), LoopMonitor(interval=INTERVAL)
    failing.start()
    working.start()

    def fail(loop: asyncio.AbstractEventLoop) -> None:
        raise RuntimeError("injected")

    setattr(failing, hook, fail)  # the fault, injected
    try:
        asyncio.run(asyncio.sleep(0.05))  # returns normally
        got = read_lag(working)
    finally:
        failing.stop()
        working.stop()
    assert got["MainThread"].max is not None


# --- loops running before start(): this thread's, watched ones, and the others


def test_start_inside_a_running_loop_probes_it_at_once() -> None:
    monitor = LoopMonitor(interval=INTERVAL)
    blocks: list[float] = []

    async def app() -> tuple[int, Any]:
        monitor.start()
        timers = live_timers(asyncio.get_running_loop())
        await blocking_app(blocks, count=1)()
        await asyncio.sleep(0.05)
        return timers, read_lag(monitor)["MainThread"]

    try:
        timers, lag = asyncio.run(app())
    finally:
        monitor.stop()
    assert timers == 1
    assert_blocked_max(lag.max, blocks)


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

    def body() -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.call_soon(running.set)  # once it runs
            loop.run_until_complete(loop.run_in_executor(None, release.wait, 10))
            first_run.set()
            loop.run_until_complete(blocking_app(blocks, count=1, block=0.1, idle=0.1, tail=0.05)())
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
    assert_blocked_max(got["restarts"].max, blocks)


@pytest.mark.parametrize("order", ["watch after start", "watch before start"])
def test_watch_loop_probes_loops_running_in_other_threads(order: str) -> None:
    """Each one begins in its own thread, and reads as if it had started after start()."""
    started = threading.Barrier(3)
    watching = threading.Event()
    blocks: dict[str, list[float]] = {"a": [], "b": []}
    loops: dict[str, asyncio.AbstractEventLoop] = {}

    def body(name: str, block: float) -> None:
        async def app() -> None:
            loops[name] = asyncio.get_running_loop()
            started.wait()
            await asyncio.sleep(0.3)  # the monitor starts meanwhile
            while not watching.is_set():  # ... or later, on a loaded host
                await asyncio.sleep(0.01)
            await blocking_app(blocks[name], count=1, block=block)()
            await asyncio.sleep(0.1)

        asyncio.run(app())

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
        got = read_lag(monitor)
    finally:
        monitor.stop()
    assert sorted(got) == ["a", "b"]
    assert_blocked_max(got["a"].max, blocks["a"])
    assert_blocked_max(got["b"].max, blocks["b"])
    assert got["a"].utilization is not None


def test_watch_loop_of_this_threads_loop_or_of_a_stopped_one_adds_no_second_probe() -> None:
    """A stopped loop is found by the hook when it runs; this thread's, by the hook too."""
    monitor = LoopMonitor(interval=INTERVAL)
    monitor.start()
    loop = asyncio.new_event_loop()

    async def app() -> int:
        watch_loop(asyncio.get_running_loop())
        timers = live_timers(asyncio.get_running_loop())
        await asyncio.sleep(0.05)
        return timers

    try:
        watch_loop(loop)  # not running: nothing to do now
        timers = loop.run_until_complete(app())
        probes = len(monitor._probes)
        got = read_lag(monitor)
    finally:
        loop.close()
        monitor.stop()
    assert (timers, probes) == (1, 1)  # one probe, one pending tick
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


def test_a_watched_loop_begins_without_the_watchers_context() -> None:
    var: contextvars.ContextVar[loopapps.Payload] = contextvars.ContextVar("var")
    running, release = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        loop = holder["loop"] = asyncio.get_running_loop()
        running.set()
        release.wait(10)  # blocks the loop: the begin call waits in its queue
        holder["wrapped"] = loopapps.selector_timed(loop)
        await asyncio.sleep(0.1)
        # Read while this run goes on: the loop's later runs begin from the hook.
        await loop.run_in_executor(None, lambda: holder.setdefault("got", read_lag(found)))

    found = LoopMonitor(interval=INTERVAL)
    thread = in_thread("elsewhere", lambda: asyncio.run(app()))
    assert running.wait(10)
    payload = loopapps.Payload()
    ref = weakref.ref(payload)
    token = var.set(payload)
    try:
        found.start()
        watch_loop(holder.pop("loop"))
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
    assert lag.max is not None
    # A selector loop: its select is timed, as for a loop that starts later.
    assert lag.utilization is not None and 0.0 <= lag.utilization <= 1.0


def test_stopped_before_its_queued_begin_ran_a_probe_leaves_nothing_on_the_loop() -> None:
    """A busy loop elsewhere is watched, its begin queued; stop() comes first."""
    running, release = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        loop = asyncio.get_running_loop()
        holder["loop"] = loop
        running.set()
        release.wait(10)  # blocks the loop: the begin, then the pause, wait in its queue
        await asyncio.sleep(0.05)  # both have run
        holder["select"] = loopapps.selector_timed(loop)
        holder["timers"] = live_timers(loop)

    thread = in_thread("queued", lambda: asyncio.run(app()))
    assert running.wait(10)
    monitor = LoopMonitor(interval=INTERVAL)
    try:
        monitor.start()
        watch_loop(holder["loop"])
        monitor.stop()
    finally:
        release.set()
        thread.join(10)
    del holder["loop"]
    assert holder == {"select": False, "timers": 0}


def test_a_loop_closed_between_the_watch_and_the_begin_is_passed_over() -> None:
    running, release = threading.Event(), threading.Event()
    holder: dict[str, Any] = {}

    async def app() -> None:
        holder["loop"] = asyncio.get_running_loop()
        running.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 10)

    thread = in_thread("closing", lambda: asyncio.run(app()))
    assert running.wait(10)
    closing = loopapps.Closing()
    holder["loop"].call_soon_threadsafe = closing  # the close, injected
    monitor = LoopMonitor(interval=INTERVAL)
    try:
        monitor.start()
        watch_loop(holder["loop"])  # must not raise
        assert closing.calls == 1
        assert monitor.started
    finally:
        del holder["loop"].call_soon_threadsafe
        release.set()
        thread.join(10)
        monitor.stop()
