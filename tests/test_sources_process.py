"""Edges of the process sources: psutil's thread ranking, a failed direct read, Windows
handles on a faked platform, a shared thread listing, hook faults, the SDK's export
lock, and the value excerpts of error messages.
"""

from __future__ import annotations

import collections
import os
import sys
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessMetricsOptions
from opentelemetry.instrumentation.process.excerpt import excerpt
from opentelemetry.instrumentation.process.linux import threads as linux_threads
from opentelemetry.instrumentation.process.snapshot import SnapshotCache
from opentelemetry.instrumentation.process.sources import SOURCES, ReadContext
from opentelemetry.instrumentation.process.sources.base import psutil_has

from .conftest import LogLines, OpenRecorder, Sdk, collect, points, recorded, task_listing
from .support.forked import in_child
from .support.threadjobs import Job, all_thread_times
from .support.waiting import while_still

THREAD_CPU = "process_metrics.thread.cpu.time"
ON_LINUX = sys.platform.startswith("linux")


def _by_thread(reader: InMemoryMetricReader) -> dict[int, dict[str, float]]:
    """One collection's per-thread CPU series: tid -> {cpu.mode: seconds}."""
    out: dict[int, dict[str, float]] = {}
    for attributes, value in points(collect(reader)[THREAD_CPU]).items():
        a = dict(attributes)
        out.setdefault(a["thread.id"], {})[a["cpu.mode"]] = value
    return out


def _modes(times: tuple[float, float]) -> dict[str, float]:
    return {"user": times[0], "system": times[1]}


def _ranked(times: dict[int, tuple[float, float]]) -> list[int]:
    """Thread ids busiest first (user + system), ties by lower id."""
    return sorted(times, key=lambda tid: (-sum(times[tid]), tid))


# --- psutil's path: every thread read, the busiest kept


@pytest.mark.skipif(not ON_LINUX, reason="sleeping threads are told apart in /proc")
def test_psutils_path_keeps_the_busiest_threads_user_plus_system(sdk: Sdk, jobs: list[Job]) -> None:
    # Idle threads first: lower ids than the burners, so that only CPU time ranks.
    jobs += [Job("idle-1"), Job("idle-2")]
    user = Job("user-burner", user=0.12)
    system = Job("system-burner", system=0.12)
    jobs += [user, system]
    ranked = _ranked(all_thread_times())
    keep = max(ranked.index(user.tid), ranked.index(system.tid)) + 1
    assert keep < len(ranked), ranked
    sdk.instrument(per_thread=True, direct_reads=False, max_thread_series=2 * keep)
    got = _by_thread(sdk.reader)
    truth = all_thread_times()  # only threads that are running move, the callers'
    assert set(got) == set(_ranked(truth)[:keep]), (got, truth)
    for job in (user, system):
        assert got[job.tid] == _modes(truth[job.tid]), (got, truth)


# --- the direct read: given up after its first failure


@pytest.mark.skipif(not ON_LINUX, reason="the direct read is Linux-only")
def test_a_failing_direct_thread_read_is_tried_once_then_psutil_serves(
    sdk: Sdk, monkeypatch: pytest.MonkeyPatch, logged: LogLines, jobs: list[Job]
) -> None:
    calls: list[int] = []

    def refused(limit: int, *, tids: Any = None) -> Any:  # a fault: a seccomp filter
        calls.append(limit)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(linux_threads, "busiest_threads", refused)
    job = Job("burner", user=0.05, system=0.03)
    jobs.append(job)
    sdk.instrument(per_thread=True, direct_reads=True, max_thread_series=200)
    for _ in range(3):
        got = _by_thread(sdk.reader)
        assert got[job.tid] == _modes(job.times()), got
    assert len(calls) == 1, "the failed direct read is not tried again"
    warnings = [line for line in logged.lines if "direct Linux read" in line]
    assert warnings == [
        "WARNING process metrics: the direct Linux read 'threads' failed (PermissionError: "
        "[Errno 1] Operation not permitted); psutil is used instead from now on."
    ], logged.lines


# --- the thread count: taken from the listing the per-thread read made


