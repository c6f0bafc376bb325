"""Shared helpers of the event-loop tests: apps that block their loop, threads, asyncio's truth."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, NamedTuple

import pytest
from opentelemetry.sdk.metrics.export import Metric

from opentelemetry.instrumentation.process.probes.loops import discovery
from opentelemetry.instrumentation.process.probes.loops.monitor import LoopMonitor
from opentelemetry.instrumentation.process.probes.loops.probe import Probe
from opentelemetry.instrumentation.process.probes.loops.window import NO_DELAYS

from ..conftest import points

try:
    import uvloop
except ImportError:  # pragma: no cover - uvloop is in the test environment
    uvloop = None

DELAY_MAX = "process_metrics.eventloop.delay.max"
DELAY_MEAN = "process_metrics.eventloop.delay.mean"
DELAY_P50 = "process_metrics.eventloop.delay.p50"
DELAY_P99 = "process_metrics.eventloop.delay.p99"
UTILIZATION = "process_metrics.eventloop.utilization"
LOOP_METRICS = (DELAY_MAX, DELAY_MEAN, DELAY_P50, DELAY_P99, UTILIZATION)

UVLOOP_CLOCK = 0.002  # uvloop's clock and timers have 1 ms resolution, each end rounds
RUNNERS = ["asyncio", "uvloop"]


class Payload:
    """An object the test watches with a weak reference."""


class Closing:
    """A loop's ``call_soon_threadsafe`` as it fails once the loop closed meanwhile."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        raise RuntimeError("Event loop is closed")


@contextlib.contextmanager
def monitor_and_loop(interval: float) -> Iterator[tuple[LoopMonitor, asyncio.AbstractEventLoop]]:
    """A started monitor ticking every ``interval`` and a new asyncio loop; both closed after."""
    monitor = LoopMonitor(interval=interval)
    monitor.start()
    loop = asyncio.new_event_loop()
    try:
        yield monitor, loop
    finally:
        loop.close()
        monitor.stop()


def monitor_fixture(interval: float) -> Any:
    """A fixture: a started monitor ticking every ``interval``; no hook left afterwards."""

    @pytest.fixture
    def monitor() -> Iterator[LoopMonitor]:
        m = LoopMonitor(interval=interval)
        m.start()
        yield m
        m.stop()
        assert hooks_installed() == []

    return monitor


def blocking_app(
    blocks: list[float], count: int = 3, block: float = 0.2, idle: float = 0.8, tail: float = 0.0
) -> Callable[[], Coroutine[Any, Any, None]]:
    """An app that sleeps ``idle``, then blocks its loop with time.sleep(block), ``count`` times.

    The actual length of each block, by the test's clock, is appended to
    ``blocks``. A ``tail`` sleep lets the tick delayed by the last block run
    before the loop stops.
    """

    async def app() -> None:
        for _ in range(count):
            await asyncio.sleep(idle)
            t0 = time.monotonic()
            time.sleep(block)
            blocks.append(time.monotonic() - t0)
        if tail:
            await asyncio.sleep(tail)

    return app


WATCH = 0.002
"""Seconds between two ticks of :func:`watched`'s own timer."""


def watched(
    app: Callable[[], Coroutine[Any, Any, None]], stalls: list[float]
) -> Callable[[], Coroutine[Any, Any, None]]:
    """``app``, with a timer of the test's beside it, every ``WATCH`` s: how late each ran.

    That is the loop's own truth about how long it was held up, whatever held
    it (the app's block, a garbage collection, another thread holding the
    GIL, a machine too busy to run it): a tick due in a stall runs at its end.
    A probe's tick is due in the same stall, at most ``WATCH`` earlier than
    this timer's, so its delay is at most the longest of ``stalls`` plus
    ``WATCH`` (and the clock's resolution on uvloop).
    """

    async def run() -> None:
        loop = asyncio.get_running_loop()

        def tick(due: float) -> None:
            stalls.append(loop.time() - due)
            schedule()

        def schedule() -> None:
            due = loop.time() + WATCH
            handles[:] = [loop.call_at(due, tick, due)]

        handles: list[asyncio.TimerHandle] = []
        schedule()
        try:
            await app()
        finally:  # the tick pending now would run no sooner than now
            stalls.append(loop.time() - handles[0].when())
            handles[0].cancel()

    return run


