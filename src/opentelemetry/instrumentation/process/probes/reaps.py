"""How each child that this process reaped ended: a pass-through wrapper of the ``os`` wait calls.

The exit status of a child is known only to the process that reaps it, and a
pre-fork master reaps at once (gunicorn on ``SIGCHLD``, ``multiprocessing``
and billiard when they poll or join): ``/proc`` holds nothing of it later.
So in supervisor mode, while at least one subscriber wants them,
``os.waitpid``, ``os.wait``, ``os.wait3``, ``os.wait4`` and ``os.waitid`` are
wrapped. Each wrapper calls what it replaced with the caller's arguments and
returns its result, the very object, or lets its exception through; then, if
the call reaped a child (not a stopped or continued one, nor a ``WNOWAIT``
peek), it appends ``(pid, status, False, when, reaper)`` to a bounded queue.
Nothing else: the cause is worked out at the next collection
(``sources/child_exits.py``).

Transparent to the program
    The note is made with operations that cannot raise on the types the
    original returns (a type check first, for a caller's own wrapper that
    returns something else), and no ``try`` around it: an exception that a
    signal handler raises while the note is made (gunicorn 22 and 23 reap in
    their ``SIGCHLD`` handler) reaches the program as it would have at its
    own next instruction, never swallowed. The wrappers are removed by the
    last ``unsubscribe()``, each only if ``os`` still holds it: one that
    someone wrapped again stays, as a pass-through that notes nothing.

Forks
    A forked child keeps the wrappers and the queue: each note carries the
    pid of the process that reaped, and a drain keeps only its own process's.

:func:`gunicorn_child_exit` is gunicorn's ``child_exit`` hook: it marks a
worker that the arbiter aborted for its timeout (``worker.aborted``, set by
``Arbiter.murder_workers`` before it sends ``SIGABRT``). Nothing here knows
about OpenTelemetry.
"""

from __future__ import annotations

import collections
import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

WAITS = ("waitpid", "wait", "wait3", "wait4", "waitid")
"""The ``os`` functions that reap a child and say how it ended."""
MAX_KEPT = 4096
"""Notes kept between two drains, for each subscriber; the oldest go first (one collection
seldom sees so many)."""

_STOPPED = 0x7F
"""The low 7 bits of a stopped child's status, and of a continued one's (``0xffff``)."""


class Reaped(NamedTuple):
    """One child reaped by this process, or a server's mark on one."""

    pid: int
    status: int | None
    """Its wait status, as ``os.waitpid`` gives it; ``None`` for a mark."""
    timeout: bool
    """A mark: the server killed it for its timeout."""
    at: float
    """When, on the ``time.monotonic()`` clock."""
    by: int
    """The process that reaped it."""


class Reaps:
    """The process-wide wrappers, installed while at least one subscriber wants the notes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.notes: collections.deque[tuple[int, int | None, bool, float, int]] = collections.deque(
            maxlen=MAX_KEPT
        )
        self.subscribers: dict[int, list[Reaped]] = {}
        """Each subscriber's notes not yet drained, by its token."""
        self.active = False
        """Whether the wrappers note anything: while someone is subscribed."""
        self.installed: list[tuple[str, Any, Any]] = []
        """``(name, original, wrapper)`` of each ``os`` function wrapped."""
        self.left: list[tuple[str, Any, Any]] = []
        """Wrappers left in place at the last removal, someone having wrapped them again."""
        self._tokens = 0

    def subscribe(self) -> int:
        """A token to drain with; installs the wrappers for the first subscriber."""
        with self._locked():
            self._tokens += 1
            self.subscribers[self._tokens] = []
            if not self.installed:
                self._install()
            self.active = True
            return self._tokens

    def unsubscribe(self, token: int) -> None:
        """Stop noting for ``token``; the last one removes the wrappers that are still ours."""
        with self._locked():
            self.subscribers.pop(token, None)
            if not self.subscribers:
                self.active = False
                self.notes.clear()
                self._uninstall()

    def drain(self, token: int) -> list[Reaped]:
        """What this process reaped since ``token``'s last drain, oldest first."""
        me = os.getpid()
        with self._locked():
            notes = self.notes
            while notes:
                note = Reaped(*notes.popleft())
                if note.by != me:
                    continue  # the parent's, before a fork
                for pending in self.subscribers.values():
                    pending.append(note)
            for pending in self.subscribers.values():
                del pending[:-MAX_KEPT]  # one that never drains keeps the latest only
            found = self.subscribers.get(token)
            if found is None:
                return []
            self.subscribers[token] = []
            return found

    def mark_timeout(self, pid: int) -> None:
        """Note that the server killed ``pid`` for its timeout (after it reaped it)."""
        if self.active:
            self.notes.append((pid, None, True, time.monotonic(), os.getpid()))

    def _locked(self) -> threading.Lock:
        """The lock, renewed in a child forked without Python's at-fork hooks (a C server)."""
        if self.pid != os.getpid():
            self.pid = os.getpid()
            self.lock = threading.Lock()
        return self.lock

    def _install(self) -> None:
        if not hasattr(os, "WIFEXITED"):  # Windows: no wait statuses to read
            return
        for name in WAITS:
            original = getattr(os, name, None)
            if original is None:
                continue
            kept = self._still_wrapped(name, original)
            if kept is not None:  # ours is still called: take it back rather than wrap twice
                self.installed.append(kept)
                continue
            make = _wrap_waitid if name == "waitid" else _wrap_wait
            wrapper = functools.update_wrapper(make(self, original), original)
            setattr(os, name, wrapper)
            self.installed.append((name, original, wrapper))

    def _uninstall(self) -> None:
        while self.installed:
            name, original, wrapper = self.installed.pop()
            if getattr(os, name, None) is wrapper:
                setattr(os, name, original)
            else:  # wrapped again by someone else: ours stays, and notes nothing
                self.left.append((name, original, wrapper))

    def _still_wrapped(self, name: str, current: Any) -> tuple[str, Any, Any] | None:
        """Our wrapper of ``name`` left in place, if ``current`` still calls it."""
        ours = {w: (n, o, w) for n, o, w in self.left if n == name}
        seen = 0
        while current is not None and seen < 32:  # pragma: no mutate - a bound on a chain
            if current in ours:
                kept = ours[current]
                self.left.remove(kept)
                return kept
            current = getattr(current, "__wrapped__", None)
            seen += 1
        return None


