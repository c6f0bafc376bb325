"""One probe on one loop: a timer that records how late it runs, and the loop's busy time.

Each tick reads ``loop.time()``, adds how far past its due time it runs (the
delay, in seconds) to the current :class:`~.window.Window`, and schedules the
next tick one interval later.
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

from .select_timing import Busy, time_select, untime_select
from .window import Window


class Probe:
    """One timer on one loop, owned by one monitor."""

    def __init__(self, loop: asyncio.AbstractEventLoop, interval: float) -> None:
        self.loop_ref: weakref.ref[asyncio.AbstractEventLoop] = weakref.ref(loop)
        self.interval = interval
        self.label: str | None = None
        """Set when it first begins, in the loop's thread."""
        self.lock = threading.Lock()
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
        self.timing: tuple[Any, Any] | None = None
        """(selector, wrapper) while the loop's ``select`` is timed."""

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
        if timed and self.timing is None:
            self.timing = time_select(loop, self.busy)
        if tick and self.handle is None:
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
            delay = now - self.due
            with self.lock:
                self.window.add(delay if delay > 0.0 else 0.0)
            self.schedule(loop, now)
        except Exception:  # noqa: BLE001 - never raise into the application's loop
            self.dead = True

    def pause(self) -> None:
        """The loop stops running: no timer left behind, running time accounted."""
        handle, self.handle = self.handle, None
        if handle is not None:
            handle.cancel()
        self.busy.stopped(time.monotonic())

    # --- in any thread

    def take(self) -> Window:
        """This window's delays; starts the next."""
        with self.lock:
            window, self.window = self.window, Window()
        return window

    def untime(self) -> None:
        timing, self.timing = self.timing, None
        if timing is not None:
            untime_select(*timing)

    def detach(self) -> None:
        """Stop for good; the pending tick is cancelled in the loop's thread."""
        self.dead = True
        self.untime()
        loop = self.loop_ref()
        if loop is None or loop.is_closed():
            return
        if asyncio.events._get_running_loop() is loop:
            self.pause()
            return
        with contextlib.suppress(RuntimeError):  # closed meanwhile: its timers went with it
            loop.call_soon_threadsafe(self.pause, context=self.context)
