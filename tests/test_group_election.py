"""The election across real processes: one leader, takeover after SIGKILL, no inheritance."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from subprocess import PIPE
from typing import Any

import psutil
import pytest

from opentelemetry.instrumentation.process.faultlog import FaultLog
from opentelemetry.instrumentation.process.group import election
from opentelemetry.instrumentation.process.group import rundir as rundir_module
from opentelemetry.instrumentation.process.group.election import Election
from opentelemetry.instrumentation.process.group.keys import ended, group_of, start_time
from opentelemetry.instrumentation.process.options import ProcessMetricsOptions
from opentelemetry.instrumentation.process.snapshot import SnapshotCache

from .conftest import log_lines
from .support.forkapps import c_fork
from .support.forked import c_fork_beside_threads, held_by_another_thread, in_child
from .support.groupkids import Kid
from .support.waiting import eventually

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

NOBODY = 65534
SERVICE = "service.name=election-test"


_mine: list[Election] = []


def voter(kids: list[Kid], *, raw: bool = False, before: Any = None) -> Kid:
    """A child with an election of its own; ask it "leader"."""

    def job() -> bool:
        if before is not None:
            before()
        _mine.append(Election(group_of(SERVICE)))
        return _mine[0].leader()

    kid = Kid(job, raw=raw, serve=lambda _word: _mine[0].leader())
    kids.append(kid)
    _ = kid.result
    return kid


def test_one_process_of_the_group_leads(rundir: Path, kids: list[Kid]) -> None:
    voters = [voter(kids) for _ in range(4)]
    assert [k.result for k in voters] == [True, False, False, False]
    for _ in range(3):
        assert [k.ask("leader") for k in voters] == [True, False, False, False]


def test_after_sigkill_of_the_leader_another_takes_over_at_its_next_call(
    rundir: Path, kids: list[Kid]
) -> None:
    a, b, c = voter(kids), voter(kids), voter(kids)
    a.kill()
    assert c.ask("leader") is True  # the first to try after the death
    assert b.ask("leader") is False
    c.kill()
    assert b.ask("leader") is True


def test_a_leader_killed_but_not_yet_reaped_is_taken_over_at_the_next_call(
    rundir: Path, kids: list[Kid]
) -> None:
    """A zombie never runs again: the role does not wait for its parent to reap it (uWSGI's
    master does so up to a second later; the e2e takeover counted one collection more)."""
    a, b = voter(kids), voter(kids)
    a.kill(reap=False)
    assert _holder_pid() is None  # its record stays, and names a zombie
    assert b.ask("leader") is True and _holder_pid() == b.pid
    a.kill()


def test_a_process_has_ended_once_gone_a_zombie_or_its_pid_taken() -> None:
    """``keys.ended``: a live process has not; its zombie, another start time, no pid have."""
    kid = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=PIPE)
    try:
        started = start_time(kid.pid)
        assert ended(kid.pid, started) is False
        assert ended(kid.pid, started + "0") is True  # the pid, another process's now
    finally:
        kid.communicate(b"")  # it exits, and is reaped
    assert ended(kid.pid, started) is True  # gone
    zombie = subprocess.Popen(["true"])
    started = start_time(zombie.pid)
    # Ended, not reaped: Popen waits for nobody.
    assert eventually(lambda: psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE)
    assert ended(zombie.pid, started) is True
    zombie.wait()


def test_a_forked_child_never_believes_it_leads(rundir: Path, kids: list[Kid]) -> None:
    def leader_then_children() -> dict[str, Any]:
        mine = Election(group_of(SERVICE))
        out: dict[str, Any] = {"parent": mine.leader()}
        for name, fork in (("hooked", os.fork), ("unhooked", c_fork)):
            child = Kid(mine.leader, raw=fork is c_fork)
            out[name] = child.result
            child.stop()
        out["parent_after"] = mine.leader()
        return out

    kid = Kid(leader_then_children)
    kids.append(kid)
    assert kid.result == {
        "parent": True,
        "hooked": False,
        "unhooked": False,
        "parent_after": True,
    }


def test_a_child_without_hooks_frees_the_inherited_lock_for_a_takeover(
    rundir: Path, kids: list[Kid]
) -> None:
    # The leader's grandchild, forked from C, inherits its descriptor; once it has
    # asked (and closed its copy), the leader's death frees the role.
    def leader_with_grandchild() -> int:
        mine = Election(group_of(SERVICE))
        assert mine.leader()
        grandchild = Kid(lambda: Election(group_of(SERVICE)).leader(), raw=True, linger=30)
        assert grandchild.result is False
        return grandchild.pid

    leader = Kid(leader_with_grandchild)
    kids.append(leader)
    grandchild = leader.result
    other = voter(kids)
    try:
        assert other.result is False
        leader.kill()
        assert other.ask("leader") is True
    finally:
        os.kill(grandchild, 9)


@c_fork_beside_threads
def test_a_child_forked_from_c_while_a_thread_of_the_parent_is_in_the_election_takes_part(
    rundir: Path,
) -> None:
    # A thread of the parent in the middle of an election at the fork.
    with held_by_another_thread(election._mutex.get()):
        got = in_child(lambda: {"leader": Election(group_of(SERVICE)).leader()}, fork=c_fork)
    assert got == {"leader": True}


def test_another_user_can_neither_take_nor_suppress_the_role(rundir: Path, kids: list[Kid]) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    leader, follower = voter(kids), voter(kids)
    lock = rundir / "groups" / f"{group_of(SERVICE).key}.lock"
    assert lock.exists()

    def as_nobody() -> None:
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    def attempt() -> dict[str, Any]:
        as_nobody()
        # The warning comes once per period per process: an earlier test of this process
        # (forked from it) may have used the period.
        rundir_module.faults = FaultLog(logger=rundir_module.faults.logger)
        out: dict[str, Any] = {}
        try:
            os.open(lock, os.O_RDWR)
            out["open"] = "opened"
        except PermissionError:
            out["open"] = "refused"
        # Pointed at root's directory, it refuses it (not its own) and reports for itself.
        with log_lines() as said:
            out["leader"] = Election(group_of(SERVICE)).leader()
        out["warned"] = any("cannot be used safely" in line for line in said.lines)
        return out

    intruder = Kid(attempt)
    kids.append(intruder)
    assert intruder.result == {"open": "refused", "leader": True, "warned": True}
    # With a directory of its own, it is a group of its own: root's group is untouched.
    os.environ.pop("OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR")
    try:
        own = voter(kids, before=as_nobody)
    finally:
        os.environ["OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"] = str(rundir)
    assert own.result is True
    assert (leader.ask("leader"), follower.ask("leader")) == (True, False)
    leader.kill()
    assert follower.ask("leader") is True  # not suppressed by the other user's processes


def test_elections_of_one_process_agree_and_the_last_close_frees_the_role(
    rundir: Path, kids: list[Kid]
) -> None:
    def two() -> list[bool]:
        first, second = Election(group_of(SERVICE)), Election(group_of(SERVICE))
        out = [first.leader(), second.leader()]
        first.close()
        out.append(second.leader())
        second.close()
        return out

    before = dict(election._states)  # what earlier tests of this process left
    kid = Kid(two)
    kids.append(kid)
    assert kid.result == [True, True, True]
    assert voter(kids).result is True  # freed by the last close
    assert election._states == before  # nothing of the kid's in this process


SHARED = {"system_cpu", "system_memory"}


def snapshots(word: str) -> dict[str, Any]:
    """In a kid: refresh the cache; which shared readings it has, and what it opened."""
    cache = _caches[0]
    opened: list[str] = []
    recording[0] = opened
    snap = cache.snapshot(_seen[0])
    recording[0] = None
    _seen[0] = snap.generation
    cpu = snap.readings.get("system_cpu")
    return {
        "shared": sorted(SHARED & set(snap.readings)),
        "utilization": bool(cpu and cpu["utilization"]),
        # Host files only: not this process's own /proc/<pid> or /proc/self ones.
        "opened": sorted(
            {p for p in opened if p.startswith("/proc/") and not p.split("/")[2].isdigit()}
            - {p for p in opened if p.startswith("/proc/self/")}
        ),
        "own": "process_memory" in snap.readings,
    }


_caches: list[SnapshotCache] = []
_seen = [0]
recording: list[list[str] | None] = [None]


def _audit(event: str, args: tuple[Any, ...]) -> None:
    sink = recording[0]
    if sink is not None and event == "open" and isinstance(args[0], str):
        sink.append(args[0])


def reporter(kids: list[Kid], mode: str = "once") -> Kid:
    def job() -> dict[str, Any]:

        sys.addaudithook(_audit)
        options = ProcessMetricsOptions(shared_metrics=mode)
        _caches.append(SnapshotCache(options, {"system_cpu", "system_memory", "process_memory"}))
        return snapshots("")

    kid = Kid(job, serve=snapshots)
    kids.append(kid)
    _ = kid.result
    return kid


def test_a_non_leader_reads_no_shared_source_and_a_new_leader_reports_no_wrong_utilization(
    rundir: Path, kids: list[Kid]
) -> None:
    a, b = reporter(kids), reporter(kids)
    # The first leader read a baseline when it started: a real utilisation at once.
    assert a.result["shared"] == sorted(SHARED) and a.result["utilization"]
    assert {"/proc/stat", "/proc/meminfo"} <= set(a.result["opened"])
    assert b.result["shared"] == [] and b.result["opened"] == []
    assert b.result["own"]
    again = b.ask("refresh")
    assert again["shared"] == [] and again["opened"] == []  # no /proc/stat, no /proc/meminfo
    a.kill()
    first = b.ask("refresh")
    # It never read the host CPU before: times now, the utilisation from the next one.
    assert first["shared"] == sorted(SHARED)
    assert not first["utilization"]

    time.sleep(0.15)  # past the shortest utilisation window
    assert b.ask("refresh")["utilization"]


def test_every_reports_in_each_process(rundir: Path, kids: list[Kid]) -> None:
    a, b = reporter(kids, "every"), reporter(kids, "every")
    assert a.result["shared"] == b.result["shared"] == sorted(SHARED)
    assert not (rundir / "groups").exists()  # no election, no file


def _holder_pid() -> int | None:
    """The pid of the group's reporter, as a process that does not report reads it."""
    mine = Election(group_of(SERVICE))
    try:
        found = mine.holder()
        return None if found is None else found.pid
    finally:
        mine.close()


