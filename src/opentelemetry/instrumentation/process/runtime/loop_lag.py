"""Event-loop lag: how late each asyncio event loop runs a timer it was asked to run.

A *probe* is one timer per loop. Each tick reads ``loop.time()``, records how
far past its due time it runs (the lag), and schedules the next tick one
interval later. A loop blocked by synchronous code for 200 ms runs the tick up
to 200 ms late; an idle loop runs it within about a millisecond (the selector
timeout is rounded up to the millisecond). Node.js's ``monitorEventLoopDelay``
samples the same way.

Finding the loops
-----------------
Every asyncio loop implementation makes ``asyncio.get_running_loop()`` work by
calling ``asyncio._set_running_loop(loop)`` when it starts running and
``_set_running_loop(None)`` when it stops. That is the one point shared by
``asyncio.run``, ``asyncio.Runner`` (with or without ``loop_factory``),
``new_event_loop()`` + ``run_forever``/``run_until_complete``, uvicorn and
uvloop, so :meth:`LoopLagMonitor.start` wraps it:

- ``asyncio.events._set_running_loop``: what ``BaseEventLoop`` calls;
- ``asyncio._set_running_loop``: what uvloop binds *when it is imported*;
- if uvloop is already imported, ``uvloop.Loop.run_forever`` (a Python
  subclass of uvloop's Cython loop, whose ``run_until_complete`` calls
  ``self.run_forever()``), since uvloop bound the unwrapped function.

An event-loop policy wrapper would miss every ``loop_factory`` (``asyncio.run``
and ``Runner`` since 3.11, ``uvloop.run`` since 3.11, uvicorn), and policies
are deprecated from 3.14; this hook sees them all. Loops already running when
``start()`` is called are found too: the caller's own loop directly, loops of
other threads by one scan of ``gc.get_objects()`` (only when other threads
exist; a one-off cost of 45-70 ms per million tracked objects here).

Limits
------
- uvloop imported *while* the monitor runs keeps a reference to the wrapper
  after :meth:`~LoopLagMonitor.stop`; with no monitor running it only calls
  the original (one Python call per loop start and stop).
- A loop class that neither derives from ``BaseEventLoop``/``uvloop.Loop``
  nor calls ``asyncio._set_running_loop`` when it starts is not seen.
- uvloop's clock has millisecond resolution, so its lags are in whole
  milliseconds; its utilisation is not measured (libuv's idle time is not
  exposed), and is ``None``.
- A stall shorter than the interval is seen only if a tick falls due during
  it, and a stall of ``d`` is seen as between ``d - interval`` and ``d``.

Labels
------
A loop is named after the thread that runs it, once, when it first runs:
``MainThread``, or the thread's name, with the counter of Python's default
names removed (``Thread-7 (serve)`` becomes ``Thread (serve)``, so a thread
that is replaced keeps its series). Loops alive at the same time under one
name get ``#2``, ``#3``... A closed loop's last window goes to the next loop
of the same name, or is read once on its own. At most ``max_loops`` loops are
probed at once.

Fork
----
In a forked child, :meth:`~LoopLagMonitor.reset` (run at fork) forgets the
parent's loops; loops started in the child are probed as before. A loop that
keeps running in the child (forked from inside a callback; Python 3.12+
unsets it) is not probed until it starts again.

Utilisation
-----------
On selector loops (asyncio's default on Unix), the loop's selector ``select``
is timed: idle time is time spent waiting in it while the loop runs, and
utilisation is ``1 - idle / running`` over the window, as Node.js's event-loop
utilisation. Time the loop is stopped (between two ``run_until_complete``)
counts as neither. It is ``None`` where it cannot be measured. The timing
costs about 0.3 us per loop iteration (``utilization=False`` turns it off).

Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import contextlib
import contextvars
import gc
import math
import os
import re
import sys
import threading
import time
import weakref
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_INTERVAL = 0.02
"""Seconds between two ticks of a probe.

