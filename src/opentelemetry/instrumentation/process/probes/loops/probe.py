"""One probe on one loop: ticks that record how late they run, and the loop's busy time.

Each tick reads ``loop.time()``, adds how far past its due time it runs (the
delay, in seconds) to the current :class:`~.window.Window`, and the next tick
falls due one interval later.

On a loop whose ``select`` can be hooked (asyncio's selector loops), the
probe never wakes the loop. A tick does not set the next timer: it *parks*,
and the loop's next ``select`` takes over (:meth:`Probe.parked_select`).
That ``select`` sees what the timer would have seen:

- called past the due time: the loop was busy since its previous ``select``,
  so a tick due then would run now, this late (one delay, as a late tick);
- waiting: the loop sleeps, and every tick that falls due while it sleeps
  would run on time (a delay of 0, counted without waking the loop);
- called more than ``PARKED_SELECTS`` times in one interval: the loop is
  busy, and the timer is set again at the due time (cheaper than a hook on
  every ``select``).

Other loops (uvloop) keep the timer: one wake every interval.
"""

from __future__ import annotations

import asyncio
import asyncio.events
import contextlib
import contextvars
import threading
import time
import weakref
from typing import Any

from .select_timing import Busy, hookable, time_select
from .window import Window

PARKED_SELECTS = 8
"""``select`` calls of a parked loop within one interval beyond which the timer is set again.

A loop that wakes for a timer of its own selects about 3 times (the wake,
then the callbacks it made ready, then the sleep); one that does that more
than twice in an interval, or has work ready again and again, is busy.
"""