def test_the_leader_writes_who_it_is_until_it_closes_or_dies(rundir: Path, kids: list[Kid]) -> None:
    """A process that does not report finds which one does; a gone one is never named."""
    assert _holder_pid() is None  # nobody has led yet
    a, b = voter(kids), voter(kids)
    assert (a.result, b.result) == (True, False)
    assert _holder_pid() == a.pid
    [found] = [h for h in election.reporters() if h.pid == a.pid]
    assert found.group == SERVICE and found.user == os.geteuid()
    a.kill()
    assert _holder_pid() is None  # its record stays, but it is gone
    assert b.ask("leader") is True and _holder_pid() == b.pid

    def lead_then_close() -> int | None:
        mine = Election(group_of(SERVICE))
        assert mine.leader()
        mine.close()
        return _holder_pid()

    b.kill()
    closing = Kid(lead_then_close)
    kids.append(closing)
    assert closing.result is None  # it closed: it reports no more


def test_free_group_files_are_pruned_and_a_held_one_is_kept(rundir: Path, kids: list[Kid]) -> None:
    held = voter(kids)
    assert held.result is True
    folder = rundir / "groups"
    for n in range(election.KEPT_FILES + 10):
        (folder / f"old{n:03}.lock").touch(mode=0o600)
    before = set(os.listdir(folder))
    mine = Election(group_of("service.name=another"))
    try:
        after = set(os.listdir(folder))
        removed = before - after
        assert 0 < len(removed) <= election.MAX_PRUNED
        assert all(name.startswith("old") for name in removed)
        assert f"{group_of(SERVICE).key}.lock" in after  # held: kept
        assert held.ask("leader") is True
    finally:
        mine.close()