def _wrap_wait(
    reaps: Reaps,
    original: Callable[..., Any],
    _now: Callable[[], float] = time.monotonic,
    _getpid: Callable[[], int] = os.getpid,
    _type: Any = type,
    _tuple: Any = tuple,
    _int: Any = int,
    _len: Any = len,
) -> Callable[..., Any]:
    """A wrapper of ``waitpid``, ``wait``, ``wait3`` or ``wait4``: ``(pid, status, ...)``.

    The builtins are bound once: the call that reaps nothing (``(0, 0)``) costs
    a frame and a few comparisons more than the original.
    """
    append = reaps.notes.append

    def wait(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if _type(result) is _tuple and _len(result) > 1 and reaps.active:
            pid = result[0]
            if _type(pid) is _int and pid > 0:
                status = result[1]
                if _type(status) is _int and status & _STOPPED != _STOPPED:
                    append((pid, status, False, _now(), _getpid()))
        return result

    return wait


def _wrap_waitid(
    reaps: Reaps,
    original: Callable[..., Any],
    _now: Callable[[], float] = time.monotonic,
    _getpid: Callable[[], int] = os.getpid,
) -> Callable[..., Any]:
    """A wrapper of ``waitid``: a ``waitid_result``, or ``None`` (``WNOHANG``, nothing ended)."""
    append = reaps.notes.append
    result_type = getattr(os, "waitid_result", None)
    peek = getattr(os, "WNOWAIT", 0)
    exited = getattr(os, "CLD_EXITED", 1)
    killed = getattr(os, "CLD_KILLED", 2)
    dumped = getattr(os, "CLD_DUMPED", 3)

    def waitid(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if (
            reaps.active
            and result_type is not None
            and type(result) is result_type
            and len(args) == 3
            and type(args[2]) is int
            and not args[2] & peek  # a peek: the child is reaped by a later call
        ):
            code, value, pid = result.si_code, result.si_status, result.si_pid
            if type(pid) is int and type(value) is int and pid > 0:
                if code == exited:
                    append((pid, (value & 0xFF) << 8, False, _now(), _getpid()))
                elif code == killed:
                    append((pid, value & 0x7F, False, _now(), _getpid()))
                elif code == dumped:
                    append((pid, (value & 0x7F) | 0x80, False, _now(), _getpid()))
        return result

    return waitid


reaps = Reaps()
"""The one set of wrappers of this process."""


def gunicorn_child_exit(server: Any, worker: Any) -> None:
    """gunicorn's ``child_exit`` hook: counts a worker killed for its timeout as ``timeout``.

    In the master's gunicorn config::

        from opentelemetry.instrumentation.process import gunicorn_child_exit as child_exit

    or call it from a ``child_exit`` of your own. gunicorn's arbiter sets
    ``worker.aborted`` before it sends ``SIGABRT`` to a worker past its
    ``--timeout`` (then ``SIGKILL`` if it is still there at the next check);
    without this hook, the worker's end is counted by its status alone: a
    ``SIGKILL`` (possibly taken for an OOM kill), or the code it exited with
    (a sync worker swallows the ``SIGABRT``'s ``SystemExit`` and exits 0).
    The hook never raises, and does nothing unless this process reports its
    children (``children=True``).
    """
    pid = getattr(worker, "pid", None)
    if getattr(worker, "aborted", False) is True and type(pid) is int:
        reaps.mark_timeout(pid)
