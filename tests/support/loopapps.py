"""Shared helpers of the event-loop tests: apps that block their loop, threads, asyncio's truth.

The probe puts nothing in a loop (probes/loops/probe.py): what a test checks
on a loop is asyncio's own state (its ready queue, its timer heap, its
selector), and what a loop of the test's own records as it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import selectors
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest
from opentelemetry.sdk.metrics.export import Metric

import opentelemetry.instrumentation.process as package
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

T = TypeVar("T")

_PACKAGE_DIR = str(Path(package.__file__).resolve().parent)


class Payload:
    """An object the test watches with a weak reference."""


@contextlib.contextmanager
def monitor_and_loop(interval: float) -> Iterator[tuple[LoopMonitor, asyncio.AbstractEventLoop]]:
    """A started monitor of ``interval`` and a new asyncio loop; both closed after."""
    monitor = LoopMonitor(interval=interval)
    monitor.start()
    loop = asyncio.new_event_loop()
    try:
        yield monitor, loop
    finally:
        loop.close()
        monitor.stop()


def monitor_fixture(interval: float) -> Any:
    """A fixture: a started monitor of ``interval``; no hook left afterwards."""

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
    ``blocks``. A ``tail`` sleep lets the loop reach its next ``select`` (where
    the ticks due in the last block are read) before it stops.
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
    app: Callable[[], Coroutine[Any, Any, T]], stalls: list[float]
) -> Callable[[], Coroutine[Any, Any, T]]:
    """``app``, with a timer of the test's beside it, every ``WATCH`` s: how late each ran.

    It returns what ``app`` returns.

    That is the loop's own truth about how long it was held up, whatever held
    it (the app's block, a garbage collection, another thread holding the
    GIL, a machine too busy to run it): a timer due in a stall runs at its
    end. A virtual tick of the probe due in the same stall is read at most as
    late as this timer ran, plus ``WATCH`` (it can fall due up to one
    ``WATCH`` before this timer's due time).
    """

    async def run() -> T:
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
            return await app()
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
def idle_loop(name: str) -> Iterator[asyncio.AbstractEventLoop]:
    """A thread named ``name`` running an asyncio loop, awake every 20 ms until the block ends."""
    release = threading.Event()

    async def app() -> None:
        while not release.is_set():
            await asyncio.sleep(0.02)

    with _loop_in_thread(name, app, release.set) as loop:
        yield loop


@contextlib.contextmanager
def waiting_loop(name: str) -> Iterator[asyncio.AbstractEventLoop]:
    """A thread named ``name`` whose asyncio loop waits on a future (``select`` with no
    timeout: no timer of its own) until the block ends."""
    done: list[asyncio.Future[None]] = []

    async def app() -> None:
        done.append(asyncio.get_running_loop().create_future())
        await done[0]

    with _loop_in_thread(name, app, lambda: _settle(done)) as loop:
        yield loop


@contextlib.contextmanager
def blocked_loop(name: str) -> Iterator[tuple[asyncio.AbstractEventLoop, threading.Event]]:
    """A thread named ``name`` whose asyncio loop blocks in a callback until the event is
    set (no ``select`` meanwhile), then waits on a future until the block ends."""
    release = threading.Event()
    done: list[asyncio.Future[None]] = []

    async def app() -> None:
        done.append(asyncio.get_running_loop().create_future())
        release.wait(20)
        await done[0]

    with _loop_in_thread(name, app, lambda: (release.set(), _settle(done))) as loop:
        yield loop, release


def _settle(done: list[asyncio.Future[None]]) -> None:
    future = done[0]
    with contextlib.suppress(RuntimeError):  # closed already
        future.get_loop().call_soon_threadsafe(lambda: future.done() or future.set_result(None))


@contextlib.contextmanager
def _loop_in_thread(
    name: str, app: Callable[[], Coroutine[Any, Any, None]], end: Callable[[], Any]
) -> Iterator[asyncio.AbstractEventLoop]:
    loops: list[asyncio.AbstractEventLoop] = []
    running = threading.Event()

    async def main() -> None:
        loops.append(asyncio.get_running_loop())
        running.set()
        await app()

    thread = in_thread(name, lambda: asyncio.run(main()))
    try:
        assert running.wait(10)
        yield loops[0]
    finally:
        end()
        thread.join(10)


class Blocked(NamedTuple):
    """What :func:`loops_blocking` saw: each loop's blocks, and how late its own timer ran."""

    blocks: dict[str, list[float]]
    stalls: dict[str, list[float]]


@contextlib.contextmanager
def loops_blocking(lengths: dict[str, float], unprobed: str | None = None) -> Iterator[Blocked]:
    """A thread per name, each running a loop that blocks twice for its length, 0.8 s
    apart, then idles until the block ends; entered once every loop has blocked.

    Each loop has a timer of the test's beside it (:func:`watched`); the one named
    ``unprobed`` runs on uvloop instead, and blocks for 50 ms. Read the stalls
    after the block: a timer late in a block runs after the block's first read.
    """
    names = [*lengths, *([unprobed] if unprobed else [])]
    seen = Blocked({name: [] for name in names}, {name: [] for name in names})
    ready = {name: threading.Event() for name in names}
    release = threading.Event()

    def body(name: str) -> None:
        async def app() -> None:
            block = lengths.get(name, 0.05)
            await periodic_app(seen.blocks[name], count=2, every=0.8, block=block)()
            ready[name].set()
            while not release.is_set():
                await asyncio.sleep(0.02)

        if name == unprobed:
            uvloop.run(app())
        else:
            asyncio.run(watched(app, seen.stalls[name])())

    threads = [in_thread(name, functools.partial(body, name)) for name in names]
    try:
        assert all(event.wait(20) for event in ready.values())
        yield seen
    finally:
        release.set()
        for thread in threads:
            thread.join(10)


def in_loop(loop: asyncio.AbstractEventLoop, what: Callable[[], T], after: float = 0.0) -> T:
    """``what()``, run in ``loop``'s thread ``after`` seconds from now (the loop runs on)."""

    async def run() -> T:
        await asyncio.sleep(after)
        return what()

    return asyncio.run_coroutine_threadsafe(run(), loop).result(20)


# --- what is in a loop, by asyncio's own state


def ours(callback: Any) -> bool:
    """Whether ``callback`` (a function, bound method or partial) is code of the package's."""
    while isinstance(callback, functools.partial):
        callback = callback.func
    owner = getattr(callback, "__self__", None)
    if owner is not None and type(owner).__module__.startswith(package.__name__):
        return True
    code = getattr(getattr(callback, "__func__", callback), "__code__", None)
    return code is not None and str(Path(code.co_filename).resolve()).startswith(_PACKAGE_DIR)


def queued(loop: asyncio.AbstractEventLoop) -> list[asyncio.Handle]:
    """The handles in ``loop``'s ready queue and on its timer heap, cancelled ones too."""
    return [*loop._ready, *loop._scheduled]  # type: ignore[attr-defined]


def package_handles(loop: asyncio.AbstractEventLoop) -> list[asyncio.Handle]:
    """The handles of the package's in ``loop``'s queues (there must never be one)."""
    return [h for h in queued(loop) if ours(h._callback)]  # type: ignore[attr-defined]


def hooked(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop``'s selector holds a probe's hook in place of its ``select``."""
    selector = getattr(loop, "_selector", None)
    if selector is None or not hasattr(selector, "__dict__"):
        return False
    return ours(vars(selector).get("select"))


def probe_of(monitor: LoopMonitor, loop: asyncio.AbstractEventLoop) -> Probe | None:
    """``monitor``'s live probe of ``loop``, if any."""
    for probe in monitor._probes:
        if probe.loop_ref() is loop and not probe.dead:
            return probe
    return None


def asleep(monitor: LoopMonitor, loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` is probed by ``monitor`` and waits in ``select``, through the hook."""
    probe = probe_of(monitor, loop)
    return probe is not None and probe.sleep is not None


class Witness(selectors.DefaultSelector):  # type: ignore[valid-type,misc]
    """The platform's selector, which notes a loop's queues at each ``select`` call.

    Its ``select`` is its class's own, as a probe requires: the probe hooks
    it as it would the plain selector, and each call the loop makes through
    the hook lands here. ``seen`` holds every handle in the loop's ready queue
    and timer heap at any ``select`` call; ``timeouts`` each call's timeout.
    """

    def __init__(self) -> None:
        super().__init__()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.seen: list[asyncio.Handle] = []
        self.timeouts: list[float | None] = []
        self.calls = 0

    def select(self, timeout: float | None = None) -> Any:
        self.calls += 1
        self.timeouts.append(timeout)
        if self.loop is not None:
            self.seen.extend(queued(self.loop))
        return super().select(timeout)


class WitnessLoop(asyncio.SelectorEventLoop):
    """A selector loop that notes every handle put in its queues, and every one seen there.

    Its clock is asyncio's own: it is probed as any default loop is.
    """

    def __init__(self) -> None:
        self.witness = Witness()
        super().__init__(selector=self.witness)
        self.witness.loop = self
        self.made: list[asyncio.Handle] = []

    def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:
        handle = super().call_at(when, callback, *args, context=context)
        self.made.append(handle)
        return handle

    def _call_soon(self, callback: Any, args: Any, context: Any) -> Any:
        handle = super()._call_soon(callback, args, context)  # type: ignore[misc]
        self.made.append(handle)
        return handle

    def _add_callback(self, handle: Any) -> None:
        self.made.append(handle)
        super()._add_callback(handle)  # type: ignore[misc]

    def package_handles(self) -> list[asyncio.Handle]:
        """Every handle of the package's ever put in or seen in this loop's queues."""
        return [h for h in [*self.made, *self.witness.seen] if ours(h._callback)]  # type: ignore[attr-defined]


class SlottedSelector:
    """A selector whose instances have no ``__dict__``: nowhere to put a hook."""

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


def samples(monitor: LoopMonitor, label: str | None = None) -> int:
    """Delays recorded so far in this window (of ``label``'s loops; every loop's if ``None``).

    Ticks due while a loop sleeps in ``select`` are counted when it wakes, or
    by the read: not here.
    """
    total = 0
    for probe in monitor._probes:
        if label is None or probe.label == label:
            with probe.lock:
                total += probe.window.count
    return total


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
