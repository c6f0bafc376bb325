"""Reading one child process (supervisor mode): what the tree needs of each, then its points.

Each read is inside the child's own ``Process.oneshot()`` (the caller's). A
read the master may not make (another user, hidepid, a process not dumpable
after ``setuid``) drops that read's points of that child, logged at most once
per fault period; a child that exits meanwhile drops all of its points.
Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import psutil

from ..linux import stat
from .base import ReadContext, attributes
from .child_slots import Child

_MODE = attributes("cpu.mode")

Row = tuple[str, str, tuple[int | str | None, ...], float]
"""One point of a child: ``(source, field, attribute values, value)``."""


class Gone(Exception):
    """The child exited (or vanished from view) during its read."""


class ChildReading(NamedTuple):
    """What the pass reads of every child first; ``None`` where not read, or not readable."""

    zombie: bool
    ppid: int | None
    """Its parent, read only where the listing did not say."""
    times: tuple[float, float, float, float] | None
    """``(user, system, reaped children's user, system)`` seconds."""
    rss: int | None
    vms: int | None
    pss: int | None
    uss: int | None
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
    ctx: ReadContext, child: Child, cpu: bool, memory: bool, pss: bool, found: stat.Stat | None
) -> ChildReading:
    """What the tree needs of every child: its state, CPU times and memory."""
    p = child.process
    zombie = _try(ctx, "status", child, p.status) == psutil.STATUS_ZOMBIE
    ppid = _try(ctx, "parent", child, p.ppid) if child.parent is None else None
    times = rss = vms = full_pss = uss = None
    if cpu:
        t = _try(ctx, "cpu", child, p.cpu_times)
        if t is not None:
            cu = getattr(t, "children_user", 0.0)
            cs = getattr(t, "children_system", 0.0)
            times = (t.user, t.system, cu, cs)
    if not zombie and memory:
        m = _try(ctx, "memory", child, p.memory_info)
        if m is not None:
            rss, vms = m.rss, m.vms
    if not zombie and pss:
        full = _try(ctx, "pss", child, p.memory_full_info)
        if full is not None:
            full_pss, uss = getattr(full, "pss", None), full.uss
    return ChildReading(zombie, ppid, times, rss, vms, full_pss, uss, found)


def read_rest(
    ctx: ReadContext, child: Child, reading: ChildReading, want: frozenset[str], now: float
) -> list[Row] | None:
    """The per-child points of one kept child, for the sources ``want``; ``None`` if it went.

    A child that exits during its reads gives nothing, rather than part of its points.
    """
    pid: int | None = child.pid if ctx.options.child_pid else None
    slot = child.slot
    # Kept aside until the child's last read: a child gone meanwhile gives nothing.
    rows: list[Row] = []
    add = rows.append
    p = child.process
    try:
        if "children_cpu" in want and reading.times is not None:
            u, s, _, _ = reading.times
            add(("children_cpu", "cpu_time", (slot, pid, "user"), u))
            add(("children_cpu", "cpu_time", (slot, pid, "system"), s))
            cpus = ctx.facts.available_cpus or 0.0
            if cpus:
                share = child.util.step(
                    now,
                    {_MODE(("user",)): u, _MODE(("system",)): s},
                    lambda d, e: {k: v / (e * cpus) for k, v in d.items()},
                )
                for (mode,), v in (share or {}).items():
                    add(("children_cpu", "cpu_utilization", (slot, pid, mode), v))
        if "children_memory" in want and reading.rss is not None and reading.vms is not None:
            add(("children_memory", "rss", (slot, pid), reading.rss))
            add(("children_memory", "vms", (slot, pid), reading.vms))
        if "children_memory_full" in want:
            if reading.pss is not None:
                add(("children_memory_full", "pss", (slot, pid), reading.pss))
            if reading.uss is not None:
                add(("children_memory_full", "uss", (slot, pid), reading.uss))
        if "children_io" in want:
            io = _try(ctx, "I/O", child, p.io_counters)
            if io is not None:
                add(("children_io", "bytes", (slot, pid, "read"), io.read_bytes))
                add(("children_io", "bytes", (slot, pid, "write"), io.write_bytes))
                add(("children_io", "operations", (slot, pid, "read"), io.read_count))
                add(("children_io", "operations", (slot, pid, "write"), io.write_count))
        if "children_num_threads" in want:
            n = _try(ctx, "threads", child, p.num_threads)
            if n is not None:
                add(("children_num_threads", "count", (slot, pid), n))
        if "children_num_fds" in want:
            n = _try(ctx, "file descriptors", child, p.num_fds)
            if n is not None:
                add(("children_num_fds", "count", (slot, pid), n))
        if "children_context_switches" in want:
            cs = _try(ctx, "context switches", child, p.num_ctx_switches)
            if cs is not None:
                field = "context_switches"
                add(("children_context_switches", field, (slot, pid, "voluntary"), cs.voluntary))
                add(
                    ("children_context_switches", field, (slot, pid, "involuntary"), cs.involuntary)
                )
        if "children_paging_faults" in want and reading.proc_stat is not None:
            faults = reading.proc_stat
            add(("children_paging_faults", "paging_faults", (slot, pid, "major"), faults.majflt))
            add(("children_paging_faults", "paging_faults", (slot, pid, "minor"), faults.minflt))
        if "children_uptime" in want:
            created = _try(ctx, "uptime", child, p.create_time)
            if created is not None:
                add(("children_uptime", "uptime", (slot, pid), time.time() - created))
    except Gone:
        return None
    return rows
