"""Reading one child process (supervisor mode): what the tree needs of each, then its points.

Each read is inside the child's own ``Process.oneshot()`` (the caller's). A
read the master may not make (another user, hidepid, a process not dumpable
after ``setuid``) drops that read's points of that child, logged at most once
per fault period; a child that exits meanwhile drops all of its points.
Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import psutil

from ..linux import stat
from .base import Delta, Key, ReadContext
from .child_slots import Child
from .child_state import PerChild

Row = tuple[str, str, Key, float]
"""One point of a child: ``(source, field, key, value)``."""


class Gone(Exception):
    """The child exited (or vanished from view) during its read."""


class ChildReading(NamedTuple):
    """What the pass reads of every child first; ``None`` where not read, or not readable.

    Its parts other than ``zombie`` and ``ppid`` are what a per-child source may
    take its points from (``PerChild.read``).
    """

    zombie: bool
    ppid: int | None
    """Its parent, read only where the listing did not say."""
    cpu: Any
    """psutil's ``cpu_times()``: user, system and, where given, what it reaped of its children."""
    memory: Any
    """psutil's ``memory_info()``."""
    pss: Any
    """psutil's ``memory_full_info()``."""
    proc_stat: stat.Stat | None
    """Its ``/proc/<pid>/stat``, where it was read directly (for its identity and page faults)."""


def _denied(ctx: ReadContext, what: str, child: Child, exc: BaseException) -> None:
    ctx.faults.warning(
        ("children", what, type(exc).__name__),
        "process metrics: cannot read %s of child process %d (%s: %s): it may belong to "
        "another user, be hidden (hidepid) or not be dumpable after setuid; its %s points "
        "are left out while this lasts. This fault is logged at most once per %.0f s.",
        what,
        child.pid,
        type(exc).__name__,
        exc,
        what,
        ctx.faults.period,
    )


def _try(ctx: ReadContext, what: str, child: Child, read: Callable[[], Any]) -> Any:
    """``read()``; ``None`` if the master may not make it; raises :class:`Gone` if it went."""
    try:
        return read()
    except psutil.ZombieProcess:
        raise Gone from None
    except psutil.NoSuchProcess:
        raise Gone from None
    except (psutil.AccessDenied, PermissionError) as exc:
        _denied(ctx, what, child, exc)
        return None
    except (OSError, psutil.Error, ValueError) as exc:
        _denied(ctx, what, child, exc)
        return None


def identity(pid: int, handle: psutil.Process | None) -> tuple[float, stat.Stat | None]:
    """When ``pid``'s process started, and its stat file where that is read directly.

    A handle from psutil's listing is new at each pass: its create time is this
    process's. Without one (the direct listing), the stat file says.
    """
    if handle is not None:
        return handle.create_time(), None
    found = stat.of_process(pid)
    return float(found.starttime), found


def read_first(
    ctx: ReadContext, child: Child, parts: frozenset[str], found: stat.Stat | None
) -> ChildReading:
    """What the tree and the sources need of every child: its state, and the ``parts`` named."""
    p = child.process
    zombie = _try(ctx, "status", child, p.status) == psutil.STATUS_ZOMBIE
    ppid = _try(ctx, "parent", child, p.ppid) if child.parent is None else None
    cpu = _try(ctx, "cpu", child, p.cpu_times) if "cpu" in parts else None
    alive = not zombie  # a zombie has no memory left to read
    memory = _try(ctx, "memory", child, p.memory_info) if alive and "memory" in parts else None
    pss = _try(ctx, "pss", child, p.memory_full_info) if alive and "pss" in parts else None
    return ChildReading(zombie, ppid, cpu, memory, pss, found)


def read_rest(
    ctx: ReadContext,
    child: Child,
    reading: ChildReading,
    declared: Sequence[PerChild],
    now: float,
) -> list[Row] | None:
    """The points of one kept child, for the per-child sources ``declared``; ``None`` if it went.

    A child that exits during its reads gives nothing, rather than part of its points.
    """
    pid: int | None = child.pid if ctx.options.child_pid else None
    attrs = (child.slot, pid)
    # Kept aside until the child's last read: a child gone meanwhile gives nothing.
    rows: list[Row] = []
    try:
        for source in declared:
            read = source.read
            if isinstance(read, str):
                got = getattr(reading, read)
            else:
                got = _try(ctx, source.what, child, _bound(read, child.process))
            if got is None:
                continue
            counted: dict[str, dict[Key, float]] = {}
            for field, points in source.points.items():
                key = source.fields[field]
                found = counted[field] = {}
                for values, attr in points.items():
                    value = getattr(got, attr, None) if attr else got
                    if value is not None:
                        found[Key(values)] = value
                        rows.append((source.name, field, key((*attrs, *values)), value))
            for field, of in source.rates.items():
                key = source.fields[field]
                for own, v in _rates(ctx, child, source.name, counted[of], now).items():
                    rows.append((source.name, field, key((*attrs, *own)), v))
    except Gone:
        return None
    return rows


def _bound(read: Callable[[psutil.Process], object], process: psutil.Process) -> Callable[[], Any]:
    return lambda: read(process)


def _rates(
    ctx: ReadContext, child: Child, source: str, counted: dict[Key, float], now: float
) -> dict[Key, float]:
    """Each of ``counted``'s change since the child's previous read, per second and per CPU."""
    cpus = ctx.facts.available_cpus or 0.0
    if not cpus:
        return {}
    delta = child.rates.get(source)
    if delta is None:
        delta = child.rates[source] = Delta()
    share = delta.step(now, counted, lambda d, e: {k: v / (e * cpus) for k, v in d.items()})
    return share or {}