def periodic_app(
    blocks: list[float], *, count: int = 3, every: float = 1.0, block: float = 0.2
) -> Callable[[], Coroutine[Any, Any, None]]:
    """Blocks its loop for ``block`` once per ``every`` seconds, ``count`` times, then idles."""
    return blocking_app(blocks, count, block, idle=every - block, tail=0.05)


def in_thread(name: str, body: Callable[[], Any]) -> threading.Thread:
    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def idle_loop(name: str) -> Iterator[threading.Thread]:
    """A thread named ``name`` running an asyncio loop, ticking every 20 ms until the block ends."""
    release, running = threading.Event(), threading.Event()

    async def app() -> None:
        running.set()
        while not release.is_set():
            await asyncio.sleep(0.02)

    thread = in_thread(name, lambda: asyncio.run(app()))
    try:
        assert running.wait(10)
        yield thread
    finally:
        release.set()
        thread.join(10)


def live_timers(loop: asyncio.AbstractEventLoop) -> int:
    """Timers of an asyncio loop that are not cancelled (asyncio's truth).

    Those on its heap, and those already due, moved to its ready queue in the
    iteration that runs the caller.
    """
    due = [h for h in loop._ready if isinstance(h, asyncio.TimerHandle)]  # type: ignore[attr-defined]
    return sum(1 for h in [*loop._scheduled, *due] if not h.cancelled())  # type: ignore[attr-defined]


def parked(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether a probe is parked on ``loop``: its selector's select is a probe's parked select."""
    hook = vars(loop._selector).get("select")  # type: ignore[attr-defined]
    return getattr(hook, "__func__", None) is Probe.parked_select


def probed(loop: asyncio.AbstractEventLoop) -> int:
    """A probe's pending tick, or its parked select, on ``loop`` (one for each probe)."""
    return live_timers(loop) + parked(loop)


def samples(monitor: LoopMonitor, label: str | None = None) -> int:
    """Delays recorded since the last read (of ``label``'s loops; every loop's if ``None``).

    As a read now counts them: with the ticks that a sleeping loop's parked
    probe has let fall due since its last wake, counted as a read counts them.
    """
    total = 0
    for probe in monitor._probes:
        if label is None or probe.label == label:
            with probe.lock:
                if probe.asleep:
                    probe._on_time(time.monotonic())
                total += probe.window.count
    return total


def selector_timed(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop``'s ``select`` is timed: by ours (under a parked probe too), or someone's."""
    hook = vars(loop._selector).get("select")  # type: ignore[attr-defined]
    if getattr(hook, "__func__", None) is Probe.parked_select:
        return hook.__self__.timed is not None  # type: ignore[union-attr]
    return hook is not None


def run_with(runner: str) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    if runner == "uvloop":
        if uvloop is None:
            pytest.skip("uvloop is not installed")
        return uvloop.run  # type: ignore[no-any-return]
    return asyncio.run


def by_loop(metrics: dict[str, Metric], name: str) -> dict[str, float]:
    metric = metrics.get(name)
    return {} if metric is None else {dict(k)["thread.name"]: v for k, v in points(metric).items()}


def hooks_installed() -> list[tuple[str, str]]:
    """(owner, attribute) of each hook the loop discovery has installed now."""
    return [(owner.__name__, name) for owner, name, _, _ in discovery.hooks.installed]


class LoopLag(NamedTuple):
    """One loop's delays (seconds) and utilisation over one window; ``None`` when unknown."""

    max: float | None
    mean: float | None
    p50: float | None
    p99: float | None
    utilization: float | None


def read_lag(monitor: LoopMonitor) -> dict[str, LoopLag]:
    """Delays and utilisation of each loop since the previous read, by label, as the sources
    read them (the delays' window and the utilisation's each start again)."""
    delays = monitor.read_delays()
    busy = monitor.read_utilization()
    return {
        label: LoopLag(*delays.get(label, NO_DELAYS), utilization=busy.get(label))
        for label in {**delays, **busy}
    }
