"""Static facts about the process and its host, read once per process.

They are read at ``instrument()`` and again in a forked child, never per
collection. Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

_logger = logging.getLogger("opentelemetry.instrumentation.process")

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")

# cgroup v1 reports "no limit" as a huge page-aligned number, not "max".
_V1_UNLIMITED = 1 << 60


@dataclass(frozen=True)
class Facts:
    """What does not change while a process lives.

    Times are seconds since the epoch, sizes are bytes, frequencies are Hz.
    ``None`` means the platform does not say.
    """

    pid: int
    create_time: float
    start_boottime: float | None
    """Seconds after boot at which the process started (Linux), for a precise uptime."""
    logical_cpus: int | None
    physical_cpus: int | None
    available_cpus: float
    """CPUs this process may use: the affinity mask, capped by a cgroup CPU quota."""
    host_memory: int
    memory_limit: int
    """Bytes this process may use: host memory, capped by a cgroup memory limit."""
    fd_limit: int | None
    cpu_freq_min_hz: int | None
    cpu_freq_max_hz: int | None


def read_facts(
    process: psutil.Process,
    *,
    cpu_frequency: bool,
    cgroup_root: Path = CGROUP_ROOT,
    proc_self_cgroup: Path = PROC_SELF_CGROUP,
) -> Facts:
    """Read the static facts of ``process`` (which must be this process)."""
    logical = psutil.cpu_count(logical=True)
    host_memory = psutil.virtual_memory().total
    quota = cgroup_cpu_quota(cgroup_root, proc_self_cgroup)
    mem_limit = cgroup_memory_limit(cgroup_root, proc_self_cgroup)
    fmin, fmax = _cpu_freq_limits() if cpu_frequency else (None, None)
    return Facts(
        pid=process.pid,
        create_time=_create_time(process),
        start_boottime=_start_boottime(process.pid),
        logical_cpus=logical,
        physical_cpus=psutil.cpu_count(logical=False),
        available_cpus=available_cpus(_affinity_count(process) or logical or 1, quota),
        host_memory=host_memory,
        memory_limit=min(host_memory, mem_limit) if mem_limit else host_memory,
        fd_limit=_fd_limit(),
        cpu_freq_min_hz=fmin,
        cpu_freq_max_hz=fmax,
    )


def available_cpus(affinity: int, quota: float | None) -> float:
    """The divisor of ``process.cpu.utilization``: ``min(affinity, quota)``."""
    return min(float(affinity), quota) if quota else float(affinity)


def _create_time(process: psutil.Process) -> float:
    try:
        return float(process.create_time())
    except (psutil.Error, OSError):
        return time.time()


def _start_boottime(pid: int) -> float | None:
    # psutil's create_time() adds this to the boot time, which /proc/stat
    # rounds to whole seconds: an uptime from it can be off by up to 1 s.
    if not hasattr(time, "CLOCK_BOOTTIME"):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        ticks = int(stat[stat.rfind(b")") + 2 :].split()[19])
        return ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _affinity_count(process: psutil.Process) -> int | None:
    try:
        return len(process.cpu_affinity())
    except (AttributeError, psutil.Error, OSError):
        return None


def _fd_limit() -> int | None:
    try:
        import resource
    except ImportError:
        return None
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def _cpu_freq_limits() -> tuple[int | None, int | None]:
    try:
        freq = psutil.cpu_freq()
    except (AttributeError, NotImplementedError, OSError, psutil.Error):
        freq = None
    fmin = int(freq.min * 1e6) if freq and freq.min else None
    fmax = int(freq.max * 1e6) if freq and freq.max else None
    if fmin is None or fmax is None:
        _logger.info(
            "CPU frequency limits are not exposed on this host (usual in VMs and "
            "containers); the minimum/maximum frequency metrics are left out "
            "rather than reported as 0."
        )
    return fmin, fmax


def _cgroup_dirs(cgroup_root: Path, proc_self_cgroup: Path, controller: str) -> list[Path]:
    """The process's cgroup folder and its ancestors, innermost first.

    Limits of every ancestor apply, so callers take the tightest.
    """
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        hier, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hier == "0" and controllers == "":
            base = cgroup_root
        elif controller in controllers.split(","):
            base = cgroup_root / controller
        else:
            continue
        leaf = base / path.lstrip("/")
        dirs = [leaf, *leaf.parents]
        return [d for d in dirs if d == base or base in d.parents]
    return []


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_quota(
    cgroup_root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP
) -> float | None:
    """CPUs allowed by the tightest cgroup CPU quota, or ``None`` if unlimited.

    Reads ``cpu.max`` (cgroup v2), else ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us`` (cgroup v1).
    """
    quotas: list[float] = []
    for d in _cgroup_dirs(cgroup_root, proc_self_cgroup, "cpu"):
        v2 = _read(d / "cpu.max")
        if v2 is not None:
            quota, _, period = v2.partition(" ")
            if quota != "max" and period:
                quotas.append(int(quota) / int(period))
            continue
        v1_quota, v1_period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if v1_quota and v1_period and int(v1_quota) > 0:
            quotas.append(int(v1_quota) / int(v1_period))
    return min(quotas) if quotas else None


def cgroup_memory_limit(
    cgroup_root: Path = CGROUP_ROOT, proc_self_cgroup: Path = PROC_SELF_CGROUP
) -> int | None:
    """Bytes allowed by the tightest cgroup memory limit, or ``None`` if unlimited.

    Reads ``memory.max`` (cgroup v2), else ``memory.limit_in_bytes`` (v1).
    """
    limits: list[int] = []
    for d in _cgroup_dirs(cgroup_root, proc_self_cgroup, "memory"):
        value = _read(d / "memory.max") or _read(d / "memory.limit_in_bytes")
        if value and value != "max" and int(value) < _V1_UNLIMITED:
            limits.append(int(value))
    return min(limits) if limits else None
