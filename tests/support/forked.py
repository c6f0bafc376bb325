"""Child processes for the tests: a forked child, a held-up collection, a fresh python.

A forked child runs the very code the test process imported (under mutation
testing, the mutated copy), so a check made in the child still catches a
wrong value. It has a hard timeout, so a deadlock fails the test instead of
hanging the suite.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from .forkapps import c_fork

__all__ = [
    "FORKS",
    "c_fork",
    "c_fork_beside_threads",
    "fork_beside_threads",
    "fork_quietly",
    "held_by_another_thread",
    "in_child",
    "until_asleep",
]


def fork_quietly() -> int:
    """os.fork(), without its warning of a fork beside running threads (3.12+)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


FORKS: dict[str, Callable[[], int]] = {"os.fork": fork_quietly, "C fork, no Python hooks": c_fork}
"""A fork with Python's at-fork hooks, and one from C without them (uWSGI's default)."""

_F = TypeVar("_F", bound=Callable[..., Any])


def c_fork_beside_threads(test: _F) -> _F:
    """For a test that forks from C while another thread of the runner holds a lock.

    The thread must be parked at the fork (:func:`held_by_another_thread` waits for
    that): on a free-threaded build, a child forked from C while another thread ran
    Python hangs at its first garbage collection.
    """
    marks = (
        pytest.mark.skipif(sys.platform != "linux", reason="forks from C through glibc"),
        # Forking while another thread holds a lock is the point (Python 3.12+ warns).
        pytest.mark.filterwarnings("ignore:This process .* is multi-threaded"),
    )
    for mark in marks:
        test = mark(test)
    return test


def fork_beside_threads(test: _F) -> _F:
    """For a test that calls ``os.fork()`` while a thread of the runner may run."""
    test = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")(test)
    # Python 3.12+ warns of a fork beside threads: that is what a real program does.
    return pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")(test)


@contextlib.contextmanager
def held_by_another_thread(lock: Any, hold_max: float = 10.0) -> Iterator[Callable[[], bool]]:
    """``lock`` is held by a helper thread inside the block, for ``hold_max`` at most.

    Yields ``held()``: whether the helper still holds it. Bounded, so that a
    child that waited for the lock would time out rather than deadlock the parent.
    """
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait(hold_max)

    holder = threading.Thread(target=hold, name="lock-holder", daemon=True)
    holder.start()
    try:
        assert taken.wait(10), "the helper thread could not take the lock"
        until_asleep(holder)
        yield holder.is_alive
    finally:
        release.set()
        holder.join(10)


def until_asleep(thread: threading.Thread, settle: float = 0.02, limit: float = 10.0) -> None:
    """Return once ``thread`` has slept in the kernel for ``settle`` seconds on end.

    A fork from C while another thread runs Python leaves that thread's state half
    made in the child: on a free-threaded build the child can crash or hang at its
    first garbage collection (CPython's hazard, docs/pythons.md). A test that forks
    beside a helper thread waits here until the helper is parked in its wait:
    asleep (state S) twice, ``settle`` apart, without a context switch between.
    """
    task = Path(f"/proc/self/task/{thread.native_id}")
    if not task.is_dir():  # not Linux: no way to see it; give it time instead
        time.sleep(settle * 5)
        return
    deadline = time.monotonic() + limit
    before = _sleep_mark(task)
    while time.monotonic() < deadline:
        time.sleep(settle)
        now = _sleep_mark(task)
        if now is not None and now == before:
            return
        before = now
    pytest.fail(f"thread {thread.name} did not go to sleep in {limit:.0f} s")


def _sleep_mark(task: Path) -> int | None:
    """The thread's count of context switches if it is asleep now, else None."""
    try:
        state = task.joinpath("stat").read_text().rpartition(")")[2].split()[0]
        status = task.joinpath("status").read_text()
    except OSError:
        return None
    if state != "S":
        return None
    switches = [line for line in status.splitlines() if "ctxt_switches" in line]
    return sum(int(line.split()[1]) for line in switches)