def test_a_file_pruned_before_its_lock_is_taken_elects_from_the_new_one(
    rundir: Path, kids: list[Kid]
) -> None:
    """A file removed (as prune() removes one naming no live process) elects no one: the new
    file at the path does, once; a process named only in the removed one steps down."""
    mine = Election(group_of(SERVICE))
    try:
        path = rundir / "groups" / f"{group_of(SERVICE).key}.lock"
        assert mine.leader() is True
        path.unlink()  # mine is named only in the file removed
        other = voter(kids)  # opens, and locks, a new file at the path
        assert other.result is True
        assert mine.leader() is False  # its file's lock is free, but that file is gone
        other.kill()
        assert mine.leader() is True
        assert voter(kids).result is False  # its lock is on the file at the path
    finally:
        mine.close()


def test_a_descriptor_the_program_closed_during_a_turn_loses_that_turn_only(
    rundir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPython's test_interpreters closes descriptors by number: our lock's, in a turn."""
    mine = Election(group_of(SERVICE))
    try:
        assert mine.leader()  # alone: it leads
        real = election.fcntl.flock

        def closed_by_the_program(fd: int, how: int) -> None:
            os.close(fd)  # as closerange() would, between our open and our lock
            real(fd, how)  # EBADF

        with log_lines() as logs:
            monkeypatch.setattr(election.fcntl, "flock", closed_by_the_program)
            assert mine.leader()  # the turn is lost: the last answer stands
            monkeypatch.setattr(election.fcntl, "flock", real)
            assert mine.leader()
        assert not [line for line in logs.lines if not line.startswith("DEBUG ")], logs.lines
        assert mine.holder() is not None and mine.holder().pid == os.getpid()  # type: ignore[union-attr]
    finally:
        mine.close()


@pytest.mark.parametrize("at", [1, 2], ids=["before-the-check", "before-the-lock-is-named"])
def test_a_descriptor_the_program_replaced_during_a_turn_is_left_to_it(
    rundir: Path, monkeypatch: pytest.MonkeyPatch, at: int
) -> None:
    """CPython's test_subprocess moves its own files onto numbers with dup2: one may land
    on our lock file's, in a turn (before the file's check, or before the check that the
    path still names it). That file is the program's now: left open, and nothing said."""
    mine = Election(group_of(SERVICE))
    r, w = os.pipe()
    replaced: list[int] = []
    calls: list[int] = []
    real = os.fstat

    def dup2_first(fd: int) -> os.stat_result:
        calls.append(fd)
        if len(calls) == at:
            os.dup2(r, fd)  # the program's pipe, under our number
            replaced.append(fd)
        return real(fd)

    try:
        assert mine.leader()
        with log_lines() as logs:
            monkeypatch.setattr(rundir_module.os, "fstat", dup2_first)
            assert mine.leader()  # that turn is lost: the last answer stands
            monkeypatch.setattr(rundir_module.os, "fstat", real)
            assert mine.leader()
        assert replaced and stat.S_ISFIFO(real(replaced[0]).st_mode)  # not closed by us
        assert not [line for line in logs.lines if not line.startswith("DEBUG ")], logs.lines
    finally:
        mine.close()
        for fd in {r, w, *replaced}:
            os.close(fd)


def test_the_leaders_record_keeps_each_field_on_its_line_and_stays_bounded(
    rundir: Path, kids: list[Kid]
) -> None:
    """A service written with newlines, non-ASCII text, an undecodable byte of the environment
    (a surrogate) and past the record's size: each field read back on its own line (a newline
    becomes a space), and a record cut at its size still names the process (the service
    last)."""
    service = "service.name=line one\nline two, é \udcff" + "x" * 5000

    def lead() -> bool:
        _mine.append(Election(group_of(service)))
        return _mine[0].leader()

    kid = Kid(lead)
    kids.append(kid)
    assert kid.result is True
    [found] = [h for h in election.reporters() if h.pid == kid.pid]
    mine = group_of(service)
    assert (found.user, found.cgroup) == (os.geteuid(), mine.cgroup)
    assert found.group.startswith("service.name=line one line two, é ?" + "x" * 100)
    assert len(found.group.encode()) < 4096 < len(service)