Node.js samples every 10 ms by default. On a loop that is awake anyway, a
tick costs about 3.5 us of Python (0.02 % of a core at 20 ms). On an idle
loop, the wake-up it forces costs far more, about 65 us of CPU on this VM, as
for any timer: 0.33 % of a core at 20 ms, 0.6 % at 10 ms, 0.13 % at 100 ms.
At 20 ms a stall of ``d`` reads as ``d - 20 ms`` to ``d`` (at most 10 % under
for a 200 ms stall), and a 60 s window holds about 3000 samples for its p99.
"""

MAX_LOOPS = 32
"""Loops probed at once by one monitor; further loops are not probed (counted)."""

# Histogram bucket upper bounds: 100 us * 2**(k/4), up to about 105 s. A
# percentile is reported as the upper bound of its bucket, capped by the
# window's maximum: at most 19 % above the true value (2**0.25 = 1.189),
# or at most 100 us above it below 100 us.
BUCKET_RATIO = 2**0.25
BUCKETS: tuple[float, ...] = tuple(1e-4 * BUCKET_RATIO**k for k in range(81))

_DEFAULT_THREAD_NAME = re.compile(r"^Thread-\d+")

SetRunningLoop = Callable[[Any], None]


@dataclass(frozen=True)
class LoopLag:
    """One loop's lag over one window (between two reads); seconds.

    Every value is ``None`` when the window had no sample (never 0).
    """

    max: float | None
    min: float | None
    mean: float | None
    stddev: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    samples: int
    utilization: float | None
    """Busy share of the time the loop ran (0 to 1); ``None`` if not measured."""


class _Window:
    """Lag samples of one window: sums, extremes and bucket counts."""

    __slots__ = ("buckets", "count", "max", "min", "squares", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.squares = 0.0
        self.max = 0.0
        self.min = math.inf
        self.buckets = [0] * (len(BUCKETS) + 1)

    def add(self, lag: float) -> None:
        self.count += 1
        self.total += lag
        self.squares += lag * lag
        if lag > self.max:
            self.max = lag
        if lag < self.min:
            self.min = lag
        self.buckets[bisect_left(BUCKETS, lag)] += 1

    def merge(self, other: _Window) -> None:
        self.count += other.count
        self.total += other.total
        self.squares += other.squares
        self.max = max(self.max, other.max)
        self.min = min(self.min, other.min)
        for i, n in enumerate(other.buckets):
            self.buckets[i] += n

    def percentile(self, q: float) -> float:
        rank = math.ceil(q * self.count)
        seen = 0
        for i, n in enumerate(self.buckets):
            seen += n
            if seen >= rank:
                upper = BUCKETS[i] if i < len(BUCKETS) else self.max
                return max(self.min, min(upper, self.max))
        return self.max

    def summary(self, utilization: float | None) -> LoopLag:
        if not self.count:
            return LoopLag(None, None, None, None, None, None, None, 0, utilization)
        mean = self.total / self.count
        variance = max(0.0, self.squares / self.count - mean * mean)
        return LoopLag(
            max=self.max,
            min=self.min,
            mean=mean,
            stddev=math.sqrt(variance),
            p50=self.percentile(0.50),
            p90=self.percentile(0.90),
            p99=self.percentile(0.99),
            samples=self.count,
            utilization=utilization,
        )


class _Busy:
    """Running and idle (in ``select``) time of one loop, written by its thread only.

    Each state is one ``(total, since)`` tuple, replaced in one assignment, so
    the reader sees a consistent pair without a lock. ``since`` is the start of
    the current period, 0.0 outside one.
    """

    __slots__ = ("idle", "prev", "run", "timed")

    def __init__(self) -> None:
        self.run = (0.0, 0.0)
        self.idle = (0.0, 0.0)
        self.timed = False  # whether select is timed (selector loops only)
        self.prev = (0.0, 0.0)  # (run, idle) totals at the previous window

    def started(self, now: float) -> None:
        total, since = self.run
        if not since:
            self.run = (total, now)

    def stopped(self, now: float) -> None:
        total, since = self.run
        if since:
            self.run = (total + now - since, 0.0)

    def window(self, now: float) -> tuple[float, float]:
        """(running, idle) seconds since the previous call."""
        run = _total(self.run, now)
        idle = _total(self.idle, now)
        d_run, d_idle = run - self.prev[0], idle - self.prev[1]
        self.prev = (run, idle)
        return d_run, d_idle


def _total(state: tuple[float, float], now: float) -> float:
    total, since = state
    return total + (now - since if since else 0.0)


def _utilization(d_run: float, d_idle: float) -> float | None:
    if d_run <= 0.0:
        return None
    return min(1.0, max(0.0, 1.0 - d_idle / d_run))


class _Probe:
    """One timer on one loop, owned by one monitor."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self.loop_ref: weakref.ref[asyncio.AbstractEventLoop] = weakref.ref(loop)
        self.interval = interval
        self.label: str | None = None  # set by begin(), in the loop's thread
        self.lock = threading.Lock()
        self.window = _Window()
        self.busy = _Busy()
        self.handle: asyncio.TimerHandle | None = None
        self.due = 0.0
        self.dead = False
        # Ticks run in an empty context: no copy per tick, and no reference
        # to whatever context values the code starting the loop had.
        self.context = contextvars.Context()
        self.selector: Any = None

    def closed(self) -> bool:
        loop = self.loop_ref()
        return loop is None or loop.is_closed()

    # --- in the loop's thread

    def begin(self, loop: asyncio.AbstractEventLoop, timed: bool) -> None:
        if self.dead or self.handle is not None:
            return
        self.busy.started(time.monotonic())
        if timed and self.selector is None:
            self.wrap_select(loop)
        self.schedule(loop, loop.time())

    def schedule(self, loop: asyncio.AbstractEventLoop, now: float) -> None:
        self.due = now + self.interval
        self.handle = loop.call_at(self.due, self.tick, context=self.context)

    def tick(self) -> None:
        self.handle = None
        loop = self.loop_ref()
        if loop is None or self.dead:
            return
        try:
            now = loop.time()
            lag = now - self.due
            with self.lock:
                self.window.add(lag if lag > 0.0 else 0.0)
            self.schedule(loop, now)
        except Exception:  # noqa: BLE001 - never raise into the application's loop
            self.dead = True

    def pause(self) -> None:
        """The loop stops running: no timer left behind, running time accounted."""
        handle, self.handle = self.handle, None
        if handle is not None:
            handle.cancel()
        self.busy.stopped(time.monotonic())

    def wrap_select(self, loop: asyncio.AbstractEventLoop) -> None:
        selector: Any = getattr(loop, "_selector", None)
        select = getattr(selector, "select", None)
        # Without a __dict__ there is nowhere to put the wrapper: as if wrapped already.
        if select is None or "select" in getattr(selector, "__dict__", ("select",)):
            return  # not a selector loop, or someone else wraps it already
        busy = self.busy
        monotonic = time.monotonic

        def timed_select(timeout: float | None = None) -> Any:
            t0 = monotonic()
            busy.idle = (busy.idle[0], t0)
            try:
                return select(timeout)
            finally:
                busy.idle = (busy.idle[0] + monotonic() - t0, 0.0)

        timed_select.__wrapped__ = select  # type: ignore[attr-defined]
        selector.select = timed_select
        busy.timed = True
        self.selector = selector

    # --- in any thread

    def unwrap_select(self) -> None:
        selector, self.selector = self.selector, None
        wrapper = getattr(selector, "__dict__", {}).get("select")
        if wrapper is not None and hasattr(wrapper, "__wrapped__"):
            del selector.select

    def take(self, now: float) -> tuple[_Window, float, float]:
        """This window's samples and (running, idle) seconds; starts the next."""
        with self.lock:
            window, self.window = self.window, _Window()
        d_run, d_idle = self.busy.window(now)
        return window, d_run, d_idle

    def detach(self) -> None:
        """Stop ticking and unwrap; the pending tick is cancelled in the loop's thread."""
        self.dead = True
        self.unwrap_select()
        loop = self.loop_ref()
        if loop is None or loop.is_closed():
            return
        if asyncio.events._get_running_loop() is loop:
            self.pause()
            return
        with contextlib.suppress(RuntimeError):  # closed meanwhile: its timers went with it
            loop.call_soon_threadsafe(self.pause, context=self.context)


