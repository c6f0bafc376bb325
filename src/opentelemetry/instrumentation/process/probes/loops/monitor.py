"""The probes of every event loop: one per loop, named after its thread, read per window.

Reads give each loop's delays (seconds) and utilisation (0 to 1) since the
previous read, by label: the thread's name (``Thread-7 (serve)`` becomes
``Thread (serve)``), ``#2``, ``#3`` for loops alive at once under one name.
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time

from ...excerpt import excerpt
from .discovery import hooks
from .probe import Probe
from .select_timing import utilization
from .stalls import Stall, Watch
from .window import Delays, Window

DEFAULT_INTERVAL = 0.02
"""Seconds between two virtual ticks of a probe: the delays' sampling (docs/runtime.md)."""

DEFAULT_STALL = 0.1
"""Seconds without a ``select`` from which a loop is stalled (docs/stalls.md).

The snapshot source's ``STALL_SECONDS``, which GC pauses share.
"""

MAX_LOOPS = 32
"""Loops probed at once by one monitor; further loops are not probed (counted)."""

DELAYS = "delays"
UTILIZATION = "utilization"
STALLS = "stalls"
PARTS = (DELAYS, UTILIZATION, STALLS)

_DEFAULT_THREAD_NAME = re.compile(r"^Thread-\d+")