class Probe:
    """The ticks on one loop, and its busy time; owned by one monitor."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self.loop_ref: weakref.ref[asyncio.AbstractEventLoop] = weakref.ref(loop)
        self.interval = interval
        self.label: str | None = None
        """Set when it first begins, in the loop's thread."""
        self.lock = threading.Lock()
        """Guards the window, the due time while parked, and the hooks on ``select``."""
        self.window = Window()
        self.busy = Busy()
        self.handle: asyncio.TimerHandle | None = None
        self.due = 0.0
        self.dead = False
        self.drained: set[str] = set()
        """The readings that took this probe's last window since its loop closed."""
        # Ticks run in an empty context: no copy per tick, and no reference
        # to whatever context values the code starting the loop had.
        self.context = contextvars.Context()
        self.ticking = False
        """Delays are measured on the running loop: a tick is pending, or parked."""
        self.parked = False
        """No tick pending: the loop's next ``select`` measures instead."""
        self.asleep = False
        """In the parked ``select``: the ticks due meanwhile run on time."""
        self.selects = 0
        """Parked ``select`` calls since a tick last fell due."""
        self.selector, self.select = hookable(loop)
        """The loop's selector and its own ``select`` (bound), if it can be hooked."""
        # Parking compares the due time with time.monotonic(): the loop's clock must be it.
        self.parkable = self.selector is not None and _monotonic_clock(loop)
        self.timed: Any = None
        """The timing wrapper of ``select`` while the utilisation is measured."""
        self.hook = self.parked_select  # one bound method, recognised on the selector

    def closed(self) -> bool:
        """Whether its loop is closed or gone, or the probe stopped for good."""
        loop = self.loop_ref()
        return self.dead or loop is None or loop.is_closed()

    # --- in the loop's thread

    def begin(self, loop: asyncio.AbstractEventLoop, *, tick: bool, timed: bool) -> None:
        """The loop runs: count its running time, and tick and time ``select`` as asked.

        Each part starts once; calling it again adds the parts asked for since.
        """
        if self.dead:
            return
        self.busy.started(time.monotonic())
        if timed and self.timed is None and self.selector is not None:
            self.timed = time_select(self.select, self.busy)
            with self.lock:
                if not self._set_hook():
                    self.timed, self.busy.timed = None, False
        if tick and not self.ticking:
            self.ticking = True
            self.due = loop.time() + self.interval
            self.handle = loop.call_at(self.due, self.tick, context=self.context)

    def tick(self) -> None:
        self.handle = None
        loop = self.loop_ref()
        if loop is None:
            return
        try:
            now = loop.time()
            with self.lock:
                if self.dead:
                    return
                delay = now - self.due
                self.window.add(delay if delay > 0.0 else 0.0)
                self.due = now + self.interval
                if self.parkable:
                    self.parked, self.selects = True, 0
                    if self._set_hook():
                        return
                    self.parked = self.parkable = False  # someone else's select now
            self.handle = loop.call_at(self.due, self.tick, context=self.context)
        except Exception:  # noqa: BLE001 - never raise into the application's loop
            self.dead = True

    def parked_select(self, timeout: float | None = None) -> Any:
        """The loop's ``select`` while the probe is parked: see the module's docstring."""
        select = self.timed or self.select
        if not self.parked:  # kept by someone's wrapper since: a plain select
            return select(timeout)
        waits = timeout != 0
        with self.lock:
            self._late(time.monotonic())
            self.selects += 1
            if waits:
                self.asleep = True
            elif self.selects > PARKED_SELECTS:
                self._unpark()  # the timer is seen as soon as this select returns
        if not waits:
            return select(timeout)
        try:
            return select(timeout)
        finally:
            with self.lock:
                self.asleep = False
                if self.parked:
                    self._on_time(time.monotonic())
                    # Not before a wait: the loop's timeout, reckoned without the
                    # timer, could let it sleep past the timer's due time.
                    if self.selects > PARKED_SELECTS:
                        self._unpark()

    def pause(self) -> None:
        """The loop stops running: no timer or parked hook left behind, running time accounted."""
        handle, self.handle = self.handle, None
        if handle is not None:
            handle.cancel()
        with self.lock:
            self.ticking = False
            if self.parked:
                self.parked = False
                self._set_hook()
        self.busy.stopped(time.monotonic())

    # --- with the lock held

    def _late(self, now: float) -> None:
        """Called at ``now`` by the parked loop: a tick due since ran this late."""
        if now >= self.due:
            self.window.add(now - self.due)
            self.due, self.selects = now + self.interval, 0

    def _on_time(self, now: float) -> None:
        """The parked loop slept until ``now``: each tick due meanwhile ran on time."""
        if now >= self.due:
            passed = int((now - self.due) / self.interval) + 1
            self.window.add_on_time(passed)
            self.due += passed * self.interval
            self.selects = 0

    def _unpark(self) -> None:
        """The loop has work: the timer again, due when the next tick is."""
        self.parked = False
        self._set_hook()
        loop = self.loop_ref()
        if loop is not None:  # a pause, queued by detach(), cancels it if it is dead
            self.handle = loop.call_at(self.due, self.tick, context=self.context)

    def _set_hook(self) -> bool:
        """Put on the selector the ``select`` the state asks for; False if another is there.

        Parked: :meth:`parked_select`; else the timing wrapper, or the
        selector's own. Someone else's wrapper is never replaced.
        """
        selector = self.selector
        current = selector.select
        own = current == self.select  # the class's method: nothing on the instance
        if not own and current is not self.timed and current is not self.hook:
            return False
        wanted = self.hook if self.parked else self.timed
        if wanted is not None:
            selector.select = wanted
        elif not own:
            del selector.select
        return True

    # --- in any thread

    def take(self) -> Window:
        """This window's delays; starts the next."""
        with self.lock:
            if self.asleep:
                self._on_time(time.monotonic())
            window, self.window = self.window, Window()
        return window

    def unhook(self) -> None:
        """Take the probe's ``select`` hooks off the selector (theirs, if wrapped since, stay)."""
        with self.lock:
            if self.selector is not None:
                current = self.selector.select
                if current is self.timed or current is self.hook:
                    del self.selector.select
            self.timed = None

    def detach(self) -> None:
        """Stop for good; the pending tick is cancelled in the loop's thread."""
        self.dead = True
        self.unhook()
        loop = self.loop_ref()
        if loop is None or loop.is_closed():
            return
        if asyncio.events._get_running_loop() is loop:
            self.pause()
            return
        with contextlib.suppress(RuntimeError):  # closed meanwhile: its timers went with it
            loop.call_soon_threadsafe(self.pause, context=self.context)

    def forget(self) -> None:
        """In a forked child: stop for good; the parent's threads, and their locks, are gone."""
        self.dead = True
        self.lock = threading.Lock()  # may have been held by a thread of the parent
        self.unhook()


def _monotonic_clock(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop.time()`` is asyncio's: ``time.monotonic()``."""
    return getattr(type(loop), "time", None) is asyncio.BaseEventLoop.time
