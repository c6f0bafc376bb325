"""Snapshot sources: each one reads one thing from the OS.

Most go through psutil. Two use a better call for the same fact: getrusage(2)
(CPU time to the microsecond, context switches of all threads), and on Linux
the /proc/self/task listing for the thread count (half the cost of psutil's).

A source returns a *reading*: a flat mapping of field names to either a
number or a mapping from a tuple of attribute values to a number. The metric
table (``metrics.py``) says which field feeds which metric and what the tuple
positions are called. Nothing here knows about OpenTelemetry.

Sources marked ``in_process`` are read inside one ``Process.oneshot()``.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import psutil

from .facts import Facts

Key = tuple[str | int | None, ...]
Value = int | float | Mapping[Key, int | float]
Reading = Mapping[str, Value]

# Utilisation over a shorter window is mostly clock-tick noise: a second
# reader collecting right after the first reuses the last value instead.
MIN_UTILIZATION_WINDOW = 0.1

_CPU_MODES = {
    "user": "user",
    "nice": "nice",
    "system": "system",
    "idle": "idle",
    "iowait": "iowait",
    "irq": "interrupt",
    "softirq": "interrupt",
    "interrupt": "interrupt",
    "dpc": "interrupt",
    "steal": "steal",
    # guest and guest_nice are already counted in user and nice.
}

_TCP_STATES = {
    "SYN_RECV": "syn_received",
    "FIN_WAIT1": "fin_wait_1",
    "FIN_WAIT2": "fin_wait_2",
    "CLOSE": "closed",
    "DELETE_TCB": "delete",
}


class Delta:
    """Turns consecutive cumulative readings into per-second-like ratios.

    It keeps the previous reading; ``step`` returns ``None`` only before any
    baseline exists.
    """

    def __init__(self) -> None:
        self._prev: tuple[float, Mapping[Key, float]] | None = None
        self._last: dict[Key, float] | None = None

    def step(
        self,
        now: float,
        values: Mapping[Key, float],
        ratio: Callable[[Mapping[Key, float], float], dict[Key, float]],
    ) -> dict[Key, float] | None:
        prev = self._prev
        if prev is None:
            self._prev = (now, values)
            return None
        elapsed = now - prev[0]
        if elapsed < MIN_UTILIZATION_WINDOW and self._last is not None:
            return self._last
        deltas = {k: max(0.0, v - prev[1].get(k, v)) for k, v in values.items()}
        self._last = ratio(deltas, elapsed) if elapsed > 0 else self._last
        self._prev = (now, values)
        return self._last


@dataclass
class ReadContext:
    """What a source may use: this process, its facts, options, and delta state."""

    process: psutil.Process
    facts: Facts
    now: float
    per_cpu: bool = False
    max_threads: int = 0
    deltas: dict[str, Delta] = field(default_factory=dict)
    floors: dict[str, dict[Key, float]] = field(default_factory=dict)

    def delta(self, name: str) -> Delta:
        return self.deltas.setdefault(name, Delta())

    def monotonic(self, name: str, values: dict[Key, float]) -> dict[Key, float]:
        """``values``, none below its previous reading (a counter never goes down)."""
        floor = self.floors.get(name)
        if floor:
            values = {k: v if v >= floor.get(k, v) else floor[k] for k, v in values.items()}
        self.floors[name] = values
        return values


@dataclass(frozen=True)
class Source:
    """One read from the OS, named so that metrics can point at it."""

    name: str
    read: Callable[[ReadContext], Reading]
    cost: str
    """What one read costs, in words, for the metric reference."""
    in_process: bool = False
    stateful: bool = False
    """Keeps a baseline: read once at ``instrument()`` so the first collection has a delta."""
    available: Callable[[], bool] = lambda: True


def _rusage(ctx: ReadContext) -> Reading:
    # One getrusage(2) gives CPU time at microsecond resolution, and context
    # switches summed over all threads (psutil's /proc/<pid>/status counts
    # only the main thread's).
    if _resource is not None:
        ru = _resource.getrusage(_resource.RUSAGE_SELF)
        times: dict[Key, float] = {("user",): ru.ru_utime, ("system",): ru.ru_stime}
        extra: dict[str, Value] = {
            "context_switches": {
                ("voluntary",): ru.ru_nvcsw,
                ("involuntary",): ru.ru_nivcsw,
            },
            "paging_faults": {("major",): ru.ru_majflt, ("minor",): ru.ru_minflt},
        }
    else:
        cpu = ctx.process.cpu_times()
        ctxsw = ctx.process.num_ctx_switches()
        times = {("user",): cpu.user, ("system",): cpu.system}
        extra = {
            "context_switches": {
                ("voluntary",): ctxsw.voluntary,
                ("involuntary",): ctxsw.involuntary,
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


def linux_thread_count(pid: int) -> int:
    """Threads of process ``pid``: one /proc/<pid>/task entry each.

    The same count as psutil's, which parses all of /proc/<pid>/status for it
    at twice the cost (see the benchmarks).
    """
    return len(os.listdir(f"/proc/{pid}/task"))


def _num_threads(ctx: ReadContext) -> Reading:
    if _ON_LINUX:
        return {"count": int(linux_thread_count(ctx.facts.pid))}
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


def _threads(ctx: ReadContext) -> Reading:
    names = {t.native_id: t.name for t in threading.enumerate()}
    threads = sorted(ctx.process.threads(), key=lambda t: (-(t.user_time + t.system_time), t.id))[
        : ctx.max_threads
    ]
    times: dict[Key, float] = {}
    for t in threads:
        # Threads Python did not start (C extensions) have no Python name: the
        # attribute is left out rather than set to "".
        name = names.get(t.id)
        times[("user", t.id, name)] = t.user_time
        times[("system", t.id, name)] = t.system_time
    return {"cpu_time": times}


def _signals_pending(ctx: ReadContext) -> Reading:
    pending, found = 0, 0
    with open(f"/proc/{ctx.facts.pid}/status", "rb") as f:
        for line in f:
            if line.startswith((b"SigPnd:", b"ShdPnd:")):
                pending |= int(line.split()[1], 16)
                found += 1
    if found != 2:
        raise LookupError("SigPnd/ShdPnd not in /proc/<pid>/status")  # unknown, not 0
    return {"count": bin(pending).count("1")}


def _static(ctx: ReadContext) -> Reading:
    facts = ctx.facts
    found = {
        "logical_cpus": facts.logical_cpus,
        "physical_cpus": facts.physical_cpus,
        "fd_limit": facts.fd_limit,
        "cpu_freq_min": facts.cpu_freq_min_hz,
        "cpu_freq_max": facts.cpu_freq_max_hz,
    }
    # Unknown is left out, never reported as 0.
    return {k: v for k, v in found.items() if v}


def _system_cpu(ctx: ReadContext) -> Reading:
    rows = psutil.cpu_times(percpu=True) if ctx.per_cpu else [psutil.cpu_times()]
    times: dict[Key, float] = {}
    for cpu, row in enumerate(rows):
        number = cpu if ctx.per_cpu else None
        for field_name, value in row._asdict().items():
            mode = _CPU_MODES.get(field_name)
            if mode is not None:
                key = (number, mode)
                times[key] = times.get(key, 0.0) + value
    # Linux may move iowait backwards (proc(5)): keep the last value instead.
    times = ctx.monotonic("system.cpu", times)

    def share(deltas: Mapping[Key, float], _elapsed: float) -> dict[Key, float]:
        totals: dict[Any, float] = {}
        for (number, _mode), d in deltas.items():
            totals[number] = totals.get(number, 0.0) + d
        return {k: (d / totals[k[0]] if totals[k[0]] else 0.0) for k, d in deltas.items()}

    util = ctx.delta("system.cpu").step(ctx.now, times, share)
    return {"time": times, "utilization": util or {}}


def _system_memory(ctx: ReadContext) -> Reading:
    vm = psutil.virtual_memory()
    usage: dict[Key, int] = {("used",): vm.total - vm.available, ("free",): vm.free}
    for state in ("buffers", "cached"):
        value = getattr(vm, state, None)
        if value is not None:
            usage[(state,)] = value
    return {
        "usage": usage,
        "utilization": {k: v / vm.total for k, v in usage.items()},
        "limit": vm.total,
    }


def _cpu_freq(ctx: ReadContext) -> Reading:
    rows = psutil.cpu_freq(percpu=True) or []
    # A CPU that reports 0 MHz does not expose its frequency: leave it out.
    return {"current": {(n,): int(f.current * 1e6) for n, f in enumerate(rows) if f.current}}


def _system_disk(ctx: ReadContext) -> Reading:
    disks = psutil.disk_io_counters(perdisk=True) or {}
    return {
        "bytes": _by_direction(disks, "read_bytes", "write_bytes"),
        "operations": _by_direction(disks, "read_count", "write_count"),
    }


def _system_network(ctx: ReadContext) -> Reading:
    nics = psutil.net_io_counters(pernic=True) or {}
    return {
        "bytes": _by_direction(nics, "bytes_recv", "bytes_sent", "receive", "transmit"),
        "packets": _by_direction(nics, "packets_recv", "packets_sent", "receive", "transmit"),
        "dropped": _by_direction(nics, "dropin", "dropout", "receive", "transmit"),
        "errors": _by_direction(nics, "errin", "errout", "receive", "transmit"),
    }


def _by_direction(
    rows: Mapping[str, Any], a: str, b: str, a_name: str = "read", b_name: str = "write"
) -> dict[Key, int]:
    out: dict[Key, int] = {}
    for device, row in rows.items():
        out[(device, a_name)] = getattr(row, a)
        out[(device, b_name)] = getattr(row, b)
    return out


def _swap(ctx: ReadContext) -> Reading:
    swap = psutil.swap_memory()
    usage: dict[Key, int] = {("used",): swap.used, ("free",): swap.free}
    util = {k: v / swap.total for k, v in usage.items()} if swap.total else {}
    return {"usage": usage, "utilization": util}


def _vmstat(ctx: ReadContext) -> Reading:
    counts: dict[str, int] = {}
    with open("/proc/vmstat", "rb") as f:
        for line in f:
            name, _, value = line.partition(b" ")
            if name in (b"pgfault", b"pgmajfault"):
                counts[name.decode()] = int(value)
    major = counts["pgmajfault"]
    return {"faults": {("major",): major, ("minor",): counts["pgfault"] - major}}


def _filesystem(ctx: ReadContext) -> Reading:
    usage: dict[Key, int] = {}
    util: dict[Key, float] = {}
    for part in psutil.disk_partitions(all=False):
        try:
            du = psutil.disk_usage(part.mountpoint)
        except OSError:
            continue  # unmounted or unreadable since it was listed
        mode = "ro" if "ro" in part.opts.split(",") else "rw"
        states = {"used": du.used, "free": du.free, "reserved": du.total - du.used - du.free}
        for state, value in states.items():
            key = (part.device, state, part.fstype, mode, part.mountpoint)
            usage[key] = value
            if du.total:
                util[key] = value / du.total
    return {"usage": usage, "utilization": util}


def _connections(ctx: ReadContext) -> Reading:
    import socket

    counts: dict[Key, int] = {}
    for conn in psutil.net_connections(kind="inet"):
        transport = "tcp" if conn.type == socket.SOCK_STREAM else "udp"
        status = conn.status
        state = None if status == psutil.CONN_NONE else _TCP_STATES.get(status, status.lower())
        key = (state, transport)
        counts[key] = counts.get(key, 0) + 1
    return {"count": counts}


def _gc(ctx: ReadContext) -> Reading:
    stats = gc.get_stats()
    return {
        name: {(gen,): s[name] for gen, s in enumerate(stats)}
        for name in ("collections", "collected", "uncollectable")
    }


try:
    import resource as _resource
except ImportError:  # Windows
    _resource = None  # type: ignore[assignment]

_ON_LINUX = sys.platform.startswith("linux")


def _has(name: str) -> Callable[[], bool]:
    return lambda: hasattr(psutil.Process, name)


SOURCES: Mapping[str, Source] = {
    s.name: s
    for s in (
        Source(
            "process.rusage", _rusage, "one getrusage(2) syscall", in_process=True, stateful=True
        ),
        Source("process.memory", _memory, "/proc/self/statm, in oneshot", in_process=True),
        Source(
            "process.io",
            _io,
            "/proc/self/io, in oneshot",
            in_process=True,
            available=_has("io_counters"),
        ),
        Source(
            "process.num_threads",
            _num_threads,
            "lists /proc/self/task (elsewhere: psutil, in oneshot)",
            in_process=True,
        ),
        Source(
            "process.num_fds",
            _num_fds,
            "lists /proc/self/fd, in oneshot",
            in_process=True,
            available=_has("num_fds"),
        ),
        Source(
            "process.num_handles",
            _num_handles,
            "one Windows API call, in oneshot",
            in_process=True,
            available=_has("num_handles"),
        ),
        Source("process.uptime", _uptime, "none: create time is a static fact"),
        Source(
            "process.threads",
            _threads,
            "lists /proc/self/task and reads one stat file per thread",
            in_process=True,
        ),
        Source(
            "process.signals",
            _signals_pending,
            "/proc/self/status, one extra open",
            available=lambda: _ON_LINUX,
        ),
        Source("static", _static, "none: static facts, read once"),
        # Filled in by the cache with the refresh's own duration.
        Source("snapshot", lambda ctx: {}, "none: the refresh times itself"),
        Source("system.cpu", _system_cpu, "/proc/stat", stateful=True),
        Source("system.memory", _system_memory, "/proc/meminfo"),
        Source(
            "system.cpu_freq",
            _cpu_freq,
            "per CPU: sysfs cpufreq files, or /proc/cpuinfo",
            available=lambda: hasattr(psutil, "cpu_freq"),
        ),
        Source("system.disk", _system_disk, "/proc/diskstats"),
        Source("system.network", _system_network, "/proc/net/dev"),
        Source("system.swap", _swap, "/proc/meminfo and /proc/vmstat"),
        Source("system.vmstat", _vmstat, "/proc/vmstat", available=lambda: _ON_LINUX),
        Source("system.filesystem", _filesystem, "/proc/self/mounts, one statvfs per mount"),
        Source(
            "system.connections",
            _connections,
            "walks the fds of every process on the host, and /proc/net/*",
        ),
        Source(
            "cpython.gc",
            _gc,
            "none: gc.get_stats() in memory",
            available=lambda: sys.implementation.name == "cpython",
        ),
    )
}

__all__ = ["SOURCES", "Delta", "Key", "ReadContext", "Reading", "Source", "Value"]