@pytest.mark.skipif(not ON_LINUX, reason="counts the opens of /proc files")
@pytest.mark.parametrize(
    ("direct_reads", "by"), [(True, "thread"), (False, "thread"), (True, "name")]
)
def test_the_thread_count_reuses_the_per_thread_listing(
    sdk: Sdk, opens: OpenRecorder, direct_reads: bool, by: str
) -> None:
    sdk.instrument(per_thread=True, direct_reads=direct_reads, thread_series_by=by)
    sdk.collect()
    # Listed on either side, until no thread started or ended meanwhile (an earlier test's
    # released threads may still be on their way out).
    (got, paths), _, listed = while_still(task_listing, lambda: recorded(sdk, opens))
    assert points(got["process.thread.count"]) == {frozenset(): len(listed)}
    # psutil would read the count from status: the listing made it needless.
    assert not [p for p in paths if p.endswith("/status")], paths


# --- Windows handles, on a faked Windows


def _fake_windows(monkeypatch: pytest.MonkeyPatch, *, with_handles: bool) -> None:
    # As tests/test_platforms.py fakes it; psutil gets the call it has on Windows,
    # answered with this process's descriptors (what Windows handles stand for).
    monkeypatch.setattr(psutil, "WINDOWS", True)
    monkeypatch.setattr(psutil, "LINUX", False)
    monkeypatch.setattr(sys, "platform", "win32")
    if with_handles:
        monkeypatch.setattr(
            psutil.Process, "num_handles", lambda self: self.num_fds(), raising=False
        )


@pytest.mark.skipif(not hasattr(psutil.Process, "num_fds"), reason="counts descriptors")
def test_windows_handles_are_psutils_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # Bound first: psutil's constructor itself would take the Windows path.
    cache = SnapshotCache(ProcessMetricsOptions(), ["process_num_handles"])
    _fake_windows(monkeypatch, with_handles=True)
    assert SOURCES["process_num_handles"].supported() is True
    try:
        got = cache.snapshot().readings["process_num_handles"]
        fds = len(os.listdir("/proc/self/fd" if ON_LINUX else "/dev/fd"))
    finally:
        cache.close()
    assert got == {"count": fds}
    assert type(got["count"]) is int


def test_a_psutil_without_the_call_has_no_windows_handles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_windows(monkeypatch, with_handles=False)
    monkeypatch.delattr(psutil.Process, "num_handles", raising=False)
    assert SOURCES["process_num_handles"].supported() is False


def test_availability_is_psutils_own_methods(monkeypatch: pytest.MonkeyPatch) -> None:
    # Checked when asked, not when imported: psutil can be patched in between.
    has_io = psutil_has("Process.io_counters")
    has_handles = psutil_has("Process.num_handles")
    assert has_io() is hasattr(psutil.Process, "io_counters")
    assert has_handles() is (sys.platform == "win32")
    monkeypatch.setattr(psutil.Process, "num_handles", lambda self: 0, raising=False)
    assert has_handles() is True
    monkeypatch.delattr(psutil.Process, "io_counters")
    assert has_io() is False
    # A module-level function: cpu_freq is missing on some platforms and psutil versions.
    has_freq = psutil_has("cpu_freq")
    assert has_freq() is hasattr(psutil, "cpu_freq")
    monkeypatch.delattr(psutil, "cpu_freq", raising=False)
    assert has_freq() is False


# --- hook faults: each one said once, per source, hook and exception type


def _failing_open(
    monkeypatch: pytest.MonkeyPatch, name: str, fail: Callable[[ReadContext], bool]
) -> None:
    monkeypatch.setitem(SOURCES, name, SOURCES[name]._replace(open=fail))  # type: ignore[arg-type]


