"""Supervisor mode: how each child ended, counted by cause, with real processes.

This test process is the master: it forks workers with ``multiprocessing``
(the fork context) or billiard, ends them each way, and reaps them as those
libraries do (``Process.join``, a pool's own maintenance). The wait wrapper
sees each status in this process; the counts are read from a real SDK.
"""

from __future__ import annotations

import functools
import multiprocessing
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from opentelemetry.instrumentation.process import ProcessMetrics
from opentelemetry.instrumentation.process.platforms import ON_LINUX
from opentelemetry.instrumentation.process.probes.reaps import WAITS, reaps
from opentelemetry.instrumentation.process.sources.child_exits import CARRY, CARRY_TIME, SETTLE
from opentelemetry.instrumentation.process.sources.exit_causes import CAUSES

from .conftest import collect, points
from .support.forked import c_fork, in_child
from .support.waiting import eventually

linux_only = pytest.mark.skipif(not ON_LINUX, reason="reads /proc")
EXITS = "process_metrics.tree.process.exits"
CAUSE = "process_metrics.exit.cause"
SIGNAL = "process_metrics.exit.signal"
CODE = "process.exit.code"
EACH = 20
"""Workers ended each way."""
FORK = multiprocessing.get_context("fork")


def by_cause(reader: InMemoryMetricReader) -> dict[tuple[Any, ...], int]:
    """The tree's exits: ``(cause, signal, code) -> count``, points at 0 left out."""
    found = collect(reader)
    out = {}
    for key, value in points(found[EXITS]).items():
        attrs = dict(key)
        assert set(attrs) <= {CAUSE, SIGNAL, CODE}, attrs
        assert attrs[CAUSE] in CAUSES, attrs
        if value:
            out[(attrs[CAUSE], attrs.get(SIGNAL), attrs.get(CODE))] = value
    return out


def counted(
    reader: InMemoryMetricReader, expected: dict[tuple[Any, ...], int], timeout: float = 60
) -> dict[tuple[Any, ...], int]:
    """The exits by cause once they are ``expected`` (a collection now and then till then)."""
    seen: list[dict[tuple[Any, ...], int]] = []

    def check() -> bool:
        seen.append(by_cause(reader))
        return seen[-1] == expected

    assert eventually(check, timeout=timeout, interval=0.2), (seen[-1], expected)
    return seen[-1]


# --- the ways a multiprocessing worker ends -------------------------------------


def _worker(how: str, go: int) -> None:
    os.read(go, 1)  # until the test says go (no shared lock that a kill could leave held)
    if how == "exit":
        sys.exit(0)
    if how == "error":
        sys.exit(3)
    time.sleep(600)  # ended by the master: terminate() or kill()


