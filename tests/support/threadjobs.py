"""Real threads that burn a known kind of CPU time, then sleep until released.

While a job sleeps, its CPU times stand still: what psutil reads for it before
a collection is what the collection reads too.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import re
import threading
import time
from collections.abc import Iterator

import psutil

TASK_DIR = "/proc/self/task"


def burn_user(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time in user mode."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        sum(range(1000))


def burn_system(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU time in the kernel (zeroing read buffers)."""
    end = time.thread_time() + seconds
    fd = os.open("/dev/zero", os.O_RDONLY)
    try:
        while time.thread_time() < end:
            os.read(fd, 1 << 20)
    finally:
        os.close(fd)


def thread_times(tid: int) -> tuple[float, float]:
    """``(user, system)`` seconds of thread ``tid``, as psutil reads them now."""
    for t in psutil.Process().threads():
        if t.id == tid:
            return t.user_time, t.system_time
    raise LookupError(f"thread {tid} is not listed")


def all_thread_times() -> dict[int, tuple[float, float]]:
    return {t.id: (t.user_time, t.system_time) for t in psutil.Process().threads()}


def _state(tid: int) -> str:
    with open(f"{TASK_DIR}/{tid}/stat", "rb") as f:
        return f.read().rpartition(b")")[2].split()[0].decode()


def wait_asleep(tid: int, timeout: float = 10.0) -> None:
    """Wait until thread ``tid`` sleeps (its times no longer move)."""
    deadline = time.monotonic() + timeout
    while _state(tid) != "S":
        assert time.monotonic() < deadline, f"thread {tid} never went to sleep"
        time.sleep(0.002)


def wait_gone(tid: int, timeout: float = 10.0) -> None:
    """Wait until the kernel no longer lists ``tid``: join() returns a moment before."""
    deadline = time.monotonic() + timeout
    while str(tid) in os.listdir(TASK_DIR):
        assert time.monotonic() < deadline, f"thread {tid} still listed after it exited"
        time.sleep(0.002)


class Job:
    """A thread named ``name`` that burns ``user`` then ``system`` CPU seconds, then sleeps.

    With ``python=False`` it is started by ``_thread``: Python's ``threading``
    does not know it, so it has no Python name.
    """

    def __init__(
        self, name: str = "", *, user: float = 0.0, system: float = 0.0, python: bool = True
    ) -> None:
        self.release = threading.Event()
        self._burned = threading.Event()
        self._exited = threading.Event()
        self._user = user
        self._system = system
        self.tid = 0
        self.thread: threading.Thread | None = None
        if python:
            self.thread = threading.Thread(target=self._run, name=name, daemon=True)
            self.thread.start()
        else:
            _thread.start_new_thread(self._run, ())
        assert self._burned.wait(30), "the job never finished burning"
        wait_asleep(self.tid)

    def _run(self) -> None:
        try:
            self.tid = threading.get_native_id()
            burn_user(self._user)
            burn_system(self._system)
            self._burned.set()
            self.release.wait()
        finally:
            self._exited.set()

    def times(self) -> tuple[float, float]:
        """``(user, system)`` of this job, read by psutil."""
        return thread_times(self.tid)

    def finish(self) -> None:
        """Let the thread exit, and wait until the kernel has reaped it."""
        self.release.set()
        assert self._exited.wait(10)
        if self.thread is not None:
            self.thread.join(10)
        wait_gone(self.tid)


def pattern(name: str | None) -> str | None:
    """A thread name with each run of digits as ``N``: the metric reference's rule."""
    return None if name is None else re.sub(r"[0-9]+", "N", name)


@contextlib.contextmanager
def waiting_thread() -> Iterator[tuple[threading.Thread, int]]:
    """A thread that waits on an event for the block (then ends and is joined), and its tid."""
    done = threading.Event()
    thread = threading.Thread(target=done.wait)
    thread.start()
    try:
        assert thread.native_id is not None
        yield thread, thread.native_id
    finally:
        done.set()
        thread.join()
