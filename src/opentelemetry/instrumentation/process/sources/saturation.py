"""Sources about starvation: the cgroup's CPU throttling and memory, and pressure stalls.

Linux only: psutil has no API for any of these. Each source's ``open`` hook
finds the cgroup folders and files once (at ``instrument()``; a forked child
keeps them); a collection reads each file once. A file that vanishes, cannot
be read or holds garbage drops only its fields, is logged once per fault
period, and its fields come back with it. With ``saturation=None`` (auto) the
cgroup sources read only under a CPU quota or memory limit, and the pressure
source whenever its files exist.
"""

from __future__ import annotations

import logging

from ..linux import cgroup, psi
from ..linux.files import KernelFile, Values, read_all
from ..platforms import LINUX
from .base import Key, ReadContext, Reading, Source, State, attributes, numbers

_MODE = attributes("cpu.mode")
_EVENT = attributes("process_metrics.cgroup.memory.event")
_STALL = attributes("process_metrics.pressure.stall_type", "process_metrics.pressure.scope")


class _Files:
    """What one source reads in this process, and which of its files failed last time."""

    __slots__ = ("failing", "files", "limit", "scope")

    def __init__(
        self, files: tuple[KernelFile, ...], limit: int | None = None, scope: str = ""
    ) -> None:
        self.files = files
        self.limit = limit
        self.scope = scope
        self.failing: frozenset[str] = frozenset()


class _Cgroup:
    """The process's cgroup folders and, once wanted, the cgroup files this kernel provides."""

    __slots__ = ("files", "paths")

    def __init__(self, paths: cgroup.CgroupPaths) -> None:
        self.paths = paths
        self.files: tuple[KernelFile, ...] | None = None


_CGROUP = State("cgroup", lambda ctx: _Cgroup(ctx.facts.cgroup_paths or cgroup.discover()))
"""Found once per process, shared by the cgroup and pressure sources: the facts' own."""


def _files(ctx: ReadContext) -> tuple[KernelFile, ...]:
    """The cgroup files this kernel provides, found once per process (each read once here)."""
    shared = ctx.state_of(_CGROUP)
    if shared.files is None:
        shared.files = cgroup.cgroup_files(shared.paths)
    return shared.files


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


def _cpu_files(ctx: ReadContext) -> _Files:
    paths = ctx.state_of(_CGROUP).paths
    files = _files(ctx) if _wanted(ctx, paths) else ()
    return _Files(tuple(f for f in files if _CPU_FIELDS.intersection(f.fields)))


def _memory_files(ctx: ReadContext) -> _Files:
    paths = ctx.state_of(_CGROUP).paths
    if not _wanted(ctx, paths):
        return _Files(())
    files = tuple(f for f in _files(ctx) if f.fields[0].startswith("memory."))
    try:
        limit = cgroup.memory_limit(paths)
    except ValueError:
        limit = None  # garbage in a limit file: unknown, left out
    return _Files(files, limit=limit)


def _pressure_files(ctx: ReadContext) -> _Files:
    found = psi.discover_pressure(ctx.state_of(_CGROUP).paths)
    return _Files(found.files, scope=found.scope)


_CPU = State("cgroup_cpu", _cpu_files)
_MEMORY = State("cgroup_memory", _memory_files)
_PRESSURE = State("pressure", _pressure_files)


def _cgroup_after_fork(ctx: ReadContext, _forked_at: float | None) -> None:
    # The child starts in its parent's cgroup as it is now, which may not be the
    # one found at instrument(): find it again at the child's first read.
    ctx.drop(_CGROUP)
    for files in (_CPU, _MEMORY, _PRESSURE):
        ctx.drop(files)


def _open_cpu(ctx: ReadContext) -> bool:
    return bool(ctx.state_of(_CPU).files)


def _open_memory(ctx: ReadContext) -> bool:
    state = ctx.state_of(_MEMORY)
    return bool(state.files) or state.limit is not None


def _open_pressure(ctx: ReadContext) -> bool:
    return bool(ctx.state_of(_PRESSURE).files)


def _read(ctx: ReadContext, which: State[_Files]) -> tuple[_Files, Values]:
    """Read every file of a source once; log the files that fail, and those that recover."""
    state = ctx.state_of(which)
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
    _state, v = _read(ctx, _CPU)
    reading: dict[str, int | float | dict[Key, float]] = {}
    for field, key in (
        ("periods", cgroup.CPU_PERIODS),
        ("throttled_periods", cgroup.CPU_THROTTLED_PERIODS),
        ("throttled_time", cgroup.CPU_THROTTLED_TIME),
    ):
        if key in v:
            reading[field] = v[key]
    # The container conventions call the kernel-mode time of a cgroup "kernel".
    modes = {_MODE(("user",)): cgroup.CPU_TIME_USER, _MODE(("kernel",)): cgroup.CPU_TIME_SYSTEM}
    times: dict[Key, float] = {mode: float(v[key]) for mode, key in modes.items() if key in v}
    if times:
        reading["cpu_time"] = times
    return reading


_EVENTS: tuple[tuple[Key, str], ...] = (
    (_EVENT(("high",)), cgroup.MEMORY_EVENTS_HIGH),
    (_EVENT(("max",)), cgroup.MEMORY_EVENTS_MAX),
    (_EVENT(("oom",)), cgroup.MEMORY_EVENTS_OOM),
    (_EVENT(("oom_kill",)), cgroup.MEMORY_EVENTS_OOM_KILL),
    # v1's count of times the usage hit the limit is v2's "max" event.
    (_EVENT(("max",)), cgroup.MEMORY_FAILCNT),
)


def _memory(ctx: ReadContext) -> Reading:
    state, v = _read(ctx, _MEMORY)
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
    state, v = _read(ctx, _PRESSURE)
    reading: dict[str, dict[Key, float]] = {}
    for resource, field, kind in _STALLS:
        if field in v:
            reading.setdefault(resource, {})[_STALL((kind, state.scope))] = float(v[field])
    return reading


_LIMITED = "when a cgroup CPU quota or memory limit applies to the process"

SOURCES: tuple[Source, ...] = (
    Source(
        "cgroup_cpu",
        _cpu,
        {**numbers("periods", "throttled_periods", "throttled_time"), "cpu_time": _MODE},
        "the cgroup cpu.stat (v1: and cpuacct.stat)",
        platforms=LINUX,
        open=_open_cpu,
        after_fork=_cgroup_after_fork,
        shared=True,
        keeps=(_CGROUP, _CPU),
        auto=_LIMITED,
    ),
    Source(
        "cgroup_memory",
        _memory,
        {**numbers("usage", "working_set", "peak", "limit"), "events": _EVENT},
        "the cgroup memory.current, memory.stat, memory.peak, memory.events "
        "(v1: their *_in_bytes, failcnt and oom_control)",
        platforms=LINUX,
        open=_open_memory,
        after_fork=_cgroup_after_fork,
        shared=True,
        keeps=(_CGROUP, _MEMORY),
        auto=_LIMITED,
    ),
    Source(
        "pressure",
        _pressure,
        dict.fromkeys(psi.RESOURCES, _STALL),
        "one file per resource: the v2 cgroup cpu.pressure, memory.pressure and io.pressure, "
        "else /proc/pressure/cpu, memory and io",
        platforms=LINUX,
        open=_open_pressure,
        after_fork=_cgroup_after_fork,
        shared=True,
        keeps=(_CGROUP, _PRESSURE),
        auto="wherever the kernel has pressure stall information",
    ),
)
