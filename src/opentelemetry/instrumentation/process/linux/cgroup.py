"""The process's cgroup: where its folders are, its limits, and the files read per collection.

:func:`discover` reads ``/proc/self/cgroup`` once (at ``instrument()``, and in
a forked child) and finds each controller's folder and ancestors, on cgroup v2
or v1. :func:`cpu_quota` (CPUs) and :func:`memory_limit` (bytes) are the
tightest limit of any ancestor. :func:`cgroup_files` lists the files a
collection reads, each once; a file that vanished, cannot be read or holds
garbage drops only its fields. A process moved to another cgroup keeps the
folders found at discovery: docs/design.md, "The cgroup". Nothing here knows
about OpenTelemetry.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .files import (
    KernelFile,
    Key,
    Values,
    available,
    flat_keyed_file,
    one_key,
    scaled_value,
    single_value,
)
from .stat import CLOCK_TICKS

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")

# cgroup v1 reports "no limit" as a huge page-aligned number, not "max".
_V1_UNLIMITED = 1 << 60

# Field names of the per-collection values. Units: seconds, bytes, counts.
CPU_PERIODS = "cpu.periods"
"""Enforcement periods elapsed with runnable tasks (count), own cgroup's quota only."""
CPU_THROTTLED_PERIODS = "cpu.throttled_periods"
"""Periods in which the cgroup was throttled (count)."""
CPU_THROTTLED_TIME = "cpu.throttled_time"
"""Total time the cgroup's tasks were throttled (seconds)."""
CPU_TIME_USER = "cpu.time.user"
"""CPU time of the cgroup in user mode (seconds)."""
CPU_TIME_SYSTEM = "cpu.time.system"
"""CPU time of the cgroup in kernel mode (seconds)."""
CPU_TIME_TOTAL = "cpu.time.total"
"""CPU time of the cgroup, all modes (seconds); v1 counts it apart from user/system."""
MEMORY_USAGE = "memory.usage"
"""Memory charged to the cgroup and its descendants (bytes)."""
MEMORY_INACTIVE_FILE = "memory.inactive_file"
"""Page cache on the inactive list, hierarchical (bytes); see :func:`working_set`."""
MEMORY_PEAK = "memory.peak"
"""Highest usage recorded (bytes), where the kernel keeps one."""
MEMORY_EVENTS_HIGH = "memory.events.high"
"""v2: times the tasks were throttled for going over ``memory.high`` (count)."""
MEMORY_EVENTS_MAX = "memory.events.max"
"""v2: times the usage was about to go over ``memory.max`` (count)."""
MEMORY_EVENTS_OOM = "memory.events.oom"
"""v2: times the usage reached the limit and an allocation was about to fail (count)."""
MEMORY_EVENTS_OOM_KILL = "memory.events.oom_kill"
"""Processes of the cgroup killed by an OOM killer (count); v1 ``oom_control``."""
MEMORY_FAILCNT = "memory.failcnt"
"""v1: times the usage hit the limit (count)."""


class Hierarchy(NamedTuple):
    """One controller's folders in one cgroup hierarchy."""

    version: int
    """1 or 2."""
    dirs: tuple[Path, ...]
    """The process's own cgroup folder first, then its ancestors up to the mount point."""

    @property
    def own(self) -> Path:
        """The folder of the cgroup the process is in (charged in)."""
        return self.dirs[0]


class CgroupPaths(NamedTuple):
    """Where the process's cgroups are, per controller; ``None`` where there is none."""

    cpu: Hierarchy | None = None
    """Quota and throttling: v2 ``cpu.max``/``cpu.stat``, v1 ``cpu.cfs_*``/``cpu.stat``."""
    cpuacct: Hierarchy | None = None
    """The cgroup's CPU time: v2 ``cpu.stat``, v1 ``cpuacct.stat``/``cpuacct.usage``."""
    memory: Hierarchy | None = None
    """Usage, limit, events: v2 ``memory.*``, v1 ``memory.*_in_bytes`` and others."""
    unified: Hierarchy | None = None
    """The v2 hierarchy, with or without controllers: it holds ``*.pressure``."""


def discover(
    cgroup_root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP
) -> CgroupPaths:
    """Find the process's cgroup folders. Never raises: what is not found is ``None``."""
    try:
        lines = proc_self_cgroup.read_text(encoding="utf-8").splitlines()
        unified, v1 = _memberships(cgroup_root, lines)
        cpu = _pick(unified, v1.get("cpu"), "cpu", "cpu.max")
        memory = _pick(unified, v1.get("memory"), "memory", "memory.max")
        cpuacct = _cpuacct(cpu, unified, v1)
    except (OSError, ValueError):  # e.g. a folder this user may not list
        return CgroupPaths()
    return CgroupPaths(cpu=cpu, cpuacct=cpuacct, memory=memory, unified=unified)


