"""Sources about this process: CPU, memory, I/O, threads, descriptors, uptime.

Most go through psutil, inside one ``Process.oneshot()``. Two use a better
call for the same fact: getrusage(2) (CPU time to the microsecond, context
switches of all threads) and, on Linux, the ``/proc/self/task`` listing for
the thread count.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..linux import procfs, schedstat
from ..options import BY_NAME
from ..platforms import LINUX, ON_LINUX, POSIX, WINDOWS
from .base import (
    DirectRead,
    Key,
    ReadContext,
    Reading,
    Source,
    State,
    Value,
    attributes,
    known,
    numbers,
    psutil_has,
)

if TYPE_CHECKING:  # imported by the per-thread read: most processes never make it
    from ..linux import threads

try:
    import resource as _resource
except ImportError:  # Windows
    _resource = None  # type: ignore[assignment]

SERIES_PER_THREAD = 2
"""Per-thread CPU time has a ``user`` and a ``system`` series for each thread."""

_MODE = attributes("cpu.mode")
_USER, _SYSTEM = _MODE(("user",)), _MODE(("system",))
_SWITCH = attributes("process.context_switch.type")
_VOLUNTARY, _INVOLUNTARY = _SWITCH(("voluntary",)), _SWITCH(("involuntary",))
_FAULT = attributes("system.paging.fault.type")
_MAJOR, _MINOR = _FAULT(("major",)), _FAULT(("minor",))
_DIRECTION = attributes("disk.io.direction")
_READ, _WRITE = _DIRECTION(("read",)), _DIRECTION(("write",))
_THREAD = attributes("cpu.mode", "thread.id", "thread.name")


def _rusage(ctx: ReadContext) -> Reading:
    # One getrusage(2) gives CPU time at microsecond resolution, and context
    # switches summed over all threads (psutil's /proc/<pid>/status counts
    # only the main thread's).
    if _resource is not None:
        ru = _resource.getrusage(_resource.RUSAGE_SELF)
        times: dict[Key, float] = {_USER: ru.ru_utime, _SYSTEM: ru.ru_stime}
        extra: dict[str, Value] = {
            "context_switches": {_VOLUNTARY: ru.ru_nvcsw, _INVOLUNTARY: ru.ru_nivcsw},
            "paging_faults": {_MAJOR: ru.ru_majflt, _MINOR: ru.ru_minflt},
        }
    else:
        cpu = ctx.process.cpu_times()
        switches = ctx.process.num_ctx_switches()
        times = {_USER: cpu.user, _SYSTEM: cpu.system}
        extra = {
            "context_switches": {_VOLUNTARY: switches.voluntary, _INVOLUNTARY: switches.involuntary}
        }
    cpus = ctx.facts.available_cpus or 0.0

    def share(deltas: Mapping[Key, float], elapsed: float) -> dict[Key, float]:
        return {k: d / (elapsed * cpus) for k, d in deltas.items()}

    # Without a CPU count the utilisation is unknown: left out, not 0.
    util = ctx.delta("process.cpu").step(ctx.now, times, share) if cpus else None
    return {"cpu_time": times, "cpu_utilization": util or {}, **extra}


def _rusage_after_fork(ctx: ReadContext, forked_at: float | None) -> None:
    # A child's CPU times start at 0 at the fork (fork(2)): that is its
    # baseline, so its first collection already has a utilisation.
    ctx.deltas.pop("process.cpu", None)
    if forked_at is not None:
        zero: dict[Key, float] = {_USER: 0.0, _SYSTEM: 0.0}
        ctx.delta("process.cpu").step(forked_at, zero, lambda _d, _e: {})


def _memory(ctx: ReadContext) -> Reading:
    mem = ctx.process.memory_info()
    limit = ctx.facts.memory_limit
    reading: dict[str, Value] = {"rss": mem.rss, "vms": mem.vms}
    if limit:
        reading["utilization"] = mem.rss / limit
    return reading


def _io(ctx: ReadContext) -> Reading:
    io = ctx.process.io_counters()
    return {
        "bytes": {_READ: io.read_bytes, _WRITE: io.write_bytes},
        "operations": {_READ: io.read_count, _WRITE: io.write_count},
    }


THREAD_COUNT = "thread_count"
"""The field in which the per-thread, run-queue and signals reads give the number of threads."""

_COUNTED_BY = ("process_threads", "process_run_queue", "process_signals")
"""Sources of the same refresh that count the threads anyway, in order of preference."""


def _num_threads(ctx: ReadContext) -> Reading:
    # Free where a source read earlier in this refresh counted them: the
    # per-thread read lists the threads, the signals read parses status.
    for name in _COUNTED_BY:
        count = ctx.needed(name, THREAD_COUNT)
        if count is not None:
            return {"count": count}
    return {"count": int(ctx.process.num_threads())}


class _Listing:
    """``/proc/self/task`` as listed at the refresh of time ``at``."""

    __slots__ = ("at", "tids")

    def __init__(self) -> None:
        self.at = -1.0
        self.tids: list[int] = []


_TASKS = State("process_tasks", lambda _ctx: _Listing())
"""The listing of the latest refresh, shared by the sources that need it."""


def task_ids(ctx: ReadContext) -> list[int]:
    """This process's thread ids, listed once per refresh for every source that needs them."""
    listing = ctx.state_of(_TASKS)
    if listing.at != ctx.now:
        listing.tids, listing.at = procfs.thread_ids(), ctx.now
    return listing.tids