def test_each_source_whose_hook_fails_is_said(
    monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    def broken(_ctx: ReadContext) -> bool:  # a fault injected: the runtime refuses a hook
        raise RuntimeError("no hook")

    names = ["cpython_gc_pauses", "asyncio_loops"]
    for name in names:
        _failing_open(monkeypatch, name, broken)
    cache = SnapshotCache(ProcessMetricsOptions(), names)
    cache.close()
    assert [line for line in logged.lines if "could not" in line] == [
        f"WARNING process metrics: could not open source {name!r} (RuntimeError: no hook); "
        "the metrics it feeds are left out."
        for name in names
    ]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_after_a_fork_an_open_hook_is_not_run_again_and_a_failing_reset_is_said(
    monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    parent = os.getpid()
    opened: list[int] = []

    def counted(_ctx: ReadContext) -> bool:
        opened.append(os.getpid())
        return True

    def reset(_ctx: ReadContext, _forked_at: float | None) -> None:
        if os.getpid() != parent:  # a fault injected: only in the child
            raise KeyError("no hook")

    _failing_open(monkeypatch, "cpython_gc_pauses", broken_open)
    monkeypatch.setitem(SOURCES, "process_memory", SOURCES["process_memory"]._replace(open=counted))
    monkeypatch.setitem(SOURCES, "cpython_gc", SOURCES["cpython_gc"]._replace(after_fork=reset))
    names = ["cpython_gc_pauses", "process_memory", "cpython_gc"]
    cache = SnapshotCache(ProcessMetricsOptions(), names)
    try:
        assert len([line for line in logged.lines if "could not" in line]) == 1

        def child() -> dict[str, Any]:
            read = sorted(cache.snapshot().readings)
            return {
                "log": [line for line in logged.lines if "could not" in line],
                "read": read,
                "opened": opened,
            }

        got = in_child(child)
    finally:
        cache.close()
    # What the open hooks found is inherited: they ran once, in the parent.
    assert got["opened"] == [parent], got
    # The source that failed to open stays out; the one whose reset failed joins it.
    assert got["read"] == ["process_memory"], got
    assert got["log"][1:] == [
        "WARNING process metrics: could not reset source 'cpython_gc' "
        "(KeyError: 'no hook'); the metrics it feeds are left out."
    ], got


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_a_reset_failing_otherwise_in_a_grandchild_is_said_again(
    monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    """A hook fault is keyed by its exception type: another one is said, the same one is not."""
    parent = os.getpid()

    def reset(_ctx: ReadContext, _forked_at: float | None) -> None:
        if os.getppid() == parent:  # a fault injected: one in the child, another in its child
            raise RuntimeError("no hook")
        raise KeyError("no hook")

    monkeypatch.setitem(SOURCES, "cpython_gc", SOURCES["cpython_gc"]._replace(after_fork=reset))
    cache = SnapshotCache(ProcessMetricsOptions(), ["process_memory", "cpython_gc"])

    def log() -> list[str]:
        return [line for line in logged.lines if "could not" in line]

    def great_grandchild() -> dict[str, Any]:
        cache.snapshot()
        return {"log": log()}

    def grandchild() -> dict[str, Any]:
        cache.snapshot()
        return {"log": log(), "child": in_child(great_grandchild)}

    def child() -> dict[str, Any]:
        cache.snapshot()
        return {"log": log(), "child": in_child(grandchild)}

    try:
        got = in_child(child)
    finally:
        cache.close()
    said = (
        "WARNING process metrics: could not reset source 'cpython_gc' ({}); "
        "the metrics it feeds are left out."
    )
    in_the_child = [said.format("RuntimeError: no hook")]
    assert got["log"] == in_the_child, got
    # Each child inherits its parent's fault log: the KeyError is new in the
    # grandchild, and the same KeyError in the next generation is not said again.
    second = got["child"]
    assert second["log"] == [*in_the_child, said.format("KeyError: 'no hook'")], got
    assert second["child"]["log"] == second["log"], got


def broken_open(_ctx: ReadContext) -> bool:  # a fault injected: the runtime refuses a hook
    raise RuntimeError("no hook")


# --- value excerpts in error messages


def test_a_repr_of_exactly_the_limit_is_shown_whole() -> None:
    text = "x" * 8
    assert excerpt(text, 10) == repr(text) == "'xxxxxxxx'"
    longer = "x" * 9
    assert excerpt(longer, 10) == repr(longer)[:5] + "...)" + repr(longer)[-1]


def test_containers_of_exactly_the_limit_keep_their_type_in_the_excerpt() -> None:
    fields = [f"f{i}" for i in range(30)]
    row = collections.namedtuple("row", fields)(*range(30))  # type: ignore[misc]
    counts = collections.Counter({f"k{i}": i + 1 for i in range(30)})
    for value in (row, counts):
        text = repr(value)
        assert len(value) == 30 and len(text) > 30
        assert excerpt(value, 30) == text[:25] + "...)" + text[-1], value