def in_child(
    body: Callable[[], dict[str, Any]],
    timeout: int = 20,
    fork: Callable[[], int] = os.fork,
    *,
    name: str = "the child",
    grace: float = 5.0,
) -> dict[str, Any]:
    """Run ``body`` in a child made by ``fork``; return what it returned (a JSON object).

    The child has ``timeout`` seconds (an alarm whose default action ends it even
    while its only thread is blocked on a lock); the parent waits ``grace``
    seconds more, then kills it by its pid: a deadlock inside ``fork`` itself, in
    an at-fork hook before the alarm is set, fails the test too.
    """
    read_end, write_end = os.pipe()
    pid = fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os.close(read_end)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(timeout)
            try:
                result = body()
            except BaseException as exc:  # noqa: BLE001 - anything goes back to the parent
                result = {"error": f"{type(exc).__name__}: {exc}"}
            result[_HITS] = mutation_hits()
            data = json.dumps(result).encode()
            while data:
                data = data[os.write(write_end, data) :]
        finally:
            os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + timeout + grace
    data, status = _read_and_reap(pid, read_end, deadline)
    if status is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"{name} hung: no result in {timeout + grace:.0f} s (killed)")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGALRM:
            pytest.fail(f"{name} hung: its {timeout} s alarm fired")
        pytest.fail(f"{name} died by signal {signal.Signals(sig).name}")
    result: dict[str, Any] = json.loads(data or b"{}")
    add_mutation_hits(result.pop(_HITS, []))
    if "error" in result:
        pytest.fail(f"{name} failed: {result['error']}")
    return result


def _read_and_reap(pid: int, read_end: int, deadline: float) -> tuple[bytes, int | None]:
    """What child ``pid`` wrote to ``read_end``, and its status (None: not by ``deadline``)."""
    data = b""
    with os.fdopen(read_end, "rb", buffering=0) as pipe:
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([pipe], [], [], left)[0]:
                break
            chunk = pipe.read(1 << 16)
            if not chunk:
                break
            data += chunk
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return data, status
        time.sleep(0.001)
    return data, None


_HITS = "_mutation_hits"


def mutation_hits() -> list[str]:
    """In a child: the functions of the package it ran, when mutmut is recording them.

    mutmut picks the tests to run against a mutant by the functions each test
    reached, and it records that in the test process only. Code that runs only
    in a forked child (the fork handlers) would have no test at all.
    """
    if os.environ.get("MUTANT_UNDER_TEST") != "stats":
        return []
    try:
        from mutmut.state import state
    except ImportError:
        return []
    return sorted(state()._stats)


def add_mutation_hits(hits: list[str]) -> None:
    """In the test process: count the child's functions as reached by this test."""
    if hits:
        from mutmut.state import state

        state()._stats.update(hits)


class HoldUp:
    """Holds up a collection of the test process, so that a fork lands inside it.

    ``where`` is "refresh" (a source of this package, psutil.virtual_memory:
    the SDK's collection lock and the snapshot cache's lock are both held) or
    "callback" (another meter's callback on the same provider, called after
    this package's: only the SDK's lock is held). The first collection that
    gets there after ``arm()`` waits ``hold`` seconds, or until ``release()``.
    Only in the process that made it: a forked child is never held up.
    """

    def __init__(self, where: str, provider: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self._pid = os.getpid()
        self._armed = False
        self._hold = 0.0
        self.entered = threading.Event()
        self._release = threading.Event()
        self._ended: list[bool] = []
        if where == "refresh":
            real = psutil.virtual_memory

            def slow(*args: Any, **kwargs: Any) -> Any:
                self._stop_here()
                return real(*args, **kwargs)

            monkeypatch.setattr(psutil, "virtual_memory", slow)
        else:

            def callback(_options: Any) -> list[Any]:
                self._stop_here()
                return []

            meter = provider.get_meter("hold-up")
            meter.create_observable_gauge("test.hold_up", callbacks=[callback])

    def _stop_here(self) -> None:
        if self._armed and os.getpid() == self._pid:
            # This arm's own objects: a later arm() cannot mix with this stop.
            self._armed = False
            release, ended = self._release, self._ended
            self.entered.set()
            release.wait(self._hold)
            ended.append(True)

    def arm(self, hold: float) -> None:
        self.entered.clear()
        self._release = threading.Event()
        self._ended = []
        self._hold = hold
        self._armed = True

    def release(self) -> None:
        self._release.set()

    def ended(self) -> bool:
        """Whether the held-up collection got past the hold (in a child: before the fork)."""
        return bool(self._ended)


def python_env() -> dict[str, str]:
    """The environment for a fresh ``python`` that imports this very copy of the package.

    Under mutation testing the package is imported from a mutated copy; a
    subprocess must import that copy too, not the installed one.
    """
    import opentelemetry.instrumentation.process as package

    root = str(Path(package.__file__).resolve().parents[3])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
