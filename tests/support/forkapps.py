"""Targets of the multiprocessing tests in ``test_fork_stress.py``.

They live in an importable module because the spawn start method pickles a
target by its module path. Each one reports what the package measured next to
what the OS says at the same moment, so the test process can compare.
"""

from __future__ import annotations

import mmap
import os
import resource
import select
import signal
import sys
import time
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import SCOPE_NAME, ProcessInstrumentor

from .points import value_of

MIB = 1 << 20

# Set by the test before a fork-method pool starts: the children inherit it.
INHERITED: InMemoryMetricReader | None = None

# A spawned worker instruments itself once, however many tasks it runs.
_OWN: InMemoryMetricReader | None = None


# A child that has released the GIL this many times has no waiter of the
# parent's left in CPython's GIL condition variable (see c_fork).
_GIL_RELEASES = 8
_HANDSHAKE_SECONDS = 5.0
_FORK_ATTEMPTS = 4


def c_fork() -> int:
    """fork(2) called from C, as uWSGI does: no Python at-fork hook runs.

    ``PyDLL`` keeps the GIL across the call, so the child holds it, as it would
    after a fork in a C server's master process.

    A thread waiting for the GIL at such a fork leaves CPython's GIL condition
    variable with a waiter the child does not have; with glibc before 2.41 the
    child then hangs at its first releases of the GIL (in
    ``pthread_cond_signal``), before any code under test runs. Only Python's
    at-fork hook renews the GIL. That is CPython's hazard, not the package's
    (about one fork in 1,500 here, beside a thread that wakes every
    millisecond). So the child first releases the GIL a few times and says so
    on a pipe; a child that cannot is killed and the fork made again. A short
    sleep before each fork lets the other threads go back to their waits: on a
    free-threaded build a thread caught running Python at the fork can hang
    the child's first collection, a hazard no handshake can see.
    """
    import ctypes

    libc = ctypes.PyDLL(None, use_errno=True)
    libc.fork.restype = ctypes.c_int
    for _ in range(_FORK_ATTEMPTS):
        read_end, write_end = os.pipe()
        time.sleep(0.001)  # the other threads take their turns and go back to waiting
        pid: int = libc.fork()
        if pid < 0:
            err = ctypes.get_errno()
            os.close(read_end)
            os.close(write_end)
            raise OSError(err, "fork failed")
        if pid == 0:
            os.close(read_end)  # each os call releases the GIL
            for _ in range(_GIL_RELEASES):
                os.write(write_end, b".")
            os.close(write_end)
            return 0
        os.close(write_end)
        if _handshake(read_end) == _GIL_RELEASES:
            return pid
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print(
            f"c_fork: child {pid} hung on CPython's GIL after the fork; forking again",
            file=sys.stderr,
        )
    raise RuntimeError(f"c_fork: {_FORK_ATTEMPTS} children in a row hung on CPython's GIL")


def _handshake(read_end: int) -> int:
    """How many bytes the child wrote before it closed ``read_end``'s pipe or timed out."""
    got = 0
    deadline = time.monotonic() + _HANDSHAKE_SECONDS
    try:
        while got < _GIL_RELEASES and (left := deadline - time.monotonic()) > 0:
            if not select.select([read_end], [], [], left)[0]:
                break
            chunk = os.read(read_end, _GIL_RELEASES)
            if not chunk:
                break
            got += len(chunk)
    finally:
        os.close(read_end)
    return got


def collect(reader: InMemoryMetricReader) -> dict[str, Any]:
    """One collection: this package's points as {metric: {attributes: value}}.

    Not conftest's helper: importing that (and pytest) in every spawned child
    would only slow it down.
    """
    data = reader.get_metrics_data()
    found: dict[str, Any] = {}
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            if sm.scope.name == SCOPE_NAME:
                for m in sm.metrics:
                    pts: list[Any] = list(m.data.data_points)
                    found[m.name] = {frozenset(p.attributes.items()): value_of(p) for p in pts}
    return found


def one(points: dict[Any, Any]) -> Any:
    """The value of a metric that has exactly one point."""
    (v,) = points.values()
    return v


def statm_rss() -> int:
    """Resident bytes of this process, straight from the kernel."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def boottime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def measure(reader: InMemoryMetricReader, allocate_mib: int, busy: float) -> dict[str, Any]:
    """Allocate, burn CPU, collect once; the package's values with the OS's around them."""
    floor = statm_rss()
    # A fresh anonymous mapping with every page touched: new resident memory
    # even when the heap inherited from a big parent has free pages to reuse.
    block = mmap.mmap(-1, allocate_mib * MIB) if allocate_mib else None
    if block is not None:
        for offset in range(0, len(block), mmap.PAGESIZE):
            block[offset] = 1
    end = time.thread_time() + busy
    while time.thread_time() < end:
        sum(range(2_000))
    cpu_before = cpu_seconds()
    tasks_before = len(os.listdir("/proc/self/task"))
    before = boottime()
    got = collect(reader)
    cpu_after = cpu_seconds()
    rss_after = statm_rss()
    tasks = len(os.listdir("/proc/self/task"))
    now = boottime()
    live = ProcessInstrumentor()._metrics._live
    result = {
        "pid": os.getpid(),
        "facts_pid": live.cache.facts.pid if live is not None else None,
        "floor": floor,
        "rss": one(got["process.memory.usage"]),
        "rss_after": rss_after,
        "cpu": sum(got["process.cpu.time"].values()),
        "cpu_before": cpu_before,
        "cpu_after": cpu_after,
        "threads": one(got["process.thread.count"]),
        "tasks_before": tasks_before,
        "tasks": tasks,
        "uptime": one(got["process.uptime"]),
        "before": before,
        "now": now,
        "kept": len(block) if block is not None else 0,
    }
    if block is not None:
        block.close()
    return result


def fork_report(_task: int) -> dict[str, Any]:
    """In a fork-method child: measure through the instrumentation it inherited."""
    assert INHERITED is not None, "the test sets INHERITED before the pool forks"
    return measure(INHERITED, allocate_mib=100, busy=0.1)


def spawn_report(_task: int) -> dict[str, Any]:
    """In a spawned (fresh) interpreter: instrument on an own provider, then measure."""
    global _OWN
    if _OWN is None:
        reader = InMemoryMetricReader()
        ProcessInstrumentor().instrument(meter_provider=MeterProvider(metric_readers=[reader]))
        _OWN = reader
    return measure(_OWN, allocate_mib=100, busy=0.1)
