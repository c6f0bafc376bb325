"""The direct per-thread reader against psutil's ``Process.threads()`` on real threads."""

from __future__ import annotations

import errno
import itertools
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from .conftest import OpenRecorder
from .support.forked import in_child

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/self/task and thread CPU clocks"
)

if sys.platform.startswith("linux"):
    from opentelemetry.instrumentation.process.linux import threads as linux_threads
    from opentelemetry.instrumentation.process.linux.threads import ThreadTimes, busiest_threads

TICK = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
# CPU each busy thread burns: at least 4 ticks apart from each other and from idle threads.
BURN = {"busy-a": 0.05, "busy-b": 0.09, "busy-c": 0.13}
IDLE = 60


class Crowd:
    """Busy threads that burned a known amount of CPU and now wait, among idle ones."""

    def __init__(self, burn: dict[str, float], idle: int) -> None:
        self.release = threading.Event()
        self.tids: dict[str, int] = {}
        ready = threading.Barrier(len(burn) + idle + 1)
        self.threads = [
            threading.Thread(target=self._burn, args=(seconds, ready), name=name, daemon=True)
            for name, seconds in burn.items()
        ] + [
            threading.Thread(target=self._idle, args=(ready,), name=f"idle-{i}", daemon=True)
            for i in range(idle)
        ]
        for t in self.threads:
            t.start()
        ready.wait()
        self.tids = {t.name: t.native_id for t in self.threads if t.native_id is not None}
        self._settle()

    def _settle(self, timeout: float = 10.0) -> None:
        """Wait until every thread sleeps in ``release.wait()`` with its CPU clock still.

        Leaving the barrier costs each thread a moment of CPU (and the GIL, in turn): on a
        busy machine that can come after the test's first read, and move its times.
        """
        clocks = [time.pthread_getcpuclockid(t.ident) for t in self.threads if t.ident]
        deadline = time.monotonic() + timeout
        while True:
            before = [time.clock_gettime_ns(c) for c in clocks]
            time.sleep(0.02)
            asleep = all(_state(tid) == b"S" for tid in self.tids.values())
            if asleep and [time.clock_gettime_ns(c) for c in clocks] == before:
                return
            assert time.monotonic() < deadline, "the crowd never settled"

    def _burn(self, seconds: float, ready: threading.Barrier) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
        self._idle(ready)

    def _idle(self, ready: threading.Barrier) -> None:
        ready.wait()
        self.release.wait()

    def stop(self) -> None:
        self.release.set()
        for t in self.threads:
            t.join()


@pytest.fixture
def crowd() -> Iterator[Crowd]:
    c = Crowd(BURN, IDLE)
    yield c
    c.stop()


def _state(tid: int) -> bytes:
    with open(f"/proc/self/task/{tid}/stat", "rb") as f:
        return f.read().rpartition(b")")[2].split()[0]


def _total(t: Any) -> float:
    return float(t.user_time + t.system_time)


def _ranking(listed: list[Any]) -> list[Any]:
    """psutil's list ranked as today's psutil path ranks it."""
    return sorted(listed, key=lambda t: (-_total(t), t.id))