def _listed(ctx: ReadContext, tids: list[int]) -> None:
    """Keep the thread ids that psutil listed in this refresh: no other source lists them again."""
    listing = ctx.state_of(_TASKS)
    listing.tids, listing.at = tids, ctx.now


_RUN_QUEUE = State("process_run_queue", lambda _ctx: schedstat.RunQueueWait())


def _open_run_queue(_ctx: ReadContext) -> bool:
    try:
        schedstat.this_thread_waiting_ns()
    except OSError:
        return False  # a kernel without scheduler statistics: nothing to report, no warning
    return True


def _run_queue(ctx: ReadContext) -> Reading:
    tids = task_ids(ctx)
    waited = ctx.state_of(_RUN_QUEUE).update(tids)
    return {"wait_time": waited / 1e9, THREAD_COUNT: len(tids)}


def _run_queue_after_fork(ctx: ReadContext, _forked_at: float | None) -> None:
    ctx.drop(_RUN_QUEUE)  # the parent's threads and total are not the child's


def _num_fds(ctx: ReadContext) -> Reading:
    return {"count": int(ctx.process.num_fds())}


def _handle_count(
    method: str, read: Callable[[ReadContext], Reading], cost: str, platforms: frozenset[str]
) -> Source:
    """The source of one psutil count of open descriptors or handles: ``Process.<method>()``."""
    return Source(
        f"process_{method}",
        read,
        numbers("count"),
        cost,
        platforms=platforms,
        in_process=True,
        available=psutil_has(f"Process.{method}"),
    )


def _num_handles(ctx: ReadContext) -> Reading:
    # Windows only, so typing stubs on other platforms do not know it.
    num_handles: Callable[[], int] = getattr(ctx.process, "num_handles")  # noqa: B009
    return {"count": int(num_handles())}


def _uptime(ctx: ReadContext) -> Reading:
    start = ctx.facts.start_boottime
    if start is not None:
        return {"uptime": time.clock_gettime(time.CLOCK_BOOTTIME) - start}
    created = ctx.facts.create_time
    return {"uptime": time.time() - created} if created is not None else {}


def max_threads(ctx: ReadContext) -> int:
    """Threads to report: the series cap, in whole threads."""
    return ctx.options.max_thread_series // SERIES_PER_THREAD


def _busiest(ctx: ReadContext, limit: int) -> tuple[int, list[threads.ThreadTimes]]:
    """The number of threads, and the ``limit`` busiest, busiest first.

    They are ranked by their CPU clocks on Linux: psutil reads every thread's
    stat file to keep a few; the direct read ranks all threads without opening
    a file and reads only the kept threads' files.
    """
    from ..linux import threads

    def direct() -> tuple[int, list[threads.ThreadTimes]]:
        tids = task_ids(ctx)
        return len(tids), threads.busiest_threads(limit, tids=tids)

    found = ctx.direct_read("threads", direct)
    if found is not None:
        return found
    every = ctx.process.threads()
    _listed(ctx, [t.id for t in every])
    ranked = sorted(every, key=lambda t: (-(t.user_time + t.system_time), t.id))
    return len(every), [
        threads.ThreadTimes(t.id, t.user_time, t.system_time) for t in ranked[:limit]
    ]


