"""thread_series_by="name": real named threads burn CPU and exit while collections go on.

Each series is a thread-name pattern (digits as ``N``); its value is the CPU
time of every thread of that pattern, live or exited, user and system apart.
The truth is psutil's per-thread times, read by the test while the threads
sleep (their times stand still then).
"""

from __future__ import annotations

import os
import threading

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from .conftest import Sdk, collect, points
from .support.threadjobs import Job, all_thread_times, pattern
from .support.waiting import while_still

pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/task"), reason="sleeping threads are told apart in /proc"
)

THREAD_CPU = "process_metrics.thread.cpu.time"
EXACT = 1e-9  # sums of the same clock-tick values, added in another order
Series = dict[tuple[str, str | None], float]


def _series(reader: InMemoryMetricReader) -> Series:
    """One collection's thread CPU series: ``(cpu.mode, thread.name or None)`` -> seconds."""
    got = points(collect(reader)[THREAD_CPU])
    out: Series = {}
    for attributes, value in got.items():
        a = dict(attributes)
        assert "thread.id" not in a, "no per-thread id by name"
        out[(a["cpu.mode"], a.get("thread.name"))] = value
    return out


def _patterns_now() -> dict[str | None, tuple[float, float]]:
    """Per pattern, user and system seconds of its live threads (psutil; Python's names)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    names[os.getpid()] = threading.main_thread().name
    out: dict[str | None, tuple[float, float]] = {}
    for tid, (user, system) in all_thread_times().items():
        p = pattern(names.get(tid))
        u, s = out.get(p, (0.0, 0.0))
        out[p] = (u + user, s + system)
    return out


def _ranked(totals: dict[str | None, tuple[float, float]]) -> list[str | None]:
    """Patterns busiest first (user + system), ties by name, unnamed threads first."""
    return sorted(totals, key=lambda p: (-sum(totals[p]), p or ""))


def _idle(name: str | None) -> Job:
    """A job that only sleeps and has no CPU time yet (a clock tick may hit its start)."""
    for _ in range(10):
        job = Job(name or "", python=name is not None)
        if job.times() == (0.0, 0.0):
            return job
        job.finish()
    raise AssertionError("every idle thread was charged a clock tick")


def test_exited_threads_stay_in_their_pattern_with_user_and_system_apart(
    sdk: Sdk, jobs: list[Job]
) -> None:
    sdk.instrument(per_thread=True, thread_series_by="name", max_thread_series=200)
    # The case tells user from system only where the OS charged each burn to its
    # mode: it splits a thread's CPU time by the clock ticks that found it in
    # each, and beside CPU-bound processes it once charged nearly all of the
    # system burns to user time. The same case again then, under a new pattern;
    # every value is checked in every round.
    for tries, prefix in enumerate(("work", "again", "more")):
        user, system = _exited_jobs_round(sdk, jobs, prefix)
        if user > 0.05 and system > 0.05 and abs(user - system) >= 0.02:
            break
        assert tries < 2, f"the OS never told the burns apart: user {user}, system {system}"


def _exited_jobs_round(sdk: Sdk, jobs: list[Job], prefix: str) -> tuple[float, float]:
    """Three jobs named ``<prefix>-<n>``, one per collection; what their pattern totals."""
    series = f"{prefix}-N"
    user = system = 0.0  # the truth: every job of the pattern so far
    # One job per collection: the previous one exits in between, so each read
    # adds a live job to the retired ones.
    # User burns read the thread's CPU clock, a system call: part of their time
    # is system time (10-15% on 3.14 and 3.15, whose loop runs faster). The
    # user total is kept over three times the system total, so that user and
    # system stay apart even were that share 30%.
    for n, (u_burn, s_burn) in enumerate([(0.15, 0.02), (0.03, 0.05), (0.12, 0.02)]):
        job = Job(f"{prefix}-{n + 7}", user=u_burn, system=s_burn)
        jobs.append(job)
        # Its times read on either side: asleep, they stand still (a thread that has
        # just set its event may still wait for the GIL before it parks: once more then).
        got, (u, s), _ = while_still(job.times, lambda: _series(sdk.reader))
        user, system = user + u, system + s
        assert got[("user", series)] == pytest.approx(user, abs=EXACT), (n, got)
        assert got[("system", series)] == pytest.approx(system, abs=EXACT), (n, got)
        job.finish()
    # All three have exited: the pattern keeps what each used.
    for _ in range(2):
        got = _series(sdk.reader)
        assert got[("user", series)] == pytest.approx(user, abs=EXACT), got
        assert got[("system", series)] == pytest.approx(system, abs=EXACT), got
    assert f"{prefix}-7" not in {name for _, name in got}
    return user, system


def test_a_renamed_thread_stays_in_the_pattern_it_was_first_seen_with(
    sdk: Sdk, jobs: list[Job]
) -> None:
    sdk.instrument(per_thread=True, thread_series_by="name", max_thread_series=200)
    job = Job("first-1", user=0.04, system=0.02)
    jobs.append(job)
    _series(sdk.reader)
    assert job.thread is not None
    job.thread.name = "second-1"
    got, (user, system), _ = while_still(job.times, lambda: _series(sdk.reader))
    assert got[("user", "first-N")] == pytest.approx(user, abs=EXACT), got
    assert got[("system", "first-N")] == pytest.approx(system, abs=EXACT), got
    assert not {name for _, name in got} & {"second-N", "second-1"}, got
    job.finish()
    got = _series(sdk.reader)  # and keeps it once it has exited
    assert got[("user", "first-N")] == pytest.approx(user, abs=EXACT), got


def test_the_cap_keeps_the_busiest_patterns_user_plus_system(sdk: Sdk, jobs: list[Job]) -> None:
    # Named to sort last among equals: only their CPU time can keep them.
    jobs.append(Job("zz-user", user=0.12))
    jobs.append(Job("zz-system", system=0.12))
    for name in ("idle-b", "idle-a"):
        jobs.append(Job(name))
    jobs.append(Job(python=False))
    ranked = _ranked(_patterns_now())
    # The cap ends with the less busy of the two: the others above are the
    # main thread and whatever other tests left running.
    keep = max(ranked.index("zz-user"), ranked.index("zz-system")) + 1
    assert keep < len(ranked), ranked
    sdk.instrument(per_thread=True, thread_series_by="name", max_thread_series=2 * keep)

    def burners() -> list[tuple[float, float]]:
        return [job.times() for job in jobs[:2]]

    got, _, _ = while_still(burners, lambda: _series(sdk.reader))
    totals = _patterns_now()
    assert {name for _, name in got} == set(_ranked(totals)[:keep]), (got, totals)
    for name in ("zz-user", "zz-system"):
        assert got[("user", name)] == totals[name][0], (name, got, totals)
        assert got[("system", name)] == totals[name][1], (name, got, totals)


def test_equally_busy_patterns_are_kept_by_name_unnamed_threads_first(
    sdk: Sdk, jobs: list[Job]
) -> None:
    # Threads that only sleep have no CPU time: equals, told apart by name.
    # Started in reverse order, so that neither thread ids nor the order
    # found decide.
    for name in ("Idle-c", "Idle-b", None):  # None: no Python name, so no thread.name
        jobs.append(_idle(name))
    totals = _patterns_now()
    ranked = _ranked(totals)
    tied = [p for p in ranked if p in (None, "Idle-b", "Idle-c")]
    assert tied == [None, "Idle-b", "Idle-c"], totals
    keep = ranked.index(None) + 1
    sdk.instrument(per_thread=True, thread_series_by="name", max_thread_series=2 * keep)
    got = _series(sdk.reader)
    assert {name for _, name in got} == set(ranked[:keep]), (got, totals)
    assert ("user", None) in got and ("user", "Idle-b") not in got, got