_V1_CONTROLLERS = frozenset({"cpu", "cpuacct", "memory"})
"""The v1 controllers whose folders are looked for: the only ones read."""


def _memberships(
    cgroup_root: Path, lines: list[str]
) -> tuple[Hierarchy | None, dict[str, Hierarchy]]:
    # Each line is "hierarchy-id:controllers:path"; the v2 line is "0::path".
    unified: Hierarchy | None = None
    v1: dict[str, Hierarchy] = {}
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and controllers == "":
            unified_root = cgroup_root / "unified"  # hybrid hosts mount v2 there
            base = unified_root if unified_root.is_dir() else cgroup_root
            dirs = _chain(base, path)
            unified = Hierarchy(2, dirs) if dirs else None
            continue
        for name in controllers.split(","):
            if name not in _V1_CONTROLLERS:
                continue  # pids, devices, a named hierarchy...: nothing to find there
            for base in (cgroup_root / name, cgroup_root / controllers):
                dirs = _chain(base, path)
                if dirs:
                    v1.setdefault(name, Hierarchy(1, dirs))
                    break
    return unified, v1


def _chain(base: Path, path: str) -> tuple[Path, ...]:
    """The folder of cgroup ``path`` under the mount ``base``, then its ancestors up to ``base``."""
    if not base.is_dir():
        return ()
    leaf = base / path.strip("/")
    if not leaf.is_dir():
        # A container without a cgroup namespace sees its own cgroup mounted
        # at the base, under a path that names it from the host's root.
        leaf = base
    dirs = [leaf]
    while dirs[-1] != base:
        dirs.append(dirs[-1].parent)
    return tuple(dirs)


def _pick(
    unified: Hierarchy | None, v1: Hierarchy | None, controller: str, v2_marker: str
) -> Hierarchy | None:
    """The v2 hierarchy if ``controller`` is enabled there, else the v1 one."""
    if unified is not None and _v2_enabled(unified, controller, v2_marker):
        return unified
    return v1


def _v2_enabled(unified: Hierarchy, controller: str, marker: str) -> bool:
    # cgroup.controllers lists what is enabled in the cgroup; a non-root
    # cgroup also has the controller's files (cpu.max, memory.max).
    enabled = _read(unified.own / "cgroup.controllers")
    if enabled is not None and controller in enabled.split():
        return True
    return any((d / marker).is_file() for d in unified.dirs)


def _cpuacct(
    cpu: Hierarchy | None, unified: Hierarchy | None, v1: dict[str, Hierarchy]
) -> Hierarchy | None:
    # v2 cpu.stat always has the CPU time, with or without the cpu controller;
    # a hybrid host that keeps cpuacct on v1 reads it there.
    if cpu is not None and cpu.version == 2:
        return cpu
    if "cpuacct" in v1:
        return v1["cpuacct"]
    if unified is not None and (unified.own / "cpu.stat").is_file():
        return unified
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


# Limits, read once at discovery.


def cpu_quota(paths: CgroupPaths) -> float | None:
    """CPUs allowed by the tightest quota of the cgroup and its ancestors; ``None`` if none.

    v2 ``cpu.max`` (``quota period``, ``max`` = none); v1 ``cpu.cfs_quota_us``
    over ``cpu.cfs_period_us`` (``-1`` = none). A missing file means no quota
    there; a file holding garbage raises ValueError.
    """
    h = paths.cpu
    if h is None:
        return None
    quotas = [q for d in h.dirs if (q := _quota(d, h.version)) is not None]
    return min(quotas) if quotas else None


def _quota(folder: Path, version: int) -> float | None:
    if version == 2:
        text = _read(folder / "cpu.max")
        if text is None:
            return None
        quota, _, period = text.partition(" ")
        return None if quota == "max" or not period else int(quota) / int(period)
    v1_quota, v1_period = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
    if not v1_quota or not v1_period or int(v1_quota) <= 0:
        return None
    return int(v1_quota) / int(v1_period)


def memory_limit(paths: CgroupPaths) -> int | None:
    """Bytes allowed by the tightest memory limit of the cgroup and its ancestors; ``None`` if none.

    v2 ``memory.max`` (``max`` = none); v1 ``memory.limit_in_bytes`` (a huge
    value = none). A missing file means no limit there; garbage raises ValueError.
    """
    h = paths.memory
    if h is None:
        return None
    name = "memory.max" if h.version == 2 else "memory.limit_in_bytes"
    limits: list[int] = []
    for d in h.dirs:
        value = _read(d / name)
        if value and value != "max" and int(value) < _V1_UNLIMITED:
            limits.append(int(value))
    return min(limits) if limits else None


def limited(paths: CgroupPaths) -> bool:
    """Whether a CPU quota or a memory limit applies to the process's cgroup.

    The saturation group is on by default only then. Raises ValueError when a
    limit file holds garbage.
    """
    return cpu_quota(paths) is not None or memory_limit(paths) is not None