def _python_names() -> dict[int | None, str]:
    """Python's name of each thread it started, by kernel thread id."""
    names: dict[int | None, str] = {t.native_id: t.name for t in threading.enumerate()}
    # A forked child's main thread keeps its parent's native_id in CPython;
    # the main thread's kernel id is always the pid.
    names[os.getpid()] = threading.main_thread().name
    return names


def _threads(ctx: ReadContext) -> Reading:
    if ctx.options.thread_series_by == BY_NAME:
        return _thread_groups(ctx)
    names = _python_names()
    times: dict[Key, float] = {}
    count, busiest = _busiest(ctx, max_threads(ctx))
    for t in busiest:
        # Threads Python did not start (C extensions) have no Python name: the
        # attribute is left out rather than set to "".
        name = names.get(t.id)
        times[_THREAD(("user", t.id, name))] = t.user_time
        times[_THREAD(("system", t.id, name))] = t.system_time
    return {"cpu_time": times, THREAD_COUNT: count}


_DIGITS = re.compile(r"\d+")


def name_pattern(name: str | None) -> str | None:
    """A thread's name with every run of digits replaced by ``N`` ("Thread-N (run)")."""
    return None if name is None else _DIGITS.sub("N", name)


class _Groups:
    """CPU time by thread-name pattern, counting threads that have exited."""

    __slots__ = ("last", "retired")

    def __init__(self) -> None:
        self.last: dict[int, tuple[str | None, float, float]] = {}
        """Each live thread: its pattern (fixed at first sight) and its last user/system times."""
        self.retired: dict[str | None, list[float]] = {}
        """Per pattern: user and system times of its threads that have exited."""


_GROUPS = State("process_threads", lambda _ctx: _Groups())
"""The by-name read's thread-name groups, kept between reads."""


def _thread_groups(ctx: ReadContext) -> Reading:
    groups = ctx.state_of(_GROUPS)
    names = _python_names()
    current: dict[int, tuple[str | None, float, float]] = {}
    every = ctx.process.threads()
    _listed(ctx, [t.id for t in every])
    for t in every:
        # A pattern is fixed at first sight: a renamed thread must not move
        # time from one series to another, which would make one go down.
        known = groups.last.get(t.id)
        pattern = known[0] if known is not None else name_pattern(names.get(t.id))
        current[t.id] = (pattern, t.user_time, t.system_time)
    for tid, (pattern, user, system) in groups.last.items():
        if tid not in current:  # exited since the last read: keep what it used
            totals = groups.retired.setdefault(pattern, [0.0, 0.0])
            totals[0] += user
            totals[1] += system
    groups.last = current
    sums = {p: list(v) for p, v in groups.retired.items()}
    for pattern, user, system in current.values():
        totals = sums.setdefault(pattern, [0.0, 0.0])
        totals[0] += user
        totals[1] += system
    busiest = sorted(sums.items(), key=lambda kv: (-(kv[1][0] + kv[1][1]), kv[0] or ""))
    times: dict[Key, float] = {}
    for pattern, (user, system) in busiest[: max_threads(ctx)]:
        times[_THREAD(("user", None, pattern))] = user
        times[_THREAD(("system", None, pattern))] = system
    return {"cpu_time": times, THREAD_COUNT: len(every)}


def _threads_after_fork(ctx: ReadContext, _forked_at: float | None) -> None:
    # The parent's threads are not the child's (only the forking one goes on,
    # its CPU clock from 0): none of their times may count in the child's.
    ctx.drop(_GROUPS)


def _signals_pending(ctx: ReadContext) -> Reading:
    found = procfs.status()
    return {"count": found.pending, THREAD_COUNT: found.threads}


def _smaps(ctx: ReadContext) -> Reading:
    from ..linux import smaps  # only where PSS or USS is selected

    found = ctx.direct_read("smaps", smaps.pss_uss)
    if found is not None:
        return {"pss": found[0], "uss": found[1]}
    info = ctx.process.memory_full_info()
    # psutil gives uss on Linux, macOS and Windows, pss on Linux only.
    return {"pss": info.pss, "uss": info.uss} if ON_LINUX else {"uss": info.uss}


def _static(ctx: ReadContext) -> Reading:
    f = ctx.facts
    return known(fd_limit=f.fd_limit, available_cpus=f.available_cpus, memory_limit=f.memory_limit)


def _not_read(ctx: ReadContext) -> Reading:
    return {}


