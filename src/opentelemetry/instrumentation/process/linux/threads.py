"""CPU time of this process's busiest threads, reading only the threads that are kept.

Reads ``/proc/self/task`` (the thread ids), each thread's CPU-time clock
through ``clock_gettime()`` (nanoseconds, only to rank them, no file opened),
then ``/proc/self/task/<tid>/stat`` of the ``limit`` busiest threads only:
``utime`` and ``stime`` in seconds, as psutil's ``Process.threads()`` computes
them, which would read every thread's file. ``/proc/self`` is resolved at every
call, and no file descriptor outlives a call. Details: docs/design.md, "The
busiest threads".
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

from . import stat

__all__ = ["ThreadTimes", "busiest_threads"]

_TASK_DIR = "/proc/self/task"
# CPUCLOCK_PERTHREAD_MASK (4) | CPUCLOCK_SCHED (2).
_THREAD_SCHED_CLOCK = 6


class ThreadTimes(NamedTuple):
    """CPU time of one thread, as psutil's ``pthread`` reports it."""

    id: int
    """The kernel thread id (tid), as psutil's ``pthread.id``."""
    user_time: float
    """Seconds in user mode (``utime`` / ``stat.CLOCK_TICKS``)."""
    system_time: float
    """Seconds in kernel mode (``stime`` / ``stat.CLOCK_TICKS``)."""


def busiest_threads(limit: int, *, tids: Sequence[int] | None = None) -> list[ThreadTimes]:
    """The ``limit`` threads of THIS process with the most CPU time, busiest first.

    Threads are ranked by the scheduler's CPU clock of each thread (nanoseconds),
    ties by lower tid first; then only the kept threads' ``stat`` files are read.
    ``user_time`` and ``system_time`` are in seconds and equal what
    ``psutil.Process().threads()`` reports for the same tid at the same moment.

    The ranking is finer than psutil's (nanoseconds against whole clock ticks of
    ``user + system``), so among threads whose tick totals are within a tick of
    each other, the kept set can differ from sorting psutil's list; the reported
    values never differ.

    A thread that exits between the listing and its reads is skipped, and the next
    busiest one is read in its place. ``limit=0`` returns ``[]`` without any read.
    ``tids`` is a listing of ``/proc/self/task`` that the caller made just before,
    so that one collection lists it once.

    Raises:
        ValueError: ``limit`` is negative.
        OSError: the direct read is unusable here; the caller should fall back
            to psutil. In particular:
            ``FileNotFoundError``/``PermissionError`` when ``/proc/self/task``
            is missing or restricted;
            ``EINVAL`` when the calling thread's own CPU clock cannot be read
            (the kernel has no per-thread CPU clocks);
            ``ESRCH`` when the calling thread is not in the listing (``/proc``
            belongs to another pid namespace, so tids would not match);
            any other errno from ``clock_gettime`` (e.g. ``EPERM``/``ENOSYS``
            from a seccomp filter) as is.
    """
    if limit < 0:
        raise ValueError(f"limit must be an integer >= 0, got {limit!r}")
    if limit == 0:
        return []
    if tids is None:
        tids = [int(name) for name in os.listdir(_TASK_DIR)]
    ranked = _rank(tids)
    kept: list[ThreadTimes] = []
    for _, tid in ranked:
        times = _read_stat(tid)
        if times is not None:
            kept.append(times)
            if len(kept) == limit:
                break
    return kept


def _rank(tids: Sequence[int]) -> list[tuple[int, int]]:
    """``(-cpu_ns, tid)`` of each live thread, sorted: busiest first, then lower tid."""
    own = threading.get_native_id()
    if own not in tids:
        raise OSError(errno.ESRCH, f"this thread ({own}) is not listed in {_TASK_DIR}")
    clock = time.clock_gettime_ns
    ranked: list[tuple[int, int]] = []
    for tid in tids:
        try:
            ns = clock((~tid << 3) | _THREAD_SCHED_CLOCK)
        except OSError as exc:
            # EINVAL for another thread: it exited after the listing.
            if exc.errno != errno.EINVAL or tid == own:
                raise
            continue
        ranked.append((-ns, tid))
    ranked.sort()
    return ranked


def _read_stat(tid: int) -> ThreadTimes | None:
    """utime and stime of ``tid`` in seconds; ``None`` if the thread has exited."""
    try:
        found = stat.read(f"{_TASK_DIR}/{tid}/stat")
    except (FileNotFoundError, ProcessLookupError):
        return None
    return ThreadTimes(id=tid, user_time=found.utime, system_time=found.stime)
