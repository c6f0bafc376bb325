"""How a child process ended, as the attributes of ``process_metrics.tree.process.exits``.

Declared once, here: the key of the tree's exits (``children.py``), its bounded
values, and the key of a wait status (``child_exits.py``). Nothing here knows
about OpenTelemetry.
"""

from __future__ import annotations

import signal

from .base import Key, attributes

EXIT = attributes("process_metrics.exit.cause", "process_metrics.exit.signal", "process.exit.code")
"""Why a child ended (one of :data:`CAUSES`); the signal that ended it, for ``signal``,
``oom_kill`` and ``timeout`` (``SIGKILL``...); its exit code (0 to 255, the semantic
conventions' attribute), for ``exit``, ``error`` and ``timeout``."""

CLEAN, ERROR, SIGNALED, OOM_KILL, TIMEOUT, UNKNOWN = (
    "exit",
    "error",
    "signal",
    "oom_kill",
    "timeout",
    "unknown",
)
CAUSES = (CLEAN, ERROR, SIGNALED, OOM_KILL, TIMEOUT, UNKNOWN)
OOM_KILLED = EXIT((OOM_KILL, "SIGKILL", None))
SEEDED = (EXIT((CLEAN, None, 0)), OOM_KILLED, EXIT((UNKNOWN, None, None)))
"""Points reported from the start at 0, one per cause that has one set of attributes: a
backend's ``increase()`` then sees the first of them."""


def signal_name(number: int) -> str:
    """``SIGTERM`` for 15: the names of ``signal.Signals``, real-time ones as ``SIGRTMIN+n``."""
    try:
        return signal.Signals(number).name
    except ValueError:
        low = getattr(signal, "SIGRTMIN", None)
        if low is not None and number > int(low):
            return f"SIGRTMIN+{number - int(low)}"
        return f"SIG{number}"  # bounded: 7 bits


def cause(status: int | None, timeout: bool = False) -> Key:
    """The key of an end with wait status ``status`` (``None``: not known)."""
    if status is None:
        return EXIT((TIMEOUT if timeout else UNKNOWN, None, None))
    number = status & 0x7F
    if number == 0:  # exited
        code = (status >> 8) & 0xFF
        return EXIT((TIMEOUT if timeout else CLEAN if code == 0 else ERROR, None, code))
    return EXIT((TIMEOUT if timeout else SIGNALED, signal_name(number), None))
