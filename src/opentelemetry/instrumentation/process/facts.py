"""Static facts about the process and its host, read once.

They are read at ``instrument()``, never per collection; a forked child
reads again only those a fork changes (:func:`after_fork`). Nothing here
knows about OpenTelemetry.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil

from .faultlog import FaultLog
from .linux import cgroup, stat
from .linux.cgroup import CGROUP_ROOT, PROC_SELF_CGROUP
from .record import Record

_logger = logging.getLogger(__name__)
_T = TypeVar("_T")


class Facts(Record):
    """What does not change while a process lives.

    Times are seconds since the epoch, sizes are bytes, frequencies are Hz.
    ``None`` means the platform does not say. A forked child reads them again
    (:func:`after_fork`), but the host's CPU frequency limits.
    """

    __slots__ = (  # noqa: RUF023 - in their order: the repr and _asdict follow it
        "pid",
        "create_time",
        "start_boottime",
        "logical_cpus",
        "physical_cpus",
        "available_cpus",
        "memory_limit",
        "fd_limit",
        "cpu_freq_min_hz",
        "cpu_freq_max_hz",
        "affinity_cpus",
        "cgroup_paths",
        "cpu_quota",
        "cgroup_memory_limit",
    )

    def __init__(
        self,
        pid: int,
        create_time: float | None,
        start_boottime: float | None,
        logical_cpus: int | None,
        physical_cpus: int | None,
        available_cpus: float | None,
        memory_limit: int | None,
        fd_limit: int | None,
        cpu_freq_min_hz: int | None,
        cpu_freq_max_hz: int | None,
        affinity_cpus: int | None = None,
        cgroup_paths: cgroup.CgroupPaths | None = None,
        cpu_quota: float | None = None,
        cgroup_memory_limit: int | None = None,
    ) -> None:
        self.pid = pid
        self.create_time = create_time
        self.start_boottime = start_boottime
        """Seconds after boot at which the process started (Linux), for a precise uptime."""
        self.logical_cpus = logical_cpus
        """Of the host."""
        self.physical_cpus = physical_cpus
        """Of the host."""
        self.available_cpus = available_cpus
        """CPUs this process may use: the affinity mask, capped by a cgroup CPU quota."""
        self.memory_limit = memory_limit
        """Bytes this process may use: host memory, capped by a cgroup memory limit."""
        self.fd_limit = fd_limit
        """The soft RLIMIT_NOFILE."""
        self.cpu_freq_min_hz = cpu_freq_min_hz
        """Of the host's CPUs."""
        self.cpu_freq_max_hz = cpu_freq_max_hz
        """Of the host's CPUs."""
        # What the two limits above were derived from, for a report of what was found
        # (``python -m opentelemetry.instrumentation.process``); no metric reads them.
        self.affinity_cpus = affinity_cpus
        """CPUs in the affinity mask."""
        self.cgroup_paths = cgroup_paths
        """The process's cgroup folders, per controller (Linux)."""
        self.cpu_quota = cpu_quota
        """CPUs allowed by the tightest cgroup CPU quota; ``None``: no quota."""
        self.cgroup_memory_limit = cgroup_memory_limit
        """Bytes allowed by the tightest cgroup memory limit; ``None``: no limit."""


def this_process() -> psutil.Process:
    """``psutil.Process()`` of this process, even where its start time cannot be read.

    psutil before 6.1 reads the start time in the constructor and lets any
    error but its own escape (a masked ``/proc/stat``, an I/O error). Then the
    start time is left unknown, as psutil does on ``AccessDenied``, and
    :func:`read_facts` reports that fact as unreadable.
    """
    try:
        return psutil.Process()
    except Exception:  # noqa: BLE001 - never break instrument(): see _StartTimeUnknown
        return _StartTimeUnknown()


class _StartTimeUnknown(psutil.Process):
    """``psutil.Process`` whose constructor does not read the start time; all else is psutil's."""

    def __init__(self) -> None:
        self._constructing = True
        try:
            super().__init__()
        finally:
            self._constructing = False  # pragma: no mutate - None is as false as False

    def create_time(self) -> float:
        if self._constructing:
            raise psutil.AccessDenied(os.getpid())  # pragma: no mutate - psutil swallows it
        return super().create_time()