# psutil's Process.io_counters() exists on Linux, the BSDs, AIX and Windows.
_PROCESS_IO = (POSIX | WINDOWS) - {"darwin", "sunos"}

REFRESH = "refresh"
"""The source whose reading the snapshot cache fills with its own cost."""

SOURCES: tuple[Source, ...] = (
    Source(
        "process_rusage",
        _rusage,
        {
            "cpu_time": _MODE,
            "cpu_utilization": _MODE,
            "context_switches": _SWITCH,
            "paging_faults": _FAULT,
        },
        "one getrusage(2) syscall",
        # Windows has no getrusage: psutil gives CPU times and context switches only.
        field_platforms={"paging_faults": POSIX},
        in_process=True,
        stateful=True,
        after_fork=_rusage_after_fork,
    ),
    Source(
        "process_memory",
        _memory,
        numbers("rss", "vms", "utilization"),
        "/proc/self/statm, in oneshot",
        in_process=True,
    ),
    Source(
        "process_io",
        _io,
        {"bytes": _DIRECTION, "operations": _DIRECTION},
        "/proc/self/io, in oneshot",
        platforms=_PROCESS_IO,
        in_process=True,
        available=psutil_has("Process.io_counters"),
    ),
    Source(
        "process_smaps",
        _smaps,
        numbers("pss", "uss"),
        "/proc/self/smaps_rollup: the kernel walks the page tables, about 20 µs per MiB of "
        "RSS (6 ms at 300 MiB) (elsewhere: psutil memory_full_info(), which reads every mapping)",
        platforms=LINUX | frozenset({"darwin", "windows"}),
        field_platforms={"pss": LINUX},
        in_process=True,
        available=psutil_has("Process.memory_full_info"),
        modules=(".linux.smaps",),
        direct=(
            DirectRead(
                "smaps",
                "`/proc/self/smaps_rollup`, which the kernel sums itself",
                "`Process.memory_full_info()`, which parses every mapping of `/proc/self/smaps`",
            ),
        ),
    ),
    Source(
        "process_threads",
        _threads,
        {"cpu_time": _THREAD, THREAD_COUNT: None},
        "lists /proc/self/task, one clock read per thread, one stat file per kept thread "
        "(elsewhere: psutil reads every thread)",
        in_process=True,
        modules=(".linux.threads",),
        direct=(
            DirectRead(
                "threads",
                "`/proc/self/task`, one CPU-time clock per thread to rank them, and the `stat` "
                "file of the busiest threads only",
                "`Process.threads()`, which opens and parses the `stat` file of every thread",
            ),
        ),
        keeps=(_GROUPS, _TASKS),
        after_fork=_threads_after_fork,
    ),
    Source(
        "process_run_queue",
        _run_queue,
        numbers("wait_time", THREAD_COUNT),
        "lists /proc/self/task (once, with the per-thread read), one clock read per thread, "
        "and /proc/self/task/<tid>/schedstat of each thread that ran since the last collection",
        platforms=LINUX,
        in_process=True,  # before the thread count, which it gives
        open=_open_run_queue,
        keeps=(_TASKS, _RUN_QUEUE),
        after_fork=_run_queue_after_fork,
    ),
    Source(
        "process_signals",
        _signals_pending,
        numbers("count", THREAD_COUNT),
        "/proc/self/status (read once; it gives the thread count too)",
        platforms=LINUX,
        in_process=True,
    ),
    Source(
        "process_num_threads",
        _num_threads,
        numbers("count"),
        "psutil: /proc/self/status, in oneshot; no read when the per-thread, run-queue or "
        "signals read has counted the threads",
        in_process=True,
        needs=_COUNTED_BY,
    ),
    _handle_count("num_fds", _num_fds, "lists /proc/self/fd, in oneshot", POSIX),
    _handle_count("num_handles", _num_handles, "one Windows API call, in oneshot", WINDOWS),
    Source("process_uptime", _uptime, numbers("uptime"), "none: create time is a static fact"),
    Source(
        "static",
        _static,
        numbers("fd_limit", "available_cpus", "memory_limit"),
        "none: static facts, read once",
        field_platforms={"fd_limit": POSIX},  # RLIMIT_NOFILE
    ),
    Source(
        REFRESH,
        _not_read,
        numbers("duration", "cpu_time"),
        "none: the snapshot cache times its own refresh",
    ),
)
