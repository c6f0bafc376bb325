"""Run-queue wait from ``schedstat``: how long threads were runnable but waiting for a CPU.

``/proc/<pid>/task/<tid>/schedstat`` holds three numbers: nanoseconds on a
CPU, nanoseconds runnable but waiting for one (``run_delay``), and time
slices. The kernel keeps them when it has ``CONFIG_SCHED_INFO`` (Debian's and
most distributions' kernels); psutil has no API for them.
``/proc/<pid>/schedstat`` is the main thread's alone, and a thread that exits
takes its own with it: no file keeps the process's total. So
:class:`RunQueueWait` adds up each live thread's growth between two reads, a
counter that never goes down. Each call opens, reads and closes its files.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Sequence

_TASK_DIR = "/proc/self/task"
_FLAGS = os.O_RDONLY | os.O_CLOEXEC
# CPUCLOCK_PERTHREAD_MASK (4) | CPUCLOCK_SCHED (2), as linux/threads.py ranks threads.
_THREAD_SCHED_CLOCK = 6


def read(path: str) -> tuple[int, int]:
    """``(on a CPU, waiting for one)`` of one ``schedstat`` file, nanoseconds.

    Raises ``FileNotFoundError`` or ``ProcessLookupError`` when the thread has
    gone, another ``OSError`` where the kernel keeps no such file.
    """
    fd = os.open(path, _FLAGS)
    try:
        data = os.read(fd, 128)  # pragma: no mutate - three numbers on one line
    finally:
        os.close(fd)
    if not data:
        raise ProcessLookupError(f"{path}: empty")
    on_cpu, waiting, _slices = data.split()
    return int(on_cpu), int(waiting)


def this_thread_waiting_ns() -> int:
    """The calling thread's ``run_delay``: nanoseconds it has waited for a CPU."""
    return read("/proc/thread-self/schedstat")[1]


class RunQueueWait:
    """The run-queue wait of this process's threads, a counter in nanoseconds.

    Each :meth:`update` adds each live thread's growth of ``run_delay`` since
    the previous one: all of it for a thread not seen before, so the first
    update counts what the live threads waited since they started. What a
    thread waited after the last update is lost when it exits (a server that
    starts a thread per request under-reads). A thread whose CPU clock
    (``clock_gettime``, no file) did not move since the last update was not
    put on a CPU since, and the kernel adds a wait when the thread arrives on
    one: its file is not read.
    """

    __slots__ = ("known", "total_ns")

    def __init__(self) -> None:
        self.known: dict[int, tuple[int, int]] = {}
        """``(on a CPU, waiting)`` of each thread at the last update, by thread id."""
        self.total_ns = 0

    def update(self, tids: Sequence[int]) -> int:
        """The counter after adding what the threads ``tids`` waited since the last update, ns.

        ``tids`` is a listing of ``/proc/self/task`` made just before. Raises
        ``OSError`` where the kernel keeps no ``schedstat`` (the caller leaves
        the metric out).
        """
        known, seen = self.known, {}
        clock = time.clock_gettime_ns
        grown = 0
        for tid in tids:
            before = known.get(tid)
            if before is not None:
                try:
                    on_cpu = clock((~tid << 3) | _THREAD_SCHED_CLOCK)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    continue  # it exited after the listing
                if on_cpu == before[0]:
                    seen[tid] = before
                    continue
            try:
                now = read(f"{_TASK_DIR}/{tid}/schedstat")
            except (FileNotFoundError, ProcessLookupError):
                continue
            if before is None or now[0] < before[0] or now[1] < before[1]:
                grown += now[1]  # new, or another thread that took an exited one's id
            else:
                grown += now[1] - before[1]
            seen[tid] = now
        self.known = seen
        self.total_ns += grown
        return self.total_ns