def read_facts(
    process: psutil.Process,
    *,
    cpu_frequency: bool,
    cgroup_root: Path = CGROUP_ROOT,
    proc_self_cgroup: Path = PROC_SELF_CGROUP,
    faults: FaultLog | None = None,
) -> Facts:
    """Read the static facts of ``process`` (which must be this process).

    Never raises: a fact that cannot be read is ``None``, its failure is
    logged through ``faults``, and the metrics that need it are left out.
    """
    log = faults if faults is not None else FaultLog()

    def get(what: str, read: Callable[[], _T]) -> _T | None:
        return _get(log, what, read)

    logical = get("the logical CPU count", lambda: psutil.cpu_count(logical=True))
    host_memory = get("the host memory size", lambda: int(psutil.virtual_memory().total))
    # One discovery for both limits (about 0.4 ms); one that raises is tried again.
    paths = functools.cache(lambda: cgroup.discover(cgroup_root, proc_self_cgroup))
    quota = get("the cgroup CPU quota", lambda: cgroup.cpu_quota(paths()))
    mem_limit = get("the cgroup memory limit", lambda: cgroup.memory_limit(paths()))
    affinity = get("the CPU affinity", lambda: _affinity_count(process))
    limits = get("the CPU frequency limits", _cpu_freq_limits) if cpu_frequency else None
    fmin, fmax = limits or (None, None)
    cpus = affinity or logical
    return Facts(
        pid=process.pid,
        create_time=get("the process start time", lambda: float(process.create_time())),
        start_boottime=get("the process start tick", lambda: _start_boottime(process.pid)),
        logical_cpus=logical,
        physical_cpus=get("the physical CPU count", lambda: psutil.cpu_count(logical=False)),
        available_cpus=available_cpus(cpus, quota) if cpus else None,
        memory_limit=_memory_limit(host_memory, mem_limit),
        fd_limit=get("the file descriptor limit", _fd_limit),
        cpu_freq_min_hz=fmin,
        cpu_freq_max_hz=fmax,
        affinity_cpus=affinity,
        cgroup_paths=get("the cgroup folders", paths),
        cpu_quota=quota,
        cgroup_memory_limit=mem_limit,
    )


def after_fork(facts: Facts, process: psutil.Process, *, faults: FaultLog | None = None) -> Facts:
    """``facts`` in a forked child (``process``, this process), read again but the frequency limits.

    The child starts in its parent's cgroup, affinity and limits as they are at
    the fork, which may no longer be what the parent found at ``instrument()``
    (a process moved to another cgroup, say). Only the host's CPU frequency
    limits, read once and costly, are kept. Never raises, as :func:`read_facts`.
    """
    fresh = read_facts(process, cpu_frequency=False, faults=faults)
    return fresh._replace(
        cpu_freq_min_hz=facts.cpu_freq_min_hz, cpu_freq_max_hz=facts.cpu_freq_max_hz
    )


def started_monotonic(facts: Facts) -> float | None:
    """When the process started, on the ``time.monotonic()`` clock; ``None`` if unknown.

    From the start tick (to a clock tick, and right unless the host was
    suspended since), else from the start time (right unless the wall clock
    was set since).
    """
    if facts.start_boottime is not None:
        boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        return time.monotonic() - (boot - facts.start_boottime)
    if facts.create_time is not None:
        return time.monotonic() - (time.time() - facts.create_time)
    return None


def _get(log: FaultLog, what: str, read: Callable[[], _T]) -> _T | None:
    """``read()``, or ``None`` (logged through ``log``) if it raises."""
    try:
        return read()
    except Exception as exc:  # noqa: BLE001 - a fact must never break instrument()
        log.warning(
            ("fact", what, type(exc).__name__),
            "process metrics: could not read %s (%s: %s); the metrics that need it are left out.",
            what,
            type(exc).__name__,
            exc,
        )
        return None


def _memory_limit(host: int | None, cgroup: int | None) -> int | None:
    if host and cgroup:
        return min(host, cgroup)
    return host or cgroup or None


def available_cpus(affinity: int, quota: float | None) -> float:
    """The divisor of ``process.cpu.utilization``: ``min(affinity, quota)``."""
    return min(float(affinity), quota) if quota else float(affinity)


def _start_boottime(pid: int) -> float | None:
    # psutil's create_time() adds this to the boot time, which /proc/stat
    # rounds to whole seconds: an uptime from it can be off by up to 1 s.
    if not hasattr(time, "CLOCK_BOOTTIME") or not os.path.exists(f"/proc/{pid}/stat"):
        return None
    return stat.of_process(pid).starttime / stat.CLOCK_TICKS


def _affinity_count(process: psutil.Process) -> int | None:
    if not hasattr(process, "cpu_affinity"):  # macOS has none
        return None
    return len(process.cpu_affinity())


def _fd_limit() -> int | None:
    try:
        import resource
    except ImportError:
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def _cpu_freq_limits() -> tuple[int | None, int | None]:
    freq = psutil.cpu_freq() if hasattr(psutil, "cpu_freq") else None
    fmin = int(freq.min * 1e6) if freq and freq.min else None
    fmax = int(freq.max * 1e6) if freq and freq.max else None
    if fmin is None or fmax is None:
        _logger.info(
            "CPU frequency limits are not exposed on this host (usual in VMs and "
            "containers); the minimum/maximum frequency metrics are left out "
            "rather than reported as 0."
        )
    return fmin, fmax