def test_keeps_psutils_top_threads_with_psutils_values(crowd: Crowd) -> None:
    me = threading.get_native_id()
    before = psutil.Process().threads()
    ranked = _ranking(before)
    ids = [t.id for t in ranked]
    # Cut just below the least busy busy thread: idle threads sit 5 ticks lower.
    limit = ids.index(crowd.tids["busy-a"]) + 1
    assert _total(ranked[limit - 1]) - _total(ranked[limit]) >= 3 * TICK, ranked[: limit + 1]

    kept = busiest_threads(limit)
    after = psutil.Process().threads()

    expected = set(ids[:limit])
    assert {t.id for t in _ranking(after)[:limit]} == expected, "psutil moved under the test"
    assert [t.id for t in kept if t.id in crowd.tids.values()] == [
        crowd.tids[name] for name in ("busy-c", "busy-b", "busy-a")
    ]
    assert {t.id for t in kept} == expected
    assert len(kept) == limit
    was = {t.id: t for t in before}
    now = {t.id: t for t in after}
    for t in kept:
        if t.id == me:  # the reading thread runs: its times lie between psutil's reads
            assert was[t.id].user_time <= t.user_time <= now[t.id].user_time
            assert was[t.id].system_time <= t.system_time <= now[t.id].system_time
        else:  # idle at read time: exactly psutil's values
            assert (t.user_time, t.system_time) == (was[t.id].user_time, was[t.id].system_time)
            assert (t.user_time, t.system_time) == (now[t.id].user_time, now[t.id].system_time)


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 8])
def test_every_kept_thread_is_at_least_as_busy_as_any_left_out(crowd: Crowd, limit: int) -> None:
    """Within tick resolution, the ranking agrees with psutil's values at every cut."""
    before = {t.id: t for t in psutil.Process().threads()}
    kept = busiest_threads(limit)
    after = {t.id: t for t in psutil.Process().threads()}
    assert len(kept) == limit
    # Threads another test started may come and go; compare those alive throughout.
    kept_ids = {t.id for t in kept if t.id in before and t.id in after}
    # Ticks truncate user and system separately: up to 2 ticks below the clock.
    lowest_kept = min(_total(after[i]) for i in kept_ids)
    left_out = [t for i, t in before.items() if i not in kept_ids and i in after]
    assert lowest_kept >= max(_total(t) for t in left_out) - 2 * TICK - 1e-9
    totals = [_total(after[t.id]) for t in kept if t.id in kept_ids]
    assert all(a >= b - 2 * TICK - 1e-9 for a, b in itertools.pairwise(totals)), totals


def test_limit_zero_reads_nothing(opens: OpenRecorder) -> None:
    with opens.recording() as paths:
        assert busiest_threads(0) == []
    assert paths == []


def test_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match=r"limit must be an integer >= 0, got -1"):
        busiest_threads(-1)


def test_limit_above_thread_count_gives_every_thread(crowd: Crowd) -> None:
    for _ in range(5):
        before = {t.id for t in psutil.Process().threads()}
        kept = busiest_threads(10_000)
        after = {t.id for t in psutil.Process().threads()}
        if before == after:
            break
    assert before == after, "threads kept starting or stopping"
    assert [t.id for t in kept if t.id in before] == [t.id for t in kept]
    assert {t.id for t in kept} == before
    assert len(kept) == len(before) >= IDLE + len(BURN) + 1


@pytest.mark.parametrize("limit", [1, 4])
def test_opens_the_listing_and_exactly_limit_stat_files(
    crowd: Crowd, opens: OpenRecorder, limit: int
) -> None:
    with opens.recording() as paths:
        kept = busiest_threads(limit)
    assert paths == ["/proc/self/task"] + [f"/proc/self/task/{t.id}/stat" for t in kept]
    assert len(kept) == limit


def test_no_descriptor_left_open(crowd: Crowd) -> None:
    before = sorted(os.listdir("/proc/self/fd"))
    busiest_threads(5)
    assert sorted(os.listdir("/proc/self/fd")) == before


def _gone_tid() -> int:
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    assert t.native_id is not None
    # join() returns when Python is done with the thread; the kernel task ends just after.
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/self/task/{t.native_id}") and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not os.path.exists(f"/proc/self/task/{t.native_id}")
    return t.native_id


