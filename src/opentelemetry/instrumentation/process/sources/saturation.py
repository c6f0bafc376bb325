"""Sources about starvation: the cgroup's CPU throttling and memory, and pressure stalls.

Linux only: psutil has no API for any of these. The cgroup folders and the
files to read are found once per process (at ``instrument()`` and after a
fork) by each source's ``open`` hook; a collection then reads each file once.
A file that vanishes, cannot be read or holds garbage drops only the fields
it gives, is logged once per fault period, and its fields come back when the
file does.

When the ``saturation`` option is ``None`` (auto), the cgroup sources read
only when a CPU quota or a memory limit applies to the process, and the
pressure source whenever its files exist.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..linux import cgroup, psi
from ..linux.files import KernelFile, Values, read_all
from ..platforms import LINUX
from .base import Key, ReadContext, Reading, Source


@dataclass
class _Files:
    """What one source reads in this process, and which of its files failed last time."""

    files: tuple[KernelFile, ...]
    limit: int | None = None
    scope: str = ""
    failing: frozenset[str] = frozenset()


def _paths(ctx: ReadContext) -> cgroup.CgroupPaths:
    """The process's cgroup folders, found once per process and shared by the sources."""
    found: cgroup.CgroupPaths | None = ctx.state.get("cgroup.paths")
    if found is None:
        found = ctx.state["cgroup.paths"] = cgroup.discover()
    return found


def _files(ctx: ReadContext, paths: cgroup.CgroupPaths) -> tuple[KernelFile, ...]:
    """The cgroup files this kernel provides, found once per process (each read once here)."""
    found: tuple[KernelFile, ...] | None = ctx.state.get("cgroup.files")
    if found is None:
        found = ctx.state["cgroup.files"] = cgroup.cgroup_files(paths)
    return found


def _wanted(ctx: ReadContext, paths: cgroup.CgroupPaths) -> bool:
    if ctx.options.saturation is None:  # auto: only a limited process is "in a container"
        try:
            return cgroup.limited(paths)
        except ValueError:  # a limit file holds garbage: the limit is unknown
            return False
    return bool(ctx.options.saturation)


# The fields the cpu source reports. v1 cpuacct.usage gives only the total CPU
# time, which no metric reports: it is not read.
_CPU_FIELDS = frozenset(
    {
        cgroup.CPU_PERIODS,
        cgroup.CPU_THROTTLED_PERIODS,
        cgroup.CPU_THROTTLED_TIME,
        cgroup.CPU_TIME_USER,
        cgroup.CPU_TIME_SYSTEM,
    }
)


def _open_cpu(ctx: ReadContext) -> bool:
    paths = _paths(ctx)
    files = _files(ctx, paths) if _wanted(ctx, paths) else ()
    state = _Files(tuple(f for f in files if _CPU_FIELDS.intersection(f.fields)))
    ctx.state["cgroup.cpu"] = state
    return bool(state.files)


def _open_memory(ctx: ReadContext) -> bool:
    paths = _paths(ctx)
    if not _wanted(ctx, paths):
        ctx.state["cgroup.memory"] = _Files(())
        return False
    files = tuple(f for f in _files(ctx, paths) if f.fields[0].startswith("memory."))
    try:
        limit = cgroup.memory_limit(paths)
    except ValueError:
        limit = None  # garbage in a limit file: unknown, left out
    ctx.state["cgroup.memory"] = _Files(files, limit=limit)
    return bool(files) or limit is not None


def _open_pressure(ctx: ReadContext) -> bool:
    found = psi.discover_pressure(_paths(ctx))
    ctx.state["pressure"] = _Files(found.files, scope=found.scope)
    return bool(found.files)


def _read(ctx: ReadContext, name: str) -> tuple[_Files, Values]:
    """Read every file of source ``name`` once; log the files that fail, and those that recover."""
    state: _Files = ctx.state[name]
    values, failures = read_all(state.files)
    if not failures and not state.failing:  # the usual case, kept short
        return state, values
    failing = frozenset(f.path for f, _exc in failures)
    for f, exc in failures:
        ctx.faults.warning(
            (f.path, type(exc).__name__),
            "process metrics: could not read %s (%s: %s); the metrics it feeds are left "
            "out while it fails.",
            f.path,
            type(exc).__name__,
            exc,
        )
    for path in state.failing - failing:
        ctx.faults.log(
            logging.INFO, (path, "recovered"), "process metrics: %s can be read again.", path
        )
    state.failing = failing
    return state, values


