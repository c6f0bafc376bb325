"""What blocked a loop: a thread that looks, only while a loop is overdue, at what it runs.

A probe's hook (:mod:`.probe`) notes when its loop last came back from
``select``. One daemon thread, the *watch*, wakes when a loop that works has
not called ``select`` for ``stall`` seconds, and looks at what the loop's
thread runs at that moment, from outside (it puts nothing in the loop):

- the innermost Python frame of the loop's thread (``sys._current_frames()``):
  the code that holds the loop, named ``module.qualname``;
- the handle the loop runs (the ``self`` of asyncio's ``Handle._run`` frame),
  whose ``contextvars`` context is the task's or the callback's: the span it
  runs under, for the instruments side.

When the stall ends, the probe keeps its length with what was seen.

What it costs: nothing in the loop. The watch sleeps until the moment the
loop it watches would be stalled, so it wakes at most once per ``stall``
seconds while a loop works, and not at all while every loop sleeps in
``select`` (the hook wakes it when one comes back). A loop that blocks in C
without releasing the GIL is seen only once the block ends: the watch needs
the GIL to look, and the stall is then kept without a name.
"""

from __future__ import annotations

import contextvars
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol


class Watched(Protocol):
    """What the watch reads of a probe (:class:`.probe.Probe`)."""

    ran_at: float
    stall: float
    dead: bool
    seen: Stall | None
    thread_id: int | None


class Stall:
    """One stretch of ``seconds`` in which the loop ran no ``select``, from ``began``.

    ``code`` and ``context`` are what :mod:`.stalls` saw running in the loop's
    thread meanwhile (``module.qualname``; the handle's ``contextvars``
    context), or ``None``.
    """

    __slots__ = ("began", "code", "context", "seconds")

    def __init__(self, began: float, seconds: float) -> None:
        self.began = began
        self.seconds = seconds
        self.code: str | None = None
        self.context: Any = None


THREAD_NAME = "process-metrics-loop-stalls"
MAX_NAMES = 50
"""Distinct code names kept per process; later ones read ``OTHER`` (a bounded attribute)."""
OTHER = "(other)"
MAX_NAP = 60.0
"""The longest sleep of the watch between two looks (a timeout must be finite)."""


class Watch:
    """The thread that names stalls in progress; started while at least one loop is probed."""

    __slots__ = ("_names", "_probes", "_thread", "_wake", "parked", "running")

    def __init__(self, probes: Callable[[], tuple[Watched, ...]]) -> None:
        self._probes = probes
        """The probes to watch, read afresh at each wake."""
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._names: set[str] = set()
        self.parked = False
        """Asleep until a loop comes back from ``select`` (the hook calls :meth:`unpark`)."""
        self.running = False

    def start(self) -> None:
        if self.running:
            return
        self._wake = threading.Event()
        thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
        self.running = True
        try:
            thread.start()
        except RuntimeError:  # at interpreter shutdown: stalls go unnamed
            self.running = False
            return
        self._thread = thread

    def stop(self) -> None:
        """Stop at once; does not wait for the thread."""
        self.running = False
        self._wake.set()

    def forked(self) -> None:
        """In a forked child: the thread is gone; one starts again if it ran, and it is safe.

        Not in a child forked from C (uWSGI's default): without Python's own
        clean-up after a fork, the parent's thread states are still listed,
        and ``sys._current_frames()`` walks them (a crash on 3.11, seen in a
        test). Stalls are recorded there, without a name.
        """
        was, self.running, self.parked = self.running, False, False
        if was and not _parents_threads_listed():
            self.start()

    def unpark(self) -> None:
        """A loop came back from ``select``: watch again."""
        self.parked = False
        self._wake.set()

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:  # noqa: BLE001 - a fault of ours: stop naming, never raise in a thread
            self.running = False

    def _watch(self) -> None:
        wake = self._wake
        while self.running:
            due = self._look(time.monotonic())
            if due is None:
                # Every loop sleeps in select (or none runs): park. The flag is
                # set before the loops are read again, and the hook sets its
                # loop's time before it reads the flag: one of the two sees it.
                self.parked = True
                if self._look(time.monotonic()) is None:
                    wake.wait()
                self.parked = False
            else:
                wake.wait(min(MAX_NAP, max(0.0, due - time.monotonic())))
            wake.clear()

    def _look(self, now: float) -> float | None:
        """Name each loop stalled now; when the next could be, or ``None`` if none works."""
        due: float | None = None
        for probe in self._probes():
            ran = probe.ran_at
            if not ran or probe.dead or probe.stall == math.inf:
                continue  # in select, stopped (no stall runs), or gone
            stalled_at = ran + probe.stall
            if now < stalled_at:
                due = stalled_at if due is None else min(due, stalled_at)
                continue
            seen = probe.seen
            if seen is None or seen.began != ran:
                self._name(probe, ran)
            # Looked at: again only once it has worked for another stall's length.
            later = now + probe.stall
            due = later if due is None else min(due, later)
        return due

    def _name(self, probe: Watched, ran: float) -> None:
        if not getattr(sys, "_is_gil_enabled", lambda: True)():
            return  # another thread's frames run meanwhile: not read without the GIL
        frame = sys._current_frames().get(probe.thread_id or -1)
        if frame is None:
            return
        stall = Stall(ran, 0.0)
        stall.code = self._bounded(_code_name(frame))
        stall.context = _running_context(frame)
        if probe.ran_at == ran:  # still the same stall: what was seen belongs to it
            probe.seen = stall

    def _bounded(self, name: str) -> str:
        names = self._names
        if name in names:
            return name
        if len(names) >= MAX_NAMES:
            return OTHER
        names.add(name)
        return name


def _parents_threads_listed() -> bool:
    """Whether this process still lists threads it does not have (a fork from C), or may."""
    try:
        tasks = set(os.listdir("/proc/self/task"))
    except OSError:  # no /proc: forks from C are a Linux server's; elsewhere, Python's
        return sys.platform.startswith("linux")
    current = threading.current_thread()
    return any(
        t is not current and t.native_id is not None and str(t.native_id) not in tasks
        for t in threading.enumerate()
    )


def _code_name(frame: FrameType) -> str:
    """``module.qualname`` of the frame's function."""
    code = frame.f_code
    qualname = getattr(code, "co_qualname", code.co_name)  # 3.11+
    module = frame.f_globals.get("__name__")
    return f"{module}.{qualname}" if isinstance(module, str) else str(qualname)


_RUN = None


def _running_context(frame: FrameType | None) -> Any:
    """A copy of the ``contextvars`` context of the asyncio handle running in ``frame``'s stack.

    A copy: the handle's context changes as its code runs on (a span ends),
    and what ran during the stall is what it held now. ``None`` if no handle runs.
    """
    global _RUN
    if _RUN is None:
        import asyncio.events

        _RUN = asyncio.events.Handle._run.__code__
    while frame is not None:
        if frame.f_code is _RUN:
            context = getattr(frame.f_locals.get("self"), "_context", None)
            return context.copy() if isinstance(context, contextvars.Context) else None
        frame = frame.f_back
    return None