def test_thread_gone_before_its_clock_is_skipped(
    crowd: Crowd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tid listed by /proc that has exited since: EINVAL from its clock, skipped."""
    gone = _gone_tid()
    listdir = os.listdir
    monkeypatch.setattr(
        linux_threads.os, "listdir", lambda path: [str(gone), *listdir(path)], raising=True
    )
    kept = busiest_threads(10_000)
    assert gone not in {t.id for t in kept}
    assert threading.get_native_id() in {t.id for t in kept}


def test_thread_gone_before_its_stat_is_replaced_by_the_next(
    crowd: Crowd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept tid whose stat file vanished is skipped and the next busiest is read instead."""
    gone = _gone_tid()
    rank = linux_threads._rank
    expected = [t.id for t in busiest_threads(3)]
    monkeypatch.setattr(linux_threads, "_rank", lambda tids: [(-(10**18), gone), *rank(tids)])
    kept = busiest_threads(3)
    assert [t.id for t in kept] == expected
    assert gone not in {t.id for t in kept}


def test_unsupported_thread_clock_raises_oserror(monkeypatch: pytest.MonkeyPatch) -> None:
    """EINVAL on the reading thread's own clock means no per-thread clocks: fall back."""

    def einval(clock_id: int) -> int:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(time, "clock_gettime_ns", einval)
    with pytest.raises(OSError) as info:
        busiest_threads(3)
    assert info.value.errno == errno.EINVAL


def test_other_clock_errors_propagate(monkeypatch: pytest.MonkeyPatch) -> None:
    def eperm(clock_id: int) -> int:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(time, "clock_gettime_ns", eperm)
    with pytest.raises(PermissionError):
        busiest_threads(3)


def test_foreign_task_listing_raises_oserror(monkeypatch: pytest.MonkeyPatch) -> None:
    """A /proc of another pid namespace lists tids that are not ours: fall back."""
    monkeypatch.setattr(linux_threads.os, "listdir", lambda path: ["1"])
    with pytest.raises(OSError) as info:
        busiest_threads(3)
    assert info.value.errno == errno.ESRCH
    own = threading.get_native_id()
    assert str(info.value) == f"[Errno 3] this thread ({own}) is not listed in /proc/self/task"


def test_name_with_parenthesis_is_parsed_after_the_last_one() -> None:
    """A thread may name itself "x) 1 2 3"; utime/stime still match its CPU clock."""
    done, release = threading.Event(), threading.Event()
    box: dict[str, int] = {}

    def body() -> None:
        end = time.thread_time() + 0.08
        while time.thread_time() < end:
            pass
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as f:
            f.write("x) 1 2 3 4 5 6")
        box["cpu_ns"] = time.thread_time_ns()
        done.set()
        release.wait()

    t = threading.Thread(target=body)
    t.start()
    try:
        done.wait()
        mine = {x.id: x for x in busiest_threads(10_000)}[t.native_id or 0]
    finally:
        release.set()
        t.join()
    clock = box["cpu_ns"] / 1e9
    # Each of user and system truncates to whole ticks: the sum is at most 2 ticks low.
    assert clock - 2 * TICK - 1e-9 <= mine.user_time + mine.system_time <= clock + TICK


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_forked_child_reads_its_own_threads(crowd: Crowd) -> None:
    def body() -> dict[str, Any]:  # in the child: one thread, while the parent has dozens
        kept = busiest_threads(10_000)
        return {
            "kept": sorted(t.id for t in kept),
            "me": threading.get_native_id(),
            "pid": os.getpid(),
            # An at-fork hook of another library may start a thread here.
            "tasks": sorted(int(tid) for tid in os.listdir("/proc/self/task")),
        }

    out = in_child(body)
    pid = out["pid"]
    assert out.get("me") == pid, out
    assert out.get("kept") == out.get("tasks"), out  # the child's own, every one
    assert pid in out["kept"] and len(out["kept"]) < len(crowd.threads), out


def test_times_are_thread_times_named_tuples(crowd: Crowd) -> None:
    kept = busiest_threads(2)
    assert all(type(t) is ThreadTimes for t in kept)
    assert all(isinstance(t.user_time, float) and isinstance(t.system_time, float) for t in kept)