# Files read at each collection.


def cgroup_files(paths: CgroupPaths) -> tuple[KernelFile, ...]:
    """The files to read at each collection, each once, that the kernel provides now.

    Reads each candidate once to leave out what this kernel does not keep
    (``memory.peak`` before 5.19, ``oom_kill`` in v1 ``memory.oom_control``
    before 4.13, throttling without the v2 cpu controller).
    """
    found = [f for f in (*_cpu_files(paths), *_memory_files(paths)) if f is not None]
    return available(found)


def _cpu_files(paths: CgroupPaths) -> list[KernelFile | None]:
    files: list[KernelFile | None] = []
    cpu, acct = paths.cpu, paths.cpuacct
    if cpu is not None and cpu.version == 1:
        files.append(flat_keyed_file(str(cpu.own / "cpu.stat"), _V1_CPU_STAT))
    if acct is not None and acct.version == 1:
        stat = (
            Key("user", CPU_TIME_USER, float(CLOCK_TICKS)),
            Key("system", CPU_TIME_SYSTEM, float(CLOCK_TICKS)),
        )
        files.append(flat_keyed_file(str(acct.own / "cpuacct.stat"), stat))
        usage = str(acct.own / "cpuacct.usage")
        files.append(KernelFile(usage, scaled_value(CPU_TIME_TOTAL, 1e9), (CPU_TIME_TOTAL,)))
    v2_dirs = {h.own for h in (cpu, acct) if h is not None and h.version == 2}
    for folder in sorted(v2_dirs):
        stat_file = str(folder / "cpu.stat")
        files.append(flat_keyed_file(stat_file, _V2_CPU_TIME, _V2_CPU_THROTTLING))
    return files


def _memory_files(paths: CgroupPaths) -> list[KernelFile | None]:
    h = paths.memory
    if h is None:
        return []
    own = h.own
    if h.version == 2:
        return [
            _single(own / "memory.current", MEMORY_USAGE),
            _long(own / "memory.stat", "inactive_file", MEMORY_INACTIVE_FILE),
            _single(own / "memory.peak", MEMORY_PEAK),
            flat_keyed_file(str(own / "memory.events"), _V2_MEMORY_EVENTS, _V2_OOM_KILL),
        ]
    return [
        _single(own / "memory.usage_in_bytes", MEMORY_USAGE),
        _long(own / "memory.stat", "total_inactive_file", MEMORY_INACTIVE_FILE),
        _single(own / "memory.max_usage_in_bytes", MEMORY_PEAK),
        _single(own / "memory.failcnt", MEMORY_FAILCNT),
        flat_keyed_file(str(own / "memory.oom_control"), (), _V1_OOM_KILL),
    ]


_V2_CPU_TIME = (
    Key("usage_usec", CPU_TIME_TOTAL, 1e6),
    Key("user_usec", CPU_TIME_USER, 1e6),
    Key("system_usec", CPU_TIME_SYSTEM, 1e6),
)
# Only where the cpu controller is enabled.
_V2_CPU_THROTTLING = (
    Key("nr_periods", CPU_PERIODS),
    Key("nr_throttled", CPU_THROTTLED_PERIODS),
    Key("throttled_usec", CPU_THROTTLED_TIME, 1e6),
)
_V1_CPU_STAT = (
    Key("nr_periods", CPU_PERIODS),
    Key("nr_throttled", CPU_THROTTLED_PERIODS),
    Key("throttled_time", CPU_THROTTLED_TIME, 1e9),
)
_V1_OOM_KILL = (Key("oom_kill", MEMORY_EVENTS_OOM_KILL),)  # Linux 4.13+
_V2_MEMORY_EVENTS = (
    Key("high", MEMORY_EVENTS_HIGH),
    Key("max", MEMORY_EVENTS_MAX),
    Key("oom", MEMORY_EVENTS_OOM),
)
_V2_OOM_KILL = (Key("oom_kill", MEMORY_EVENTS_OOM_KILL),)  # Linux 4.13+


def _single(path: Path, field: str) -> KernelFile:
    return KernelFile(str(path), single_value(field), (field,))


def _long(path: Path, key: str, field: str) -> KernelFile:
    # memory.stat has some 40 (v2) to 70 (v1) lines, of which one is needed.
    return KernelFile(str(path), one_key(key, field), (field,))


def working_set(values: Values) -> int | None:
    """Usage minus inactive page cache, floored at 0 (bytes), as kubelet and cAdvisor compute it.

    ``None`` when either is missing from ``values``.
    """
    usage, inactive = values.get(MEMORY_USAGE), values.get(MEMORY_INACTIVE_FILE)
    if usage is None or inactive is None:
        return None
    return max(0, int(usage) - int(inactive))