class LoopLagMonitor:
    """Probes every asyncio event loop of the process; see the module docstring."""

    def __init__(
        self,
        *,
        interval: float = DEFAULT_INTERVAL,
        max_loops: int = MAX_LOOPS,
        utilization: bool = True,
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, (int, float)):
            raise ValueError(f"interval must be a number of seconds; got {_excerpt(interval)}")
        if not 0.001 <= interval <= 10.0:
            raise ValueError(f"interval must be 0.001 to 10 seconds; got {_excerpt(interval)}")
        if isinstance(max_loops, bool) or not isinstance(max_loops, int) or max_loops < 1:
            raise ValueError(f"max_loops must be an int >= 1; got {_excerpt(max_loops)}")
        self.interval = float(interval)
        self.max_loops = max_loops
        self.utilization = utilization
        self._skipped: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        """Loops not probed because ``max_loops`` were probed already."""
        self._lock = threading.Lock()
        # Replaced, never changed in place: the hooks read it without the lock.
        self._probes: tuple[_Probe, ...] = ()
        self._pid = os.getpid()
        self._started = False

    @property
    def skipped(self) -> int:
        """Live loops not probed because ``max_loops`` loops were probed already."""
        return len(self._skipped)

    @property
    def started(self) -> bool:
        return self._started

    def start(self) -> None:
        """Probe every loop running now and every loop that starts running later."""
        if self._started:
            return
        self._started = True
        self._pid = os.getpid()
        _hooks.add(self)
        own = asyncio.events._get_running_loop()
        if own is not None:
            _hooks.started(own, only=self)
        for loop in _running_elsewhere(own):
            probe = self._attach(loop)
            if probe is not None:
                self._begin_from_elsewhere(loop, probe)

    def stop(self) -> None:
        """Stop every probe and remove the hooks (when no other monitor runs)."""
        if not self._started:
            return
        self._started = False
        _hooks.discard(self)
        with self._lock:
            probes, self._probes = self._probes, ()
        for probe in probes:
            probe.detach()

    def reset(self) -> None:
        """In a forked child: forget the parent's loops; a no-op in the same process."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._lock = threading.Lock()  # may have been held by a parent thread
        probes, self._probes = self._probes, ()
        for probe in probes:
            # Not detached: their loops belong to threads that do not exist here.
            probe.dead = True
            probe.unwrap_select()

    def read(self) -> dict[str, LoopLag]:
        """Lag of each loop since the previous read, by label; drops closed loops."""
        now = time.monotonic()
        windows: dict[str, tuple[_Window, float, float, bool]] = {}
        gone: list[_Probe] = []
        for probe in self._probes:
            closed = probe.closed() or probe.dead
            if probe.label is None:  # not begun yet
                if closed:
                    gone.append(probe)
                continue
            window, d_run, d_idle = probe.take(now)
            if closed:
                gone.append(probe)
            timed = probe.busy.timed
            prior = windows.get(probe.label)
            if prior is not None:
                window.merge(prior[0])
                d_run, d_idle = d_run + prior[1], d_idle + prior[2]
                timed = timed or prior[3]
            windows[probe.label] = (window, d_run, d_idle, timed)
        if gone:
            with self._lock:
                self._probes = tuple(p for p in self._probes if p not in gone)
        return {
            label: window.summary(_utilization(d_run, d_idle) if timed else None)
            for label, (window, d_run, d_idle, timed) in windows.items()
        }

    # --- hooks, in the loop's thread

    def _on_start(self, loop: asyncio.AbstractEventLoop) -> None:
        probe = self._attach(loop)
        if probe is not None:
            self._label(probe)
            probe.begin(loop, self.utilization)

    def _on_stop(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._pid != os.getpid():
            return  # a forked child before reset()
        probe = self._find(loop)
        if probe is not None:
            probe.pause()

    def _find(self, loop: asyncio.AbstractEventLoop) -> _Probe | None:
        for probe in self._probes:
            if probe.loop_ref() is loop and not probe.dead:
                return probe
        return None

    def _begin_from_elsewhere(self, loop: asyncio.AbstractEventLoop, probe: _Probe) -> None:
        def begin() -> None:
            if asyncio.events._get_running_loop() is loop:
                self._label(probe)
                probe.begin(loop, self.utilization)

        with contextlib.suppress(RuntimeError):  # closed meanwhile
            loop.call_soon_threadsafe(begin, context=probe.context)

    def _attach(self, loop: asyncio.AbstractEventLoop) -> _Probe | None:
        """The loop's probe, created if needed; None past ``max_loops``."""
        if self._pid != os.getpid():
            return None  # a forked child before reset(): nothing of ours is valid
        with self._lock:
            probe = self._find(loop)
            if probe is not None:
                return probe
            if len(self._probes) >= self.max_loops:
                self._evict_closed()
            if len(self._probes) >= self.max_loops:
                with contextlib.suppress(TypeError):  # not weakly referenceable
                    self._skipped.add(loop)
                return None
            try:
                probe = _Probe(loop, self.interval)
            except TypeError:
                return None  # not weakly referenceable: cannot probe without keeping it alive
            self._probes = (*self._probes, probe)
            return probe

    def _evict_closed(self) -> None:
        """Forget closed loops whose last window was not read yet (at ``max_loops`` only)."""
        self._probes = tuple(p for p in self._probes if not (p.closed() or p.dead))

    def _label(self, probe: _Probe) -> None:
        """Name the probe after its thread, unique among loops that are not closed.

        A closed loop of the same name hands over its last window instead.
        """
        if probe.label is not None:
            return
        base = _DEFAULT_THREAD_NAME.sub("Thread", threading.current_thread().name)
        with self._lock:
            taken: set[str] = set()
            handed_over: list[_Probe] = []
            for other in self._probes:
                if other.label is None:  # not begun yet (this probe among them)
                    continue
                if other.closed() or other.dead:
                    if other.label == base:
                        probe.window.merge(other.take(time.monotonic())[0])
                        handed_over.append(other)
                    continue
                taken.add(other.label)
            if handed_over:
                self._probes = tuple(p for p in self._probes if p not in handed_over)
            label, n = base, 1
            while label in taken:
                n += 1
                label = f"{base}#{n}"
            probe.label = label