def test_multiprocessing_workers_are_counted_by_how_they_ended(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    supervise()
    assert by_cause(reader) == {}
    ways = ("exit", "error", "terminate", "kill")
    workers = []
    for how in ways * EACH:
        go, tell = os.pipe()
        p = FORK.Process(target=_worker, args=(how, go))
        p.start()
        os.close(go)
        workers.append((how, p, tell))
    by_cause(reader)  # every worker seen alive once, some perhaps not yet
    for how, p, tell in workers:
        if how == "terminate":
            p.terminate()
        elif how == "kill":
            p.kill()
        else:
            os.write(tell, b"!")
        os.close(tell)
    for _, p, _ in workers:
        p.join(60)  # multiprocessing reaps: os.waitpid in this process
    assert [p.exitcode for how, p, _ in workers if how == "exit"] == [0] * EACH
    counted(
        reader,
        {
            ("exit", None, 0): EACH,
            ("error", None, 3): EACH,
            ("signal", "SIGTERM", None): EACH,
            ("signal", "SIGKILL", None): EACH,
        },
    )


def _pid(_n: int) -> int:
    return os.getpid()


def test_billiard_recycled_workers_exit_with_its_own_code(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    """Celery's prefork pool (billiard): a worker recycled by maxtasksperchild exits 155."""
    billiard = pytest.importorskip("billiard")
    supervise()
    pool = billiard.Pool(2, maxtasksperchild=1)
    recycled = ("error", None, 0x9B)  # billiard's EX_RECYCLE
    try:
        assert len(set(pool.map(_pid, range(EACH), chunksize=1))) == EACH
        counted(reader, {recycled: EACH})  # reaped by the pool's own maintenance
    finally:
        pool.terminate()
        pool.join()
    time.sleep(SETTLE)
    found = by_cause(reader)
    assert found[recycled] == EACH, found
    # terminate() ends the two workers it had then with SIGTERM: billiard's handler in the
    # worker exits with the signal's number (15), unless the worker was on its way out.
    stopped = {("error", None, 15), ("exit", None, 0), ("signal", "SIGTERM", None)}
    assert set(found) - {recycled} <= stopped, found


# --- zombies, and children that are not this process's ---------------------------


def _ends_in_a_grandchild(how: str) -> int:
    """In a kid: a child that ends ``how`` and is never waited for (a zombie)."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(7)
    while psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.01)
    return pid


@linux_only
@pytest.mark.parametrize(
    ("how", "key"), [("exit", ("error", None, 7)), ("kill", ("signal", "SIGKILL", None))]
)
def test_a_zombie_that_another_process_owns_is_counted_by_its_own_status(
    how: str,
    key: tuple[Any, ...],
    supervise: Callable[..., ProcessMetrics],
    reader: InMemoryMetricReader,
) -> None:
    from .support.groupkids import Kid

    supervise()
    kid = Kid(lambda: _ends_in_a_grandchild(how))
    try:
        assert kid.result  # a zombie of the kid: its stat file shows its status
        assert by_cause(reader) == {key: 1}  # at once: no status of it comes to this process
        assert by_cause(reader) == {key: 1}
    finally:
        kid.kill()


def test_a_child_reaped_after_its_zombie_was_counted_is_not_counted_again(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    supervise()
    pid = os.fork()
    if pid == 0:
        os._exit(5)
    assert eventually(lambda: psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    by_cause(reader)  # noted as a zombie of this process: its status may still come
    # Not reaped within a collection: counted by the status its stat file shows.
    key = ("error", None, 5) if ON_LINUX else ("unknown", None, None)
    assert counted(reader, {key: 1}) == {key: 1}
    os.waitpid(pid, 0)
    time.sleep(SETTLE)
    for _ in range(3):
        assert by_cause(reader) == {key: 1}


def test_a_child_born_and_reaped_between_two_collections_is_counted(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    supervise()
    by_cause(reader)
    for code in (0, 4):
        pid = os.fork()
        if pid == 0:
            os._exit(code)
        os.waitpid(pid, 0)
    counted(reader, {("exit", None, 0): 1, ("error", None, 4): 1})


@pytest.mark.skipif(not hasattr(signal, "SIGRTMIN"), reason="real-time signals are POSIX.1b")
def test_a_child_ended_by_a_real_time_signal_names_it_from_sigrtmin(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    supervise()
    by_cause(reader)
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    os.kill(pid, signal.SIGRTMIN + 3)  # no handler: the default action ends the child
    os.waitpid(pid, 0)
    counted(reader, {("signal", "SIGRTMIN+3", None): 1})


# --- the wrapper: transparent to the program ---------------------------------------


def _exited(code: int) -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(code)
    assert eventually(lambda: psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    return pid


def _calls() -> dict[str, Callable[[int], Any]]:
    """One call of each wait function that reaps ``pid``."""
    calls: dict[str, Callable[[int], Any]] = {
        "waitpid": lambda pid: os.waitpid(pid, 0),
        "wait": lambda _pid: os.wait(),
    }
    if hasattr(os, "wait3"):
        calls["wait3"] = lambda _pid: os.wait3(0)
    if hasattr(os, "wait4"):
        calls["wait4"] = lambda pid: os.wait4(pid, 0)
    if hasattr(os, "waitid"):
        calls["waitid"] = lambda pid: os.waitid(os.P_PID, pid, os.WEXITED)
    return calls


def _no_other_children() -> None:
    # os.wait() and wait3() reap any child: none of an earlier test may be left.
    for child in psutil.Process().children():
        if child.status() == psutil.STATUS_ZOMBIE:
            os.waitpid(child.pid, 0)


@pytest.mark.parametrize("name", list(_calls()))
def test_each_wait_call_returns_what_it_returned_and_notes_the_reap(
    name: str, supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    call = _calls()[name]
    _no_other_children()
    without = call(_exited(9))
    pm = supervise()
    assert getattr(os, name).__wrapped__ is not None
    pid = _exited(9)
    got = call(pid)
    assert type(got) is type(without)
    if name == "waitid":
        assert (got.si_pid, got.si_status, got.si_code) == (pid, 9, os.CLD_EXITED)
    else:
        assert got[0] == pid and got[1] == 9 << 8
        assert got[2:3] == () or type(got[2]) is type(without[2])
    counted(reader, {("error", None, 9): 1})
    pm.close()
    assert getattr(os, name) is _calls_original(name)


def _calls_original(name: str) -> Any:
    import posix

    return getattr(posix, name)


def test_an_error_of_the_call_is_raised_as_it_was() -> None:
    token = reaps.subscribe()
    try:
        with pytest.raises(ChildProcessError) as wrapped:
            os.waitpid(2**22 + 1, os.WNOHANG)  # not a child of ours
        assert wrapped.value.errno == 10  # ECHILD
        with pytest.raises(TypeError):
            os.waitpid(-1)  # the original's own argument check
        assert os.waitpid.__name__ == "waitpid"
    finally:
        reaps.unsubscribe(token)


class _Alarm(Exception):
    """What a program's SIGALRM handler raises (a timeout, say)."""


def test_an_exception_of_a_signal_handler_during_the_wait_reaches_the_program() -> None:
    token = reaps.subscribe()
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)

    def alarm(_signum: int, _frame: Any) -> None:
        raise _Alarm

    previous = signal.signal(signal.SIGALRM, alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(_Alarm):
            os.waitpid(pid, 0)  # blocked: the handler runs and raises through the wrapper
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        reaps.unsubscribe(token)


def test_stopped_children_and_waitid_peeks_are_not_ends(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    supervise()
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    os.kill(pid, signal.SIGSTOP)
    _, status = os.waitpid(pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status)
    os.kill(pid, signal.SIGCONT)
    if hasattr(os, "WCONTINUED"):
        _, status = os.waitpid(pid, os.WCONTINUED)
        assert os.WIFCONTINUED(status)
    os.kill(pid, signal.SIGKILL)
    if hasattr(os, "waitid"):
        assert eventually(lambda: psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
        peek = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        assert peek.si_code == os.CLD_KILLED
    os.waitpid(pid, 0)
    time.sleep(SETTLE)
    assert counted(reader, {("signal", "SIGKILL", None): 1}) == {("signal", "SIGKILL", None): 1}
    for _ in range(2):
        assert by_cause(reader) == {("signal", "SIGKILL", None): 1}


@pytest.mark.parametrize("wraps", [True, False], ids=["functools.wraps", "bare"])
def test_a_wrapper_put_over_ours_keeps_both_working_and_counts_once(
    wraps: bool, supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    first = supervise()
    ours = os.waitpid
    assert ours is not _calls_original("waitpid")
    calls = []

    def theirs(*args: Any) -> Any:  # a library that wraps it after us
        calls.append(args)
        return ours(*args)

    if wraps:
        theirs = functools.wraps(ours)(theirs)
    os.waitpid = theirs
    try:
        first.close()
        assert os.waitpid is theirs  # ours stays under theirs, a pass-through
        os.waitpid(_exited(0), 0)  # noted by no one
        supervise()
        if wraps:  # ours is found under theirs and taken back, not wrapped a second time
            assert os.waitpid is theirs
        os.waitpid(_exited(0), 0)
        assert len(calls) == 2
        counted(reader, {("exit", None, 0): 1})  # the second one only, once
    finally:
        os.waitpid = ours


def test_the_wrappers_are_installed_only_in_supervisor_mode(sdk: Any) -> None:
    builtins = {name: getattr(os, name) for name in WAITS if hasattr(os, name)}
    sdk.instrument()
    sdk.collect()
    assert {name: getattr(os, name) for name in builtins} == builtins
    assert not reaps.active


@linux_only
@pytest.mark.parametrize("fork", ["os.fork", "c_fork"])
def test_a_fork_does_not_count_what_its_parent_reaped(
    fork: str, supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    supervise()
    os.waitpid(_exited(0), 0)  # noted in the parent, not drained yet

    def in_the_fork() -> dict[str, Any]:
        # Its own reap, noted behind the parent's that it inherited, is counted.
        os.waitpid(_exited(3), 0)
        time.sleep(SETTLE)
        return {"first": by_cause_json(reader), "second": by_cause_json(reader)}

    got = in_child(in_the_fork, fork=os.fork if fork == "os.fork" else c_fork)
    own = {repr(("error", None, 3)): 1}
    assert got == {"first": own, "second": own}
    counted(reader, {("exit", None, 0): 2})  # the child reaped before the fork, and the fork


def by_cause_json(reader: InMemoryMetricReader) -> dict[str, int]:
    return {repr(k): v for k, v in by_cause(reader).items()}


# --- what the docs say --------------------------------------------------------------


def test_the_causes_with_one_set_of_attributes_are_reported_at_zero_from_the_start(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    supervise()
    found = points(collect(reader)[EXITS])
    assert found == {
        frozenset({(CAUSE, "exit"), (CODE, 0)}): 0,
        frozenset({(CAUSE, "oom_kill"), (SIGNAL, "SIGKILL")}): 0,
        frozenset({(CAUSE, "unknown")}): 0,
    }


def test_the_figures_of_the_supervisor_page_are_the_code_constants() -> None:
    from pathlib import Path

    from opentelemetry.instrumentation.process.probes.reaps import MAX_KEPT
    from opentelemetry.instrumentation.process.sources.child_exits import FIRST_MINUTE

    page = " ".join((Path(__file__).parent.parent / "docs" / "supervisor.md").read_text().split())
    assert SETTLE == 5.0 and "at least five seconds after the master reaped" in page
    assert FIRST_MINUTE == 60.0 and "during the child's first minute" in page
    assert CARRY == 3 and CARRY_TIME == 15.0
    assert "with those of the two collections before (and the last fifteen seconds)" in page
    assert "within three collections" in page
    assert f"({MAX_KEPT:,} notes between two collections)" in page
    assert "(field 52, Linux 3.5+)" in page


@linux_only
def test_multiprocessing_forkserver_children_are_reaped_by_the_fork_server(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    """The fork server, not this process, reaps them: their ends count, as unknown."""
    context = multiprocessing.get_context("forkserver")
    supervise()
    workers = [context.Process(target=_worker_forkserver) for _ in range(3)]
    try:
        for p in workers:
            p.start()
        assert eventually(lambda: len(_grandchildren()) >= 3, timeout=60)
        by_cause(reader)  # each seen alive, a child of the fork server
        for p in workers:
            p.kill()
            p.join(60)
        # Their codes came over the fork server's socket, not from a wait of this process.
        assert [p.exitcode for p in workers] == [-9] * 3
        counted(reader, {("unknown", None, None): 3})
    finally:
        # Neither the fork server nor the resource tracker it started is left to the
        # trees of the next tests.
        multiprocessing.forkserver._forkserver._stop()
        multiprocessing.resource_tracker._resource_tracker._stop()


def _worker_forkserver() -> None:
    time.sleep(600)


def _grandchildren() -> list[psutil.Process]:
    return [p for c in psutil.Process().children() for p in c.children()]


NS_LAST_PID = "/proc/sys/kernel/ns_last_pid"


MISSED = 3
"""The exit code of a child that another process's fork beat to the pid: counted apart."""


def _fork_at(pid: int, code: int) -> tuple[int, int]:
    """A child that exits with ``code``, at pid ``pid`` (the kernel's next pid set to it),
    and how many children missed the pid first (each exits with :data:`MISSED`)."""
    for missed in range(50):
        with open(NS_LAST_PID, "w") as f:
            f.write(str(pid - 1))
        child = os.fork()
        if child == 0:
            os._exit(code if os.getpid() == pid else MISSED)
        if child == pid:
            return child, missed
        os.waitpid(child, 0)
    pytest.skip("another process took the freed pid each time")


@pytest.mark.skipif(
    not (ON_LINUX and os.access(NS_LAST_PID, os.W_OK)),
    reason="reusing a pid on purpose needs root (ns_last_pid)",
)
def test_a_pid_given_again_between_two_collections_is_another_end(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    """A busy host with a small pid_max gives a pid again within seconds."""
    supervise()
    first = _exited(1)
    os.waitpid(first, 0)
    counted(reader, {("error", None, 1): 1})
    again, missed = _fork_at(first, 2)
    os.waitpid(again, 0)  # the same pid, reaped before the next collection
    misses = {("error", None, MISSED): missed} if missed else {}
    counted(reader, {("error", None, 1): 1, ("error", None, 2): 1, **misses})


@pytest.mark.skipif(
    not (ON_LINUX and os.access(NS_LAST_PID, os.W_OK)),
    reason="reusing a pid on purpose needs root (ns_last_pid)",
)
def test_a_pid_given_again_and_reaped_twice_within_one_collection_is_two_ends(
    supervise: Callable[..., ProcessMetrics], reader: InMemoryMetricReader
) -> None:
    """Both reaps come before the collection that counts them: neither end is lost."""
    supervise()
    collect(reader)
    first = _exited(1)
    os.waitpid(first, 0)
    again, missed = _fork_at(first, 2)
    os.waitpid(again, 0)
    misses = {("error", None, MISSED): missed} if missed else {}
    counted(reader, {("error", None, 1): 1, ("error", None, 2): 1, **misses})


def test_each_subscriber_gets_every_note_and_keeps_at_most_the_latest() -> None:
    from opentelemetry.instrumentation.process.probes.reaps import MAX_KEPT

    first, second = reaps.subscribe(), reaps.subscribe()
    try:
        pid = _exited(0)
        os.waitpid(pid, 0)
        assert [(n.pid, n.status) for n in reaps.drain(first)] == [(pid, 0)]
        for n in range(MAX_KEPT + 10):  # marks stand in for reaps: the same queue
            reaps.mark_timeout(n + 1)
        assert len(reaps.drain(first)) == MAX_KEPT  # the queue itself keeps that many
        kept = reaps.drain(second)  # never drained before: the latest only
        assert len(kept) == MAX_KEPT and kept[-1].pid == MAX_KEPT + 10
    finally:
        reaps.unsubscribe(first)
        reaps.unsubscribe(second)
    assert os.waitpid is _calls_original("waitpid")


def test_oom_kills_counted_together_are_matched_one_end_at_a_time(tmp_path: Any) -> None:
    """Two kills in one count: each of two ends takes one, in turn, and a third gets none."""
    from opentelemetry.instrumentation.process.linux.files import Key as FileKey
    from opentelemetry.instrumentation.process.linux.files import flat_keyed_file
    from opentelemetry.instrumentation.process.sources.child_exits import OomKills

    events = tmp_path / "memory.events"
    events.write_text("oom 0\noom_kill 0\n", encoding="ascii")
    file = flat_keyed_file(str(events), (), (FileKey("oom_kill", "oom_kill"),))
    assert file is not None
    kills = OomKills(file)
    kills.read(now=1.0)  # the baseline: no credit
    assert kills.take(1) == 0
    events.write_text("oom 2\noom_kill 2\n", encoding="ascii")
    kills.read(now=2.0)
    assert [kills.take(1), kills.take(1), kills.take(1)] == [1, 1, 0]


@pytest.mark.parametrize(
    ("collections", "seconds", "kept"),
    [
        (CARRY - 1, CARRY_TIME * 10, 1),  # few collections: kept however long ago
        (CARRY * 10, CARRY_TIME / 2, 1),  # recent: kept however many collections
        (CARRY, CARRY_TIME, 0),  # as many collections and as long as carried: gone
    ],
)
def test_an_oom_kill_is_carried_for_its_collections_or_its_seconds(
    tmp_path: Any, collections: int, seconds: float, kept: int
) -> None:
    """A kill waits for its victim's end for :data:`CARRY` collections or :data:`CARRY_TIME`
    seconds, whichever is longer (a status settles later than the count)."""
    from opentelemetry.instrumentation.process.linux.files import Key as FileKey
    from opentelemetry.instrumentation.process.linux.files import flat_keyed_file
    from opentelemetry.instrumentation.process.sources.child_exits import OomKills

    events = tmp_path / "memory.events"
    events.write_text("oom_kill 0\n", encoding="ascii")
    file = flat_keyed_file(str(events), (), (FileKey("oom_kill", "oom_kill"),))
    assert file is not None
    kills = OomKills(file)
    kills.read(now=100.0)
    events.write_text("oom_kill 1\n", encoding="ascii")
    kills.read(now=100.0)  # counted at 100 s
    for _ in range(collections):
        kills.age(now=100.0 + seconds)
    assert kills.take(1) == kept
