"""Worker slots across real forked children: lowest free, reused after SIGKILL, never shared."""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from opentelemetry.instrumentation.process.group import keys, slots
from opentelemetry.instrumentation.process.group.rundir import runtime_dir

from .support.forkapps import c_fork
from .support.forked import c_fork_beside_threads, held_by_another_thread, in_child
from .support.groupkids import Kid, claimed_slot
from .support.internals import release_slot

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


@pytest.fixture(autouse=True)
def _no_slot_here() -> Iterator[None]:
    release_slot()
    yield
    release_slot()


def worker(kids: list[Kid], **kw: object) -> Kid:
    kid = Kid(claimed_slot, **kw)  # type: ignore[arg-type]
    kids.append(kid)
    assert kid.result is not None  # claimed before the test goes on
    return kid


def test_workers_take_the_lowest_free_slots(kids: list[Kid]) -> None:
    assert [worker(kids).result for _ in range(3)] == [0, 1, 2]
    assert slots.recorded_slots(os.getpid()) == {k.pid: k.result for k in kids}


def test_a_slot_is_reused_after_sigkill_lowest_first(kids: list[Kid]) -> None:
    first = [worker(kids) for _ in range(4)]
    first[2].kill()
    first[0].kill()
    assert worker(kids).result == 0
    assert worker(kids).result == 2
    assert worker(kids).result == 4
    live = {k.pid: k.result for k in kids if k not in (first[0], first[2])}
    assert slots.recorded_slots(os.getpid()) == live


def test_concurrent_claims_never_share_a_slot(kids: list[Kid]) -> None:
    # Eight children forked at once race for the slots once a byte each arrives.
    start_r, start_w = os.pipe()

    def racer() -> int | None:
        os.read(start_r, 1)
        return claimed_slot()

    racers = [worker_job(kids, racer) for _ in range(8)]
    os.write(start_w, b"x" * 8)
    os.close(start_w)
    os.close(start_r)
    assert sorted(k.result for k in racers) == list(range(8))
    assert slots.recorded_slots(os.getpid()) == {k.pid: k.result for k in racers}


def worker_job(kids: list[Kid], job: object, **kw: object) -> Kid:
    kid = Kid(job, **kw)  # type: ignore[arg-type]
    kids.append(kid)
    return kid


def test_a_child_forked_without_hooks_does_not_keep_its_parents_slot(kids: list[Kid]) -> None:
    # A worker claims slot 0, then forks a grandchild from C (no at-fork hook).
    def worker_with_grandchild() -> dict[str, object]:
        mine = claimed_slot()
        grandchild = Kid(
            lambda: {"slot": claimed_slot(), "holder": slots.claim().held.pid},  # type: ignore[union-attr]
            raw=True,
            linger=30,
        )
        return {"slot": mine, "grandchild": grandchild.result, "grandchild_pid": grandchild.pid}

    first = worker_job(kids, worker_with_grandchild)
    found = first.result
    assert found["slot"] == 0
    # The grandchild took a slot of its own (under its own parent), as its own pid.
    assert found["grandchild"] == {"slot": 0, "holder": found["grandchild_pid"]}
    try:
        first.kill()
        # The grandchild lives on with a copy of the dead worker's descriptor, closed by
        # its claim: the slot is free again for the next worker.
        assert os.path.exists(f"/proc/{found['grandchild_pid']}")
        assert worker(kids).result == 0
    finally:
        os.kill(found["grandchild_pid"], 9)


@c_fork_beside_threads
def test_a_child_forked_from_c_while_a_thread_of_the_parent_claims_takes_a_slot() -> None:
    with held_by_another_thread(slots._lock.get()):  # a claim in flight in the parent
        got = in_child(lambda: {"slot": claimed_slot()}, fork=c_fork)
    assert got == {"slot": 0}


def test_the_slot_file_holds_the_pid_and_the_kernel_frees_it(kids: list[Kid]) -> None:
    kid = worker(kids)
    base = runtime_dir()
    assert base is not None
    path = base / "slots" / keys.parent_key(os.getpid()) / f"{kid.result}.lock"
    assert path.read_text() == f"{kid.pid}\n"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with open(path) as f, pytest.raises(BlockingIOError):
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    kid.kill()
    with open(path) as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once its holder is dead
    assert slots.recorded_slots(os.getpid()) == {}


def test_claim_is_idempotent_and_a_normal_fork_gets_its_own(kids: list[Kid]) -> None:
    mine = slots.claim()
    assert mine is not None and slots.claim() is mine
    child = worker_job(kids, lambda: slots.claim().held.pid)  # type: ignore[union-attr]
    assert child.result == child.pid
    assert slots.claim() is mine and mine.held.ours()


def test_a_stale_pid_in_a_free_slot_file_is_not_live(kids: list[Kid]) -> None:
    kid = worker(kids)
    kid.stop()
    # The file still names the exited worker, but its lock is free.
    assert slots.recorded_slots(os.getpid()) == {}


def _parent_with_worker() -> dict[str, int]:
    worker = Kid(claimed_slot, linger=30)
    assert worker.result == 0
    return {"worker": worker.pid}


def test_folders_of_dead_parents_are_removed_but_a_live_orphans_file_is_kept(
    kids: list[Kid],
) -> None:
    import signal

    base = runtime_dir()
    assert base is not None
    parent = Kid(_parent_with_worker)
    kids.append(parent)
    orphan = parent.result["worker"]
    folder = base / "slots" / keys.parent_key(parent.pid)
    assert (folder / "0.lock").is_file()
    other_boot = base / "slots" / "0f0f0f0f-aaaa-bbbb-cccc-000000000000-123-456"
    other_boot.mkdir(mode=0o700)
    os.close(os.open(other_boot / "0.lock", os.O_CREAT | os.O_WRONLY, 0o600))
    junk = base / "slots" / "junk"
    junk.mkdir(mode=0o700)
    parent.kill()
    try:
        worker(kids)  # a claim prunes
        assert not other_boot.exists()
        assert junk.exists()  # not a name of this module: left alone
        assert (folder / "0.lock").is_file()  # the orphan still holds it
    finally:
        os.kill(orphan, signal.SIGKILL)
    import time

    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{orphan}") and time.monotonic() < deadline:
        time.sleep(0.01)  # reaped by init
    kids[-1].kill()
    worker(kids)
    assert not folder.exists()


def test_a_prune_keeps_the_folder_of_a_live_parent_whose_slots_are_free(tmp_path: Path) -> None:
    folder = tmp_path / "slots"  # alone: a shared one may hold more than a prune removes
    folder.mkdir(mode=0o700)
    live, dead = (subprocess.Popen(["sleep", "60"]) for _ in range(2))
    made = {p: folder / keys.parent_key(p.pid) for p in (live, dead)}
    for path in made.values():
        path.mkdir(mode=0o700)
        os.close(os.open(path / "0.lock", os.O_CREAT | os.O_WRONLY, 0o600))  # free
    dead.kill()
    dead.wait()
    try:
        slots.prune(folder, keep="")
        assert (made[live] / "0.lock").is_file()  # same boot, same pid, same start: alive
        assert not made[dead].exists()
    finally:
        live.kill()
        live.wait()
        slots.prune(folder, keep="")
    assert not made[live].exists()
