"""A process as the kernel describes it, read by the test itself from ``/proc/<pid>``.

The values a process reported are held against two such readings, one taken
before its collection and one after: what grows (CPU time, uptime) must lie
between them, what stays (thread and descriptor counts) must equal them, and
the resident size must lie within them. Linux only.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

TICK = 1 / os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
RSS_SLACK = 512 << 10
"""Bytes the resident size may move between a reading and the collection: a few pages of
allocation by the collection and the export themselves."""


@dataclass(frozen=True)
class Reading:
    """One reading of ``/proc/<pid>``; times in seconds."""

    pid: int
    boottime: float
    """CLOCK_BOOTTIME when read."""
    wall: float
    """time.time() when read."""
    start: float
    """Seconds after boot at which the process started (stat field 22)."""
    user: float
    system: float
    threads: int
    fds: int
    rss: int


def read(pid: int) -> Reading:
    """``/proc/<pid>``: stat for start, CPU and threads, the fd folder, statm for RSS."""
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    fields = stat[stat.rfind(b")") + 2 :].split()
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    resident = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return Reading(
        pid=pid,
        boottime=time.clock_gettime(time.CLOCK_BOOTTIME),
        wall=time.time(),
        start=int(fields[19]) * TICK,
        user=int(fields[11]) * TICK,
        system=int(fields[12]) * TICK,
        threads=int(fields[17]),
        fds=fds,
        rss=resident * PAGE,
    )


def memory_limit(pid: int) -> int:
    """Host memory, capped by the lowest cgroup memory limit above ``pid`` (v1 or v2)."""
    limits = [_meminfo_total()]
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, name = Path("/sys/fs/cgroup"), "memory.max"
        elif "memory" in controllers.split(","):
            base, name = Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts) + 1):
            try:
                text = (base.joinpath(*parts[:depth]) / name).read_text().split()[0]
            except (OSError, IndexError):
                continue
            if text != "max" and int(text) < 1 << 60:
                limits.append(int(text))
    return min(limits)


def _meminfo_total() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal in /proc/meminfo")


@dataclass(frozen=True)
class Reported:
    """What one collection of a process reported."""

    rss: float
    utilization: float
    user: float
    system: float
    threads: float
    fds: float
    uptime: float


def check_own(got: Reported, before: Reading, after: Reading, *, fds_open: int) -> None:
    """``got`` was collected in process ``before.pid`` between the two readings.

    ``fds_open``: descriptors open in the process only during its collection
    (its own listing of ``/proc/self/fd``; a scrape's connection).
    """
    pid = before.pid
    assert after.pid == pid and after.start == before.start, "not the same process"
    low_rss, high_rss = sorted((before.rss, after.rss))
    assert low_rss - RSS_SLACK <= got.rss <= high_rss + RSS_SLACK, (
        f"{pid}: RSS {got.rss:.0f}, statm read {before.rss} then {after.rss}"
    )
    limit = memory_limit(pid)
    assert abs(got.utilization * limit - got.rss) <= 1, (
        f"{pid}: memory utilisation {got.utilization} x limit {limit} is not its RSS {got.rss}"
    )
    # CPU time is counted in ticks in stat (truncated), to the microsecond in the report.
    for mode, value, first, last in (
        ("user", got.user, before.user, after.user),
        ("system", got.system, before.system, after.system),
    ):
        assert first - 1e-6 <= value <= last + TICK, (
            f"{pid}: {mode} CPU {value}, stat read {first} then {last}"
        )
    low_threads, high_threads = sorted((before.threads, after.threads))
    assert low_threads <= got.threads <= high_threads, (
        f"{pid}: {got.threads} threads, stat read {before.threads} then {after.threads}"
    )
    low_fds, high_fds = sorted((before.fds, after.fds))
    assert low_fds + fds_open <= got.fds <= high_fds + fds_open, (
        f"{pid}: {got.fds} fds, /proc/{pid}/fd listed {before.fds} then {after.fds} "
        f"(+{fds_open} open during the collection)"
    )
    # Its age when collected: between its ages at the two readings.
    assert before.boottime - before.start - 1e-3 <= got.uptime, (
        f"{pid}: uptime {got.uptime}, it was {before.boottime - before.start} at the first reading"
    )
    assert got.uptime <= after.boottime - after.start + 1e-3, (
        f"{pid}: uptime {got.uptime}, it was {after.boottime - after.start} at the second reading"
    )


def differs(got: Reported, other: Reading, at: Reading) -> None:
    """``got`` is not ``other``'s (another process, read at about the same time as ``at``)."""
    assert got.rss != other.rss, f"RSS {got.rss} is process {other.pid}'s"
    age = at.boottime - other.start
    assert abs(got.uptime - age) > 0.02, f"uptime {got.uptime} is process {other.pid}'s ({age})"