def _cpu(ctx: ReadContext) -> Reading:
    _state, v = _read(ctx, "cgroup.cpu")
    reading: dict[str, int | float | dict[Key, float]] = {}
    for field, key in (
        ("periods", cgroup.CPU_PERIODS),
        ("throttled_periods", cgroup.CPU_THROTTLED_PERIODS),
        ("throttled_time", cgroup.CPU_THROTTLED_TIME),
    ):
        if key in v:
            reading[field] = v[key]
    # The container conventions call the kernel-mode time of a cgroup "kernel".
    modes: dict[Key, str] = {("user",): cgroup.CPU_TIME_USER, ("kernel",): cgroup.CPU_TIME_SYSTEM}
    times: dict[Key, float] = {mode: float(v[key]) for mode, key in modes.items() if key in v}
    if times:
        reading["cpu_time"] = times
    return reading


_EVENTS: tuple[tuple[Key, str], ...] = (
    (("high",), cgroup.MEMORY_EVENTS_HIGH),
    (("max",), cgroup.MEMORY_EVENTS_MAX),
    (("oom",), cgroup.MEMORY_EVENTS_OOM),
    (("oom_kill",), cgroup.MEMORY_EVENTS_OOM_KILL),
    # v1's count of times the usage hit the limit is v2's "max" event.
    (("max",), cgroup.MEMORY_FAILCNT),
)


def _memory(ctx: ReadContext) -> Reading:
    state, v = _read(ctx, "cgroup.memory")
    reading: dict[str, int | float | dict[Key, int]] = {}
    if cgroup.MEMORY_USAGE in v:
        reading["usage"] = int(v[cgroup.MEMORY_USAGE])
    working_set = cgroup.working_set(v)
    if working_set is not None:
        reading["working_set"] = working_set
    if cgroup.MEMORY_PEAK in v:
        reading["peak"] = int(v[cgroup.MEMORY_PEAK])
    if state.limit is not None:
        reading["limit"] = state.limit
    events: dict[Key, int] = {event: int(v[key]) for event, key in _EVENTS if key in v}
    if events:
        reading["events"] = events
    return reading


# (resource, field of the reading, kind): the names built once, not at each read.
_STALLS = tuple(
    (resource, psi.field(resource, kind), kind)
    for resource in psi.RESOURCES
    for kind in ("some", "full")
)


def _pressure(ctx: ReadContext) -> Reading:
    state, v = _read(ctx, "pressure")
    reading: dict[str, dict[Key, float]] = {}
    for resource, field, kind in _STALLS:
        if field in v:
            reading.setdefault(resource, {})[(kind, state.scope)] = float(v[field])
    return reading


SOURCES: tuple[Source, ...] = (
    Source(
        "cgroup.cpu",
        _cpu,
        frozenset({"periods", "throttled_periods", "throttled_time", "cpu_time"}),
        "the cgroup cpu.stat (v1: and cpuacct.stat)",
        platforms=LINUX,
        open=_open_cpu,
        shared=True,
    ),
    Source(
        "cgroup.memory",
        _memory,
        frozenset({"usage", "working_set", "peak", "limit", "events"}),
        "the cgroup memory.current, memory.stat, memory.peak, memory.events "
        "(v1: their *_in_bytes, failcnt and oom_control)",
        platforms=LINUX,
        open=_open_memory,
        shared=True,
    ),
    Source(
        "pressure",
        _pressure,
        frozenset(psi.RESOURCES),
        "one file per resource: the v2 cgroup cpu.pressure, memory.pressure and io.pressure, "
        "else /proc/pressure/cpu, memory and io",
        platforms=LINUX,
        open=_open_pressure,
        shared=True,
    ),
)