def _excerpt(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _running_elsewhere(
    own: asyncio.AbstractEventLoop | None,
) -> list[asyncio.AbstractEventLoop]:
    """Loops running in other threads now (one scan of the heap; skipped if alone).

    Objects are matched on their exact type against every loop class defined
    now, which never runs an object's own code (``isinstance`` would read
    ``__class__``, a property on lazy proxies).
    """
    if threading.active_count() < 2:
        return []
    loop_types = _subclasses(asyncio.AbstractEventLoop)
    kind = type
    candidates = [obj for obj in gc.get_objects() if kind(obj) in loop_types]
    found = []
    for loop in candidates:
        try:
            if loop is not own and loop.is_running():
                found.append(loop)
        except Exception:  # noqa: BLE001 - a broken loop object is not ours to probe
            continue
    return found


def _subclasses(cls: type) -> frozenset[type]:
    found: set[type] = set()
    todo = [cls]
    while todo:
        subs: list[type] = type.__subclasses__(todo.pop())
        for sub in subs:
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return frozenset(found)


class _Hooks:
    """The process-wide hooks, installed while at least one monitor runs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.monitors: tuple[weakref.ref[LoopLagMonitor], ...] = ()
        # (module, attribute, original, wrapper) for each hook installed
        self.installed: list[tuple[Any, str, Any, Any]] = []

    def add(self, monitor: LoopLagMonitor) -> None:
        with self._locked():
            self.monitors = (*self._live(), weakref.ref(monitor))
            if not self.installed:
                self._install()

    def discard(self, monitor: LoopLagMonitor) -> None:
        with self._locked():
            self.monitors = tuple(r for r in self._live() if r() is not monitor)
            if not self.monitors:
                self._uninstall()

    def _locked(self) -> threading.Lock:
        """The lock, renewed in a child forked without Python's hooks (a C server).

        There the old one may be held by a thread of the parent, which the
        child does not have: it would never be released.
        """
        if self.pid != os.getpid():
            self.pid = os.getpid()
            self.lock = threading.Lock()
        return self.lock

    def _live(self) -> tuple[weakref.ref[LoopLagMonitor], ...]:
        return tuple(r for r in self.monitors if r() is not None)

    def started(self, loop: Any, only: LoopLagMonitor | None = None) -> None:
        for ref in self.monitors:
            monitor = ref()
            if monitor is not None and (only is None or monitor is only):
                # Never break a loop's start.
                with contextlib.suppress(Exception):
                    monitor._on_start(loop)

    def stopped(self, loop: Any) -> None:
        for ref in self.monitors:
            monitor = ref()
            if monitor is not None:
                # Never break a loop's stop.
                with contextlib.suppress(Exception):
                    monitor._on_stop(loop)

    def _install(self) -> None:
        for module in (asyncio.events, asyncio):
            original = getattr(module, "_set_running_loop")  # noqa: B009 - private, untyped in asyncio
            wrapper = self._wrap_set_running_loop(original)
            setattr(module, "_set_running_loop", wrapper)  # noqa: B010
            self.installed.append((module, "_set_running_loop", original, wrapper))
        uvloop = sys.modules.get("uvloop")
        loop_class = getattr(uvloop, "Loop", None)
        if isinstance(loop_class, type) and "run_forever" not in loop_class.__dict__:
            wrapper = self._wrap_run_forever(loop_class)
            setattr(loop_class, "run_forever", wrapper)  # noqa: B010 - a class of uvloop's, untyped
            self.installed.append((loop_class, "run_forever", None, wrapper))

    def _uninstall(self) -> None:
        while self.installed:
            owner, name, original, wrapper = self.installed.pop()
            if owner.__dict__.get(name) is not wrapper:
                continue  # wrapped again by someone else: ours stays, as a pass-through
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)

    def _wrap_set_running_loop(self, original: SetRunningLoop) -> SetRunningLoop:
        get_running_loop = asyncio.events._get_running_loop

        def _set_running_loop(loop: Any) -> None:
            if loop is None:
                running = get_running_loop() if self.monitors else None
                original(None)
                if running is not None:
                    self.stopped(running)
            else:
                original(loop)
                if self.monitors:
                    self.started(loop)

        _set_running_loop.__wrapped__ = original  # type: ignore[attr-defined]
        return _set_running_loop

    def _wrap_run_forever(self, loop_class: type) -> Callable[[Any], None]:
        base = next(
            c.__dict__["run_forever"] for c in loop_class.__mro__[1:] if "run_forever" in c.__dict__
        )

        def run_forever(loop: Any) -> None:
            if loop.is_running() or not self.monitors:
                return base(loop)  # type: ignore[no-any-return]
            self.started(loop)
            try:
                return base(loop)  # type: ignore[no-any-return]
            finally:
                self.stopped(loop)

        run_forever.__wrapped__ = base  # type: ignore[attr-defined]
        return run_forever

    def after_fork_in_child(self) -> None:
        self._locked()  # the old lock may have been held by a parent thread
        for ref in self.monitors:
            monitor = ref()
            if monitor is not None:
                monitor.reset()


_hooks = _Hooks()


def hooks_installed() -> list[tuple[str, str]]:
    """(owner, attribute) of each hook installed now; for tests and diagnostics."""
    # The owners are modules and classes: each has a name.
    return [(o.__name__, name) for o, name, _, _ in _hooks.installed]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_hooks.after_fork_in_child)
