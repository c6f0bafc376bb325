"""Run-queue wait (linux/schedstat.py, process_metrics.cpu.linux.run_queue.wait_time), for real.

The stall is produced for real: a process pinned to one CPU with a CPU-bound
process pinned beside it. Each reading is taken while the worker threads are
parked (blocked, so their waits cannot grow), and compared with the OS's own
figures for the same window: the threads' run_delay added up from /proc, and
what the threads did not get of the CPU (wall time times runnable threads,
minus their CPU time). The windows through the metric run in fresh processes
(tests/support/runqueue.py).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from opentelemetry.instrumentation.process.linux import schedstat

from .conftest import OpenRecorder
from .support import runqueue
from .support.runqueue import Workers, hog
from .support.threadjobs import wait_gone, waiting_thread

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture
def one_cpu() -> Iterator[int]:
    """This process on one CPU only, for the test."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs CPU affinity")
    before = os.sched_getaffinity(0)
    cpu = max(before)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.parametrize("threads", [0, 2], ids=["the main thread spins", "two threads hash"])
def test_the_wait_beside_a_cpu_bound_process_is_the_oss_own(threads: int) -> None:
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("needs CPU affinity")
    seconds = 2.0
    got = runqueue.window(str(threads), seconds)
    runnable = max(1, threads)
    # The OS's own sum, read on either side of each collection (nanoseconds, as seconds).
    assert got["lo"] - 1e-6 <= got["waited"] <= got["hi"] + 1e-6, got
    # What the runnable threads did not get of their CPU during the stall, they waited for.
    # The OS's sums are read just outside the clocks: on a busy machine a wait can fall
    # between the two, so its window is bounded by the widest one.
    least, most = (w * runnable - got["cpu"] for w in (got["wall"], got["widest"]))
    assert 0.9 * least <= got["by_os"] <= 1.1 * most, got
    assert got["waited"] > 0.3 * seconds * runnable  # a neighbour on the one CPU takes a share


def test_a_quiet_process_waits_for_a_cpu_only_at_its_wake_ups() -> None:
    got = runqueue.window("quiet", 1.0)
    # What it reports is the OS's own, read on either side of each collection (a busy
    # machine delays even the wake-ups, and the collections themselves) ...
    assert got["lo"] - 1e-6 <= got["waited"] <= got["hi"] + 1e-6, got
    if not got["niced"]:
        pytest.skip("needs root to raise a process's priority (nice -20)")
    # ... and, served first at each wake-up, a process that sleeps waits little: its
    # sleep is not counted, which would be all of it (0.2 % here when quiet; 4.4 % once
    # in a CI run beside others).
    assert 0 <= got["waited"] < 0.5 * got["wall"], got


def test_an_exited_threads_wait_stays_counted_and_the_counter_never_goes_down(
    one_cpu: int,
) -> None:
    counter = schedstat.RunQueueWait()
    workers = Workers(1)
    worker = workers.threads[0].native_id
    neighbour = hog(one_cpu, 2.0)
    try:
        time.sleep(0.2)
        workers.run()
        time.sleep(0.6)
        workers.park()
        tids = [int(t) for t in os.listdir("/proc/self/task")]
        assert worker in tids
        with_thread = counter.update(tids)
        assert with_thread > 0.1e9  # it waited beside the neighbour
    finally:
        workers.end()  # the thread exits: its run_delay leaves the OS's sum
        neighbour.wait()
    assert worker is not None
    wait_gone(worker)  # join() returns a moment before the kernel stops listing the thread
    tids = [int(t) for t in os.listdir("/proc/self/task")]
    assert counter.update(tids) >= with_thread


def _parked(thread: threading.Thread, timeout: float = 10.0) -> None:
    """Wait until ``thread`` sleeps with its CPU clock still: start() returns while it has
    yet to run into what it waits on (and a busy machine can keep it waiting for a CPU)."""
    assert thread.ident is not None
    clock = time.pthread_getcpuclockid(thread.ident)
    deadline = time.monotonic() + timeout
    while True:
        before = time.clock_gettime_ns(clock)
        time.sleep(0.02)
        with open(f"/proc/self/task/{thread.native_id}/stat", "rb") as f:
            state = f.read().rpartition(b")")[2].split()[0]
        if state == b"S" and time.clock_gettime_ns(clock) == before:
            return
        assert time.monotonic() < deadline, f"thread {thread.native_id} never went to sleep"


def test_an_idle_thread_is_not_read_again_and_a_new_one_counts_whole(opens: OpenRecorder) -> None:
    counter = schedstat.RunQueueWait()
    with waiting_thread() as (sleeper, tid):
        _parked(sleeper)  # its run_delay moves no more
        first = counter.update([tid])
        assert first == schedstat.read(f"/proc/self/task/{tid}/schedstat")[1]
        with opens.recording() as opened:
            again = counter.update([tid])  # asleep since: its CPU clock did not move
        assert again == first and opened == []


def test_the_reading_is_three_numbers_and_a_gone_thread_is_said() -> None:
    on_cpu, waiting = schedstat.read("/proc/self/schedstat")
    assert on_cpu > 0 and waiting >= 0
    assert schedstat.this_thread_waiting_ns() >= 0
    with pytest.raises((FileNotFoundError, ProcessLookupError)):
        schedstat.read("/proc/self/task/999999999/schedstat")