class LoopMonitor:
    """Probes every asyncio event loop of the process, and reads them per window.

    ``delays`` reads how late each loop runs; ``utilization`` its busy time.
    Either can be turned on later with :meth:`measure`. Nothing is put in any
    loop's queues: the probes hook the loops' selectors (:mod:`.probe`).
    """

    def __init__(
        self,
        *,
        interval: float = DEFAULT_INTERVAL,
        stall: float = DEFAULT_STALL,
        max_loops: int = MAX_LOOPS,
        delays: bool = True,
        utilization: bool = True,
        stalls: bool = False,
    ) -> None:
        for name, value, low, high in (
            ("interval", interval, 0.001, 10.0),
            ("stall", stall, 0.001, 60.0),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number of seconds; got {excerpt(value, 40)}")
            if not low <= value <= high:
                raise ValueError(
                    f"{name} must be {low:g} to {high:g} seconds; got {excerpt(value, 40)}"
                )
        if isinstance(max_loops, bool) or not isinstance(max_loops, int) or max_loops < 1:
            raise ValueError(f"max_loops must be an int >= 1; got {excerpt(max_loops, 40)}")
        self.interval = float(interval)
        self.stall = float(stall)
        self.max_loops = max_loops
        self.parts = frozenset(
            part
            for part, on in ((DELAYS, delays), (UTILIZATION, utilization), (STALLS, stalls))
            if on
        )
        """What is measured: ``"delays"``, ``"utilization"``, ``"stalls"`` (named by a thread)."""
        self._watch = Watch(self._here)
        self._lock = threading.Lock()
        # Replaced, never changed in place: the hooks read it without the lock.
        self._probes: tuple[Probe, ...] = ()
        self._pid = os.getpid()
        self._started = False

    @property
    def started(self) -> bool:
        return self._started

    def start(self) -> None:
        """Probe the caller's running loop, watched loops, and every loop that starts later."""
        if self._started:
            return
        self._started = True
        if STALLS in self.parts:
            self._watch.start()
        hooks.add(self)

    def stop(self) -> None:
        """Stop every probe and remove the hooks (when no other monitor runs)."""
        if not self._started:
            return
        self._started = False
        hooks.discard(self)
        self._watch.stop()
        probes, self._probes = self._here(), ()
        for probe in probes:
            probe.detach()

    def measure(self, part: str) -> None:
        """Measure ``part`` (one of :data:`PARTS`) too, on loops probed already."""
        if part not in PARTS:
            raise ValueError(f"part must be one of {', '.join(PARTS)}; got {excerpt(part, 40)}")
        if part in self.parts:
            return
        self.parts = self.parts | {part}
        if part == STALLS and self._started:
            self._watch.start()
        for probe in self._here():
            loop = probe.loop_ref()
            # A loop that does not run now gets every part when it starts again.
            if probe.label is not None and loop is not None and loop.is_running():
                self._begin(probe)

    def _here(self) -> tuple[Probe, ...]:
        """The probes, once the parent's are forgotten in a forked child (with or without hooks).

        The one fork mechanism of the monitor: every entry point checks the
        pid. A child forked from C runs no at-fork hook, and its loops can
        start before its first collection: the lock a parent's thread may
        have held at the fork is renewed here, before any use.
        """
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._lock = threading.Lock()
            probes, self._probes = self._probes, ()
            for probe in probes:
                # Not paused: their loops belong to threads that do not exist here.
                probe.forget()
            self._watch.forked()
        return self._probes

    # --- reads, in any thread

    def read_delays(self) -> dict[str, Delays]:
        """Delays of each loop since the previous call, by label; drops closed loops."""
        windows: dict[str, Window] = {}
        for probe, label in self._drain(DELAYS):
            window = probe.take()
            prior = windows.get(label)
            if prior is not None:
                window.merge(prior)
            windows[label] = window
        return {label: window.summary() for label, window in windows.items()}

    def read_utilization(self) -> dict[str, float | None]:
        """Utilisation of each loop since the previous call, by label; drops closed loops.

        ``None`` for a loop that did not run.
        """
        now = time.monotonic()
        totals: dict[str, tuple[float, float, bool]] = {}
        for probe, label in self._drain(UTILIZATION):
            d_run, d_idle = probe.busy.window(now)
            run, idle, timed = totals.get(label, (0.0, 0.0, False))
            totals[label] = (run + d_run, idle + d_idle, timed or probe.busy.timed)
        return {
            label: utilization(run, idle) if timed else None
            for label, (run, idle, timed) in totals.items()
        }

    def read_stalls(self) -> dict[str, list[Stall]]:
        """The stalls of each loop since the previous call, by label; drops closed loops."""
        stalls: dict[str, list[Stall]] = {}
        for probe, label in self._drain(STALLS):
            taken = probe.take_stalls()
            if taken:
                stalls.setdefault(label, []).extend(taken)
        return stalls

    def _drain(self, part: str) -> list[tuple[Probe, str]]:
        """The probes begun, with their labels, for a read of ``part``.

        A probe whose loop closed is read once by each part measured, then forgotten.
        """
        begun: list[tuple[Probe, str]] = []
        gone: list[Probe] = []
        for probe in self._here():
            closed = probe.closed()
            if probe.label is None:  # not begun yet
                if closed:
                    gone.append(probe)
                continue
            begun.append((probe, probe.label))
            if closed:
                probe.drained.add(part)
                if self.parts <= probe.drained:
                    gone.append(probe)
        if gone:
            with self._lock:
                self._probes = tuple(p for p in self._probes if p not in gone)
        return begun

    # --- the hooks' calls (discovery.Watcher)

    def loop_started(self, loop: asyncio.AbstractEventLoop) -> None:
        """In the loop's thread: probe it from now."""
        probe = self._attach(loop)
        if probe is not None:
            self._label(probe, threading.current_thread())
            self._begin(probe, starting=True)

    def loop_stopped(self, loop: asyncio.AbstractEventLoop) -> None:
        """In the loop's thread: its probe waits until it runs again."""
        probe = self._find(loop)
        if probe is not None:
            probe.pause()

    def loop_running(self, loop: asyncio.AbstractEventLoop) -> None:
        """A loop running in another thread: its probe begins now, from this thread."""
        probe = self._attach(loop)
        if probe is not None:
            self._label(probe, _thread_of(loop))
            self._begin(probe)

    # --- probes

    def _begin(self, probe: Probe, *, starting: bool = False) -> None:
        parts = self.parts
        probe.begin(delays=DELAYS in parts, timed=UTILIZATION in parts, starting=starting)
        if self._watch.parked:
            self._watch.unpark()  # a loop that works before it ever sleeps

    def _find(self, loop: asyncio.AbstractEventLoop) -> Probe | None:
        for probe in self._here():
            if probe.loop_ref() is loop and not probe.dead:
                return probe
        return None

    def _attach(self, loop: asyncio.AbstractEventLoop) -> Probe | None:
        """The loop's probe, made if needed; None if it cannot be probed, or past ``max_loops``."""
        self._here()
        with self._lock:
            probe = self._find(loop)
            if probe is not None:
                return probe
            if len(self._probes) >= self.max_loops:
                self._probes = tuple(p for p in self._probes if not p.closed())
            if len(self._probes) >= self.max_loops:
                return None
            try:
                probe = Probe(loop, self.interval, self.stall)
            except TypeError:
                return None  # not weakly referenceable: cannot probe without keeping it alive
            if not probe.probed:
                return None  # uvloop, a clock of its own, or a select that is not the selector's
            probe.watch = self._watch
            self._probes = (*self._probes, probe)
            return probe

    def _label(self, probe: Probe, thread: threading.Thread | None) -> None:
        """Name the probe after its thread, unique among loops that are not closed.

        A closed loop of the same name hands over its last window of delays instead.
        """
        if probe.label is not None:
            return
        name = thread.name if thread is not None else "unknown"
        base = _DEFAULT_THREAD_NAME.sub("Thread", name)
        with self._lock:
            taken: set[str] = set()
            handed_over: list[Probe] = []
            for other in self._probes:
                if other.label is None:  # not begun yet (this probe among them)
                    continue
                if other.closed():
                    if other.label == base:
                        probe.window.merge(other.take())
                        handed_over.append(other)
                    continue
                taken.add(other.label)
            if handed_over:
                self._probes = tuple(p for p in self._probes if p not in handed_over)
            label, n = base, 1
            while label in taken:
                n += 1
                label = f"{base}#{n}"
            probe.thread_id = thread.ident if thread is not None else None
            probe.label = label


def _thread_of(loop: asyncio.AbstractEventLoop) -> threading.Thread | None:
    """The thread running ``loop``, found by the id that asyncio's loops keep while they run."""
    ident = getattr(loop, "_thread_id", None)
    for thread in threading.enumerate():
        if thread.ident == ident:
            return thread
    return None


def watch_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Probe ``loop``, an event loop that was already running when reporting started.

    A loop that starts (or starts again) while reporting runs is found without
    this call. The loop is remembered, weakly, for every later ``instrument()``.
    Raises ``ValueError`` if ``loop`` is not an asyncio event loop.
    """
    if not isinstance(loop, asyncio.AbstractEventLoop):
        raise ValueError(f"loop must be an asyncio event loop; got {excerpt(loop, 40)}")
    hooks.watch(loop)
