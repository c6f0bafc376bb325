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
from dataclasses import dataclass, field
from typing import Any

from ..linux import procfs, smaps, threads
from ..platforms import LINUX, ON_LINUX, POSIX, WINDOWS
from .base import Key, ReadContext, Reading, Source, Value

try:
    import resource as _resource
except ImportError:  # Windows
    _resource = None  # type: ignore[assignment]

SERIES_PER_THREAD = 2
"""Per-thread CPU time has a ``user`` and a ``system`` series for each thread."""


def _rusage(ctx: ReadContext) -> Reading:
    # One getrusage(2) gives CPU time at microsecond resolution, and context
    # switches summed over all threads (psutil's /proc/<pid>/status counts
    # only the main thread's).
    if _resource is not None:
        ru = _resource.getrusage(_resource.RUSAGE_SELF)
        times: dict[Key, float] = {("user",): ru.ru_utime, ("system",): ru.ru_stime}
        extra: dict[str, Value] = {
            "context_switches": {("voluntary",): ru.ru_nvcsw, ("involuntary",): ru.ru_nivcsw},
            "paging_faults": {("major",): ru.ru_majflt, ("minor",): ru.ru_minflt},
        }
    else:
        cpu = ctx.process.cpu_times()
        switches = ctx.process.num_ctx_switches()
        times = {("user",): cpu.user, ("system",): cpu.system}
        extra = {
            "context_switches": {
                ("voluntary",): switches.voluntary,
                ("involuntary",): switches.involuntary,
            }
        }
    cpus = ctx.facts.available_cpus or 0.0

    def share(deltas: Mapping[Key, float], elapsed: float) -> dict[Key, float]:
        return {k: d / (elapsed * cpus) for k, d in deltas.items()}

    # Without a CPU count the utilisation is unknown: left out, not 0.
    util = ctx.delta("process.cpu").step(ctx.now, times, share) if cpus else None
    return {"cpu_time": times, "cpu_utilization": util or {}, **extra}


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
        "bytes": {("read",): io.read_bytes, ("write",): io.write_bytes},
        "operations": {("read",): io.read_count, ("write",): io.write_count},
    }


_LISTED = "process.task"
"""Where a refresh keeps the thread ids it listed, for the thread count."""


def _listed(ctx: ReadContext, tids: list[int]) -> list[int]:
    ctx.state[_LISTED] = (ctx.now, tids)
    return tids


def _listed_now(ctx: ReadContext) -> list[int] | None:
    """The thread ids that the per-thread read listed in this refresh, if it did."""
    # ctx.now is set once per refresh: an older listing has another stamp.
    stamp, tids = ctx.state.get(_LISTED, (None, None))
    return tids if stamp == ctx.now else None


_STATUS = "process.status"
"""Where a refresh keeps the thread count that the signals read found in ``status``."""


def _num_threads(ctx: ReadContext) -> Reading:
    # Free where another source of this refresh has counted them already: the
    # per-thread read lists the threads, the signals read parses status.
    tids = _listed_now(ctx)
    if tids is not None:
        return {"count": len(tids)}
    stamp, threads_in_status = ctx.state.get(_STATUS, (None, 0))
    if stamp == ctx.now:
        return {"count": threads_in_status}
    return {"count": int(ctx.process.num_threads())}


def _num_fds(ctx: ReadContext) -> Reading:
    return {"count": int(ctx.process.num_fds())}


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


def _busiest(ctx: ReadContext, limit: int) -> list[threads.ThreadTimes]:
    """The ``limit`` busiest threads, busiest first: ranked by their CPU clocks on Linux.

    psutil reads every thread's stat file to keep a few; the direct read ranks
    all threads without opening a file and reads only the kept threads' files.
    """
    found = ctx.direct_read(
        "threads", lambda: threads.busiest_threads(limit, tids=_listed(ctx, procfs.thread_ids()))
    )
    if found is not None:
        return found
    ranked = sorted(_psutil_threads(ctx), key=lambda t: (-(t.user_time + t.system_time), t.id))
    return [threads.ThreadTimes(t.id, t.user_time, t.system_time) for t in ranked[:limit]]


def _psutil_threads(ctx: ReadContext) -> list[Any]:
    """psutil's list of every thread; it also gives this refresh's thread count."""
    found = ctx.process.threads()
    _listed(ctx, [t.id for t in found])
    return found


def _python_names() -> dict[int | None, str]:
    """Python's name of each thread it started, by kernel thread id."""
    names: dict[int | None, str] = {t.native_id: t.name for t in threading.enumerate()}
    # A forked child's main thread keeps its parent's native_id in CPython;
    # the main thread's kernel id is always the pid.
    names[os.getpid()] = threading.main_thread().name
    return names


def _threads(ctx: ReadContext) -> Reading:
    if ctx.options.thread_series_by == "name":
        return _thread_groups(ctx)
    names = _python_names()
    times: dict[Key, float] = {}
    for t in _busiest(ctx, max_threads(ctx)):
        # Threads Python did not start (C extensions) have no Python name: the
        # attribute is left out rather than set to "".
        name = names.get(t.id)
        times[("user", t.id, name)] = t.user_time
        times[("system", t.id, name)] = t.system_time
    return {"cpu_time": times}


_DIGITS = re.compile(r"\d+")


def name_pattern(name: str | None) -> str | None:
    """A thread's name with every run of digits replaced by ``N`` ("Thread-N (run)")."""
    return None if name is None else _DIGITS.sub("N", name)


