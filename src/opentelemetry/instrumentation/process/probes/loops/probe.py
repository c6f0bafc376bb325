"""One probe on one loop: how late the loop runs, read from its own ``select`` calls.

The probe puts nothing in the loop's queues: no timer, no callback, no task.
It replaces the loop's selector's ``select`` (an attribute of that one
selector object) by a hook that calls the selector's own and reads
``time.monotonic()`` around it. What a timer of the probe's would have
measured follows from those reads, with virtual *ticks* falling due every
``interval`` seconds:

- a tick due while the loop worked (before a ``select`` was called at ``s``)
  would have run once the loop got back to its ``select``: its delay is
  ``s - due``;
- a ``select`` that waits, called at ``s`` with timeout ``T``, was due back at
  ``s + T``; it came back at ``r``, after its wake-up, any wait for a CPU and
  any wait for the GIL. Every tick due while it waited would have woken the
  loop and paid the same: ``r - (s + T)`` (0 if it came back early, woken by
  I/O, whose arrival time Python cannot see); a tick due after ``s + T``
  waited ``r - due``;
- a ``select`` that cannot wait (timeout 0, work is ready) came back at ``r``:
  every tick due by then ran at ``r``.

So a loop that sleeps is never woken by its probe, and a loop that wakes late
because another thread holds the GIL reads late. Loops whose ``select`` cannot
be hooked (uvloop, which runs its loop in C; Windows' proactor loop; a
selector without ``__dict__``), or whose clock is not ``time.monotonic()``
(virtual time, as asyncio's own test loop), are not probed: see
docs/runtime.md.

The same reads give the loop's busy time (the utilisation) and its *stalls*:
stretches between two ``select`` calls longer than ``stall`` seconds, which
:mod:`.stalls` names.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import weakref
from typing import Any

from .select_timing import Busy, hookable
from .stalls import Stall, Watch
from .window import Window

MAX_STALLS = 16
"""Stalls kept per loop between two reads; the longest are kept."""


class Probe:
    """The hook on one loop's ``select``, its delays, busy time and stalls; owned by one monitor."""

    __slots__ = (
        "__weakref__",
        "busy",
        "dead",
        "delays",
        "drained",
        "due",
        "hook",
        "interval",
        "label",
        "lock",
        "loop_ref",
        "pid",
        "ran_at",
        "seen",
        "select",
        "selector",
        "sleep",
        "stall",
        "stalls",
        "thread_id",
        "threshold",
        "timed",
        "watch",
        "window",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float, stall: float) -> None:
        self.loop_ref: weakref.ref[asyncio.AbstractEventLoop] = weakref.ref(loop)
        self.interval = interval
        self.threshold = stall
        """Seconds between two ``select`` calls from which a stretch is a stall."""
        self.stall = float("inf")
        """The threshold while the loop runs; infinite while it is stopped (no stall runs)."""
        self.pid = os.getpid()
        """The probe's one fork mechanism: its slow paths check it (see :meth:`_here`)."""
        self.label: str | None = None
        """The loop's thread's name, set when it first begins."""
        self.thread_id: int | None = None
        """``threading.get_ident()`` of the loop's thread, set when it first begins."""
        self.lock = threading.Lock()
        """Guards the window, the stalls, and ``due`` against :meth:`take`."""
        self.window = Window()
        self.busy = Busy()
        self.stalls: list[Stall] = []
        self.seen: Stall | None = None
        """The stall in progress that :mod:`.stalls` looked at, while it lasts."""
        self.watch: Watch | None = None
        """The thread that names stalls, woken by the hook when it parked."""
        self.dead = False
        self.drained: set[str] = set()
        """The readings that took this probe's last window since its loop closed."""
        self.delays = False
        self.timed = False
        self.due = float("inf")
        """When the next tick falls due (``time.monotonic()``); never while not measuring."""
        self.ran_at = 0.0
        """When the loop last came back from ``select``; 0.0 while it waits in one."""
        self.sleep: tuple[float, float | None] | None = None
        """``(called at, timeout)`` of the ``select`` the loop waits in, or ``None``."""
        found: tuple[Any, Any] = hookable(loop) if _monotonic_clock(loop) else (None, None)
        self.selector: Any = found[0]
        """The loop's selector, if the loop can be probed."""
        self.select: Any = found[1]
        """The selector's own ``select`` (bound), if the loop can be probed."""
        self.hook = _hook(self, self.select) if self.select is not None else None

    @property
    def probed(self) -> bool:
        """Whether this loop can be probed at all."""
        return self.hook is not None

    def closed(self) -> bool:
        """Whether its loop is closed or gone, or the probe stopped for good."""
        loop = self.loop_ref()
        return self.dead or loop is None or loop.is_closed()

    # --- in any thread

    def begin(self, *, delays: bool, timed: bool, starting: bool) -> None:
        """The loop runs: measure what is asked (each part starts once).

        ``starting``: called in the loop's thread as it starts, so it works
        from now. Else, from another thread, the loop may sleep in a ``select``
        of its own: measuring starts at its first hooked ``select``.
        """
        if self.dead or self.hook is None:
            return
        now = time.monotonic()
        with self.lock:
            if not self._put_hook():
                self.detach()  # someone else's select is there: left alone
                return
            self.busy.started(now)
            self.stall = self.threshold
            if starting and not self.ran_at:
                self.ran_at = now  # it works from now, until its first select
            if timed:
                self.timed = self.busy.timed = True
            if delays and not self.delays:
                self.delays = True
                # -inf: the first hooked select sets the first due time, and
                # counts nothing before it (a sleep it began unhooked).
                self.due = now + self.interval if starting else float("-inf")

    def pause(self) -> None:
        """The loop stops running: no tick falls due, no stall runs, until it runs again."""
        now = time.monotonic()
        with self.lock:
            self.delays = False
            self.due = float("inf")
            self.stall = float("inf")  # a loop stepped by hand meanwhile has no stalls
            self.sleep = None
            self.ran_at = 0.0
            self.busy.stopped(now)

    def take(self) -> Window:
        """This window's delays; starts the next."""
        with self.lock:
            sleep = self.sleep
            if sleep is not None:
                # Asleep: the ticks due so far, up to when its select was due
                # back, were not late (its wake is not known yet).
                called, timeout = sleep
                until = time.monotonic()
                if timeout is not None:
                    until = min(until, called + timeout)
                self._ticks_until(until, 0.0)
            window, self.window = self.window, Window()
        return window

    def take_stalls(self) -> list[Stall]:
        """The stalls since the previous call."""
        with self.lock:
            stalls, self.stalls = self.stalls, []
        return stalls

    def unhook(self) -> None:
        """Take the hook off the selector (someone's wrapper around it, if any, stays)."""
        selector = self.selector
        if selector is not None and selector.select is self.hook:
            del selector.select

    def detach(self) -> None:
        """Stop for good; a wrapper of someone else's around the hook keeps calling a hook
        that measures nothing from now (no tick falls due, no stall runs)."""
        self.dead = True
        self.due = self.stall = float("inf")
        self.watch = None
        self.unhook()

    def forget(self) -> None:
        """In a forked child: stop for good; the parent's threads, and their locks, are gone."""
        self.lock = threading.Lock()  # may have been held by a thread of the parent
        self.pid = os.getpid()
        self.detach()

    def _here(self) -> bool:
        """Whether this is the process the probe was made in; else it forgets itself.

        A loop forked from one of its own callbacks goes on in the child with
        the hook on its selector: its slow paths take the probe's lock, which a
        thread of the parent (a reader, in :meth:`take`) may have held at the
        fork. They check the pid first (a forked child only ever forgets).
        """
        if self.pid == os.getpid():
            return True
        self.forget()
        return False

    def _failed(self) -> None:
        """A fault of the probe's own, in the loop's select: never raised into the loop."""
        self.detach()

    # --- in the loop's thread, from the hook (slow paths)

    def worked(self, called: float) -> None:
        """A ``select`` is called at ``called``: ticks due while the loop worked ran this late."""
        if not self._here():
            return
        try:
            with self.lock:
                due, interval, window = self.due, self.interval, self.window
                if due == float("-inf"):  # the first hooked select: measure from here
                    self.due = called + interval
                    return
                while due <= called:
                    window.add(called - due)
                    due += interval
                self.due = due
        except Exception:  # noqa: BLE001 - never into the loop
            self._failed()

    def woke(self, called: float, timeout: float | None, back: float) -> None:
        """A ``select`` called at ``called`` that could wait ``timeout`` came back at ``back``."""
        if not self._here():
            return
        try:
            with self.lock:
                if self.due == float("-inf"):  # the first hooked select: measure from here
                    self.due = back + self.interval
                elif timeout is None or back <= called + timeout:
                    self._ticks_until(back, 0.0)  # back early, woken by I/O
                else:
                    due_back = called + timeout
                    self._ticks_until(due_back, back - due_back)
                    self._ticks_until(back, None)
        except Exception:  # noqa: BLE001 - never into the loop
            self._failed()

    def polled(self, back: float) -> None:
        """A ``select`` that could not wait came back at ``back``: ticks due ran then."""
        if not self._here():
            return
        try:
            with self.lock:
                if self.due == float("-inf"):  # the first hooked select: measure from here
                    self.due = back + self.interval
                else:
                    self._ticks_until(back, None)
        except Exception:  # noqa: BLE001 - never into the loop
            self._failed()

    def stalled(self, began: float, seconds: float) -> None:
        """The loop ran no ``select`` for ``seconds`` from ``began``: keep it as a stall."""
        if not self._here():
            return
        try:
            stall = Stall(began, seconds)
            seen = self.seen
            if seen is not None and seen.began == began:
                stall.code, stall.context = seen.code, seen.context
            self.seen = None
            with self.lock:
                stalls = self.stalls
                stalls.append(stall)
                if len(stalls) > MAX_STALLS:
                    stalls.remove(min(stalls, key=_seconds))
        except Exception:  # noqa: BLE001 - never into the loop
            self._failed()

    # --- with the lock held

    def _ticks_until(self, until: float, delay: float | None) -> None:
        """Each tick due by ``until`` ran ``delay`` late, or at ``until`` if ``None``."""
        due = self.due
        if due > until or not self.delays or due == float("-inf"):
            return  # nothing due, not measuring, or not yet since the hook began
        interval = self.interval
        if delay is None:
            while due <= until:
                self.window.add(until - due)
                due += interval
        else:
            count = int((until - due) / interval) + 1
            self.window.add_many(delay, count)
            due += count * interval
        self.due = due

    def _put_hook(self) -> bool:
        """Put the hook on the selector; False if someone else's ``select`` is there."""
        selector = self.selector
        current = selector.select
        if current is self.hook:
            return True
        if current != self.select:  # the class's own method, bound: nothing on the instance
            return False
        selector.select = self.hook
        return True


