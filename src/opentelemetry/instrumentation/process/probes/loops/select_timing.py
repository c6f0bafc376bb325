"""How busy a selector loop is: its running time and its time waiting in ``select``.

The probe's hook (:mod:`.probe`) reads ``time.monotonic()`` around each
``select`` that may wait; utilisation is ``1 - idle / running`` over a
window, from 0 to 1. Loops without a Python selector (uvloop) are not probed.
"""

from __future__ import annotations

from typing import Any


class Busy:
    """Running and idle (in ``select``) seconds of one loop, written by its thread only.

    Each state is one ``(total, since)`` tuple, replaced in one assignment, so
    the reader sees a consistent pair without a lock. ``since`` is the start of
    the current period, 0.0 outside one.
    """

    __slots__ = ("idle", "prev", "run", "timed")

    def __init__(self) -> None:
        self.run = (0.0, 0.0)
        self.idle = (0.0, 0.0)
        self.timed = False
        """Whether ``select`` is timed (selector loops only)."""
        self.prev = (0.0, 0.0)  # (run, idle) totals at the previous window

    def started(self, now: float) -> None:
        total, since = self.run
        if not since:
            self.run = (total, now)

    def stopped(self, now: float) -> None:
        """The loop stops: its running period ends, and a ``select`` left by an exception too."""
        total, since = self.run
        if since:
            self.run = (total + now - since, 0.0)
        total, since = self.idle
        if since:
            self.idle = (total + now - since, 0.0)

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


def utilization(d_run: float, d_idle: float) -> float | None:
    """Busy share of ``d_run`` running seconds with ``d_idle`` idle; ``None`` if it did not run."""
    if d_run <= 0.0:
        return None
    return min(1.0, max(0.0, 1.0 - d_idle / d_run))


def hookable(loop: Any) -> tuple[Any, Any]:
    """(selector, its own ``select``) of a loop whose ``select`` can be hooked; (None, None) if not.

    Not when there is no Python selector (uvloop), when its instances have no
    ``__dict__`` (nowhere to put a hook), or when its ``select`` is wrapped by
    someone else already (left alone rather than measured through theirs).
    The selector's ``__dict__`` is never read: in CPython 3.11+ that makes the
    instance keep a real dict, and every attribute read of the selector (a few
    in each ``select``) a little slower for good.
    """
    selector: Any = getattr(loop, "_selector", None)
    select = getattr(selector, "select", None)
    kind = type(selector)
    if (
        not kind.__dictoffset__
        # The class's own method, bound to this selector: nothing on the instance.
        or getattr(select, "__self__", None) is not selector
        or getattr(select, "__func__", None) is not getattr(kind, "select", None)
    ):
        return None, None
    return selector, select