_GROUPS = "process.threads"
"""Where the by-name read keeps its thread-name groups between reads."""


@dataclass
class _Groups:
    """CPU time by thread-name pattern, counting threads that have exited."""

    last: dict[int, tuple[str | None, float, float]] = field(default_factory=dict)
    """Each live thread: its pattern (fixed at first sight) and its last user/system times."""
    retired: dict[str | None, list[float]] = field(default_factory=dict)
    """Per pattern: user and system times of its threads that have exited."""


def _thread_groups(ctx: ReadContext) -> Reading:
    # Any key apart from the other sources' would do, None included.
    groups: _Groups = ctx.state.setdefault(_GROUPS, _Groups())  # pragma: no mutate
    names = _python_names()
    current: dict[int, tuple[str | None, float, float]] = {}
    for t in _psutil_threads(ctx):
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
        times[("user", None, pattern)] = user
        times[("system", None, pattern)] = system
    return {"cpu_time": times}


def _signals_pending(ctx: ReadContext) -> Reading:
    pending, threads_in_status = procfs.status_counts()
    ctx.state[_STATUS] = (ctx.now, threads_in_status)
    return {"count": pending}


def _smaps(ctx: ReadContext) -> Reading:
    found = ctx.direct_read("smaps", smaps.pss_uss)
    if found is not None:
        return {"pss": found[0], "uss": found[1]}
    info = ctx.process.memory_full_info()
    # psutil gives uss on Linux, macOS and Windows, pss on Linux only.
    return {"pss": info.pss, "uss": info.uss} if ON_LINUX else {"uss": info.uss}


def _static(ctx: ReadContext) -> Reading:
    facts = ctx.facts
    found = {
        "fd_limit": facts.fd_limit,
        "available_cpus": facts.available_cpus,
        "memory_limit": facts.memory_limit,
    }
    # Unknown is left out, never reported as 0.
    return {k: v for k, v in found.items() if v}


def _not_read(ctx: ReadContext) -> Reading:
    return {}


def _has(name: str) -> Callable[[], bool]:
    import psutil

    return lambda: hasattr(psutil.Process, name)


# psutil's Process.io_counters() exists on Linux, the BSDs, AIX and Windows.
_PROCESS_IO = (POSIX | WINDOWS) - {"darwin", "sunos"}

REFRESH = "refresh"
"""The source whose reading the snapshot cache fills with its own cost."""

SOURCES: tuple[Source, ...] = (
    Source(
        "process.rusage",
        _rusage,
        frozenset({"cpu_time", "cpu_utilization", "context_switches", "paging_faults"}),
        "one getrusage(2) syscall",
        # Windows has no getrusage: psutil gives CPU times and context switches only.
        field_platforms={"paging_faults": POSIX},
        in_process=True,
        stateful=True,
    ),
    Source(
        "process.memory",
        _memory,
        frozenset({"rss", "vms", "utilization"}),
        "/proc/self/statm, in oneshot",
        in_process=True,
    ),
    Source(
        "process.io",
        _io,
        frozenset({"bytes", "operations"}),
        "/proc/self/io, in oneshot",
        platforms=_PROCESS_IO,
        in_process=True,
        available=_has("io_counters"),
    ),
    Source(
        "process.smaps",
        _smaps,
        frozenset({"pss", "uss"}),
        "/proc/self/smaps_rollup: the kernel walks the page tables, about 20 µs per MiB of "
        "RSS (6 ms at 300 MiB) (elsewhere: psutil memory_full_info(), which reads every mapping)",
        platforms=LINUX | frozenset({"darwin", "windows"}),
        field_platforms={"pss": LINUX},
        in_process=True,
        available=_has("memory_full_info"),
    ),
    Source(
        "process.threads",
        _threads,
        frozenset({"cpu_time"}),
        "lists /proc/self/task, one clock read per thread, one stat file per kept thread "
        "(elsewhere: psutil reads every thread)",
        in_process=True,
    ),
    # Before the thread count, which takes its number from status when it is read.
    Source(
        "process.signals",
        _signals_pending,
        frozenset({"count"}),
        "/proc/self/status (read once; it gives the thread count too)",
        platforms=LINUX,
        in_process=True,
    ),
    Source(
        "process.num_threads",
        _num_threads,
        frozenset({"count"}),
        "psutil: /proc/self/status, in oneshot; no read when the per-thread or the "
        "signals read has counted the threads",
        in_process=True,
    ),
    Source(
        "process.num_fds",
        _num_fds,
        frozenset({"count"}),
        "lists /proc/self/fd, in oneshot",
        platforms=POSIX,
        in_process=True,
        available=_has("num_fds"),
    ),
    Source(
        "process.num_handles",
        _num_handles,
        frozenset({"count"}),
        "one Windows API call, in oneshot",
        platforms=WINDOWS,
        in_process=True,
        available=_has("num_handles"),
    ),
    Source("process.uptime", _uptime, frozenset({"uptime"}), "none: create time is a static fact"),
    Source(
        "static",
        _static,
        frozenset({"fd_limit", "available_cpus", "memory_limit"}),
        "none: static facts, read once",
        field_platforms={"fd_limit": POSIX},  # RLIMIT_NOFILE
    ),
    Source(
        REFRESH,
        _not_read,
        frozenset({"duration", "cpu_time"}),
        "none: the snapshot cache times its own refresh",
    ),
)
