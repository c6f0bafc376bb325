"""Small reads of this process's /proc files and of host counters that psutil lacks.

Each function opens, reads and closes on every call, and reads ``/proc/self``
(never a pid captured earlier), so a forked child always reads its own files.
"""

from __future__ import annotations

import os


def thread_count() -> int:
    """Threads of this process: one ``/proc/self/task`` entry each.

    The same count as psutil's ``num_threads()``, which parses all of
    ``/proc/<pid>/status`` for it at twice the cost (see the benchmarks).
    """
    return len(os.listdir("/proc/self/task"))


def pending_signals() -> int:
    """Signals pending for this process: the bits set in ``SigPnd`` or ``ShdPnd``.

    psutil has no API for it. Raises ``LookupError`` if the kernel does not
    show either line (unknown is not 0).
    """
    pending, found = 0, 0
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith((b"SigPnd:", b"ShdPnd:")):
                pending |= int(line.split()[1], 16)
                found += 1
    if found != 2:
        raise LookupError("SigPnd/ShdPnd not in /proc/self/status")
    return bin(pending).count("1")


def page_faults() -> tuple[int, int]:
    """Host page faults since boot, ``(major, minor)``, from ``/proc/vmstat``.

    psutil has no API for them. ``pgfault`` counts every fault, major ones
    included, so minor is the difference.
    """
    counts: dict[bytes, int] = {}
    with open("/proc/vmstat", "rb") as f:
        for line in f:
            name, _, value = line.partition(b" ")
            if name in (b"pgfault", b"pgmajfault"):
                counts[name] = int(value)
    major = counts[b"pgmajfault"]
    return major, counts[b"pgfault"] - major