def _seconds(stall: Stall) -> float:
    return stall.seconds


def _hook(probe: Probe, select: Any) -> Any:
    """The ``select`` the loop calls while probed (the hot path: a few reads per call)."""
    clock = time.monotonic
    busy = probe.busy

    def probed_select(timeout: float | None = None) -> Any:
        if timeout == 0:  # work is ready: a poll, busy time
            ready = select(0)
            back = clock()
            ran_at = probe.ran_at
            if back - ran_at > probe.stall and ran_at:
                probe.stalled(ran_at, back - ran_at)
            probe.ran_at = back
            if back >= probe.due:
                probe.polled(back)
            return ready
        called = clock()
        ran_at = probe.ran_at
        if called - ran_at > probe.stall and ran_at:
            probe.stalled(ran_at, called - ran_at)
        if called >= probe.due:
            probe.worked(called)
        probe.ran_at = 0.0
        probe.sleep = (called, timeout)
        idle = busy.idle
        busy.idle = (idle[0], called)
        ready = select(timeout)
        back = clock()
        busy.idle = (idle[0] + back - called, 0.0)
        probe.sleep = None
        probe.ran_at = back  # before the watch's flag is read: see stalls.Watch._run
        watch = probe.watch
        if watch is not None and watch.parked:
            watch.unpark()  # an Event's set: nothing of ours that can fail
        if back >= probe.due:
            probe.woke(called, timeout, back)
        return ready

    probed_select.__wrapped__ = select  # type: ignore[attr-defined]
    return probed_select


def _monotonic_clock(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop.time()`` is asyncio's: ``time.monotonic()``, the probe's clock."""
    return getattr(type(loop), "time", None) is asyncio.BaseEventLoop.time
