"""The election: one process of a group reports the shared metrics.

The reporter is the live process named in ``<runtime dir>/groups/<group key>.lock``
(see ``keys.group_of``): its pid and start time, a line each, then its user,
cgroup and service (:class:`Holder`). At each refresh, a process opens the file,
takes an exclusive ``flock`` for the few instructions of its turn, reads who is
named, names itself if the one named is gone (or none is), and closes the file.
No descriptor outlives a turn: a program that lists or moves its own
descriptors sees none of ours between two refreshes (CPython's
``test_subprocess`` found the descriptor that a lock held for the life of the
process needed). A process that dies is found gone by its record (its pid no
longer runs, runs with another start time, or is a zombie its parent has not
reaped yet), and another takes over at its next turn. A forked child never
believes it leads: it is not the process named. Without a safe runtime
directory, or a file system without ``flock``, every process reports, after
one warning. Details: docs/design.md, "Worker slots and the election".

A file nobody is named in may be removed (:func:`prune`, when the folder holds
more than :data:`KEPT_FILES`); a process checks, once it holds the lock, that
the path still names the file it opened, and opens it again if not.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
from pathlib import Path
from typing import NamedTuple

from ..locks import ProcessLock
from .keys import Group, ended, start_time
from .rundir import (
    NOFOLLOW,
    check_private,
    open_private,
    private_dir,
    remove_if_free,
    runtime_dir,
    warn_unusable,
)

try:
    import fcntl
except ImportError:  # Windows: runtime_dir() is None there, so fcntl is never used
    fcntl = None  # type: ignore[assignment]


class _Lock:
    """This process's part in one group's election (``path`` ``None`` when unusable: it reports)."""

    __slots__ = ("leading", "path", "started", "users")

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.leading = False
        self.users = 0
        self.started = ""
        """This process's start time, read when the file is opened: its record, if it leads."""


KEPT_FILES = 64
"""Group files kept before the free ones are pruned: one per group that ever ran here."""
MAX_PRUNED = 32
"""Most files removed by one prune: a bounded cost."""
_RECORD_SIZE = 4096


class Holder(NamedTuple):
    """The process that reports a group's shared metrics, as it wrote itself in the file."""

    pid: int
    group: str
    """The group's service, as ``Group.service`` names it."""
    user: int
    cgroup: str


_states: dict[str, _Lock] = {}
"""This process's lock of each group it takes part in, by group key."""
_pid = os.getpid()
"""The process ``_states`` belong to: a forked child sees that they are its parent's."""
_mutex = ProcessLock()


class Election:
    """Whether this process reports ``group``'s shared metrics, asked once per refresh."""

    def __init__(self, group: Group) -> None:
        self.group = group
        with _mutex.get():
            _current(group).users += 1
        self._closed = False

    def leader(self) -> bool:
        """True while this process is the one named in the group's file, or when none can be.

        One turn at each call: the file opened, locked, read, perhaps written,
        and closed. While another process of the group takes its turn (the
        lock is busy), the answer is the last one.
        """
        if self._closed:
            return False
        with _mutex.get():
            state = _current(self.group)
            for _ in range(2):  # again, once, if the file was pruned before the lock
                if state.path is None:
                    return True  # no safe lock file: "every" (warned once)
                turn = _turn(state)
                if turn is None:
                    continue  # pruned meanwhile: a new file
                named, fd = turn
                try:
                    if named is None or _is_me(named):
                        if named is None:
                            _write_holder(fd, state, self.group)
                        state.leading = True
                    else:
                        state.leading = False
                finally:
                    os.close(fd)  # and with it the lock
                return state.leading
            return state.leading

    def holder(self) -> Holder | None:
        """The live process that reports this group, as it wrote itself; ``None`` if unknown."""
        with _mutex.get():
            state = _current(self.group)
            if state.path is None:
                return None
            try:
                fd = os.open(state.path, os.O_RDONLY | os.O_CLOEXEC | NOFOLLOW)
            except OSError:
                return None
            try:
                return _live(os.pread(fd, _RECORD_SIZE, 0))
            finally:
                os.close(fd)

    def close(self) -> None:
        """Stop taking part; at the last close of the group here, a reporter unnames itself."""
        if self._closed:
            return
        self._closed = True
        with _mutex.get():
            _forget_other_process()
            state = _states.get(self.group.key)
            if state is None:
                return
            state.users -= 1
            if state.users > 0:
                return
            del _states[self.group.key]
            if state.leading and state.path is not None:
                turn = _turn(state)
                if turn is not None:
                    named, fd = turn
                    with contextlib.suppress(OSError):  # it reports no more
                        if named is not None and _is_me(named):
                            os.ftruncate(fd, 0)
                    os.close(fd)


def _turn(state: _Lock) -> tuple[Holder | None, int] | None:
    """The group's file opened and locked, and the live process it names; the caller closes it.

    The lock is exclusive and waits: another process holds it only for its own
    turn, a few system calls. ``None`` if the file was pruned before the lock
    (the caller opens the new one), or is unusable: then the path is dropped
    (every process reports), after one warning.
    """
    assert state.path is not None
    try:
        fd = open_private(state.path)
    except OSError as exc:
        if exc.errno == errno.EBADF:
            return None  # the program closed or replaced it by its number: this turn is lost
        warn_unusable(state.path, exc)
        state.path = None
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not _still_named(state.path, fd):
            if _private_file(fd, state.path):
                os.close(fd)  # pruned before the lock: its record elects no one
            return None  # else the program's file under our number (dup2): left to it
        return _live(os.pread(fd, _RECORD_SIZE, 0)), fd
    except OSError as exc:
        if exc.errno == errno.EBADF:
            # The program closed our descriptor by its number (closerange(), dup2()):
            # nothing to close, and nothing wrong with the file. This turn is lost.
            return None
        os.close(fd)
        warn_unusable(state.path, exc)  # a file system that has no flock (some network ones)
        state.path = None
        return None


def _is_me(named: Holder) -> bool:
    # A live holder's start time was checked: a live process of this pid is this one.
    return named.pid == os.getpid()


def _forget_other_process() -> None:
    """In a forked child, drop the parent's states; under ``_mutex``.

    A child joins its own group anew (the shared-sources gate's pid check):
    its cgroup, and so its group, may not be its parent's. It holds no
    descriptor of the parent's: none outlives a turn.
    """
    global _pid
    if _pid == os.getpid():
        return
    _pid = os.getpid()
    _states.clear()


def _current(group: Group) -> _Lock:
    """This process's lock state of ``group``, opened on first use; under ``_mutex``."""
    _forget_other_process()
    state = _states.get(group.key)
    if state is None:
        state = _states[group.key] = _open(group)
    return state


def _open(group: Group) -> _Lock:
    base = runtime_dir()
    if base is None:
        return _Lock(None)
    folder = base / "groups"
    try:
        private_dir(folder)
    except OSError as exc:
        warn_unusable(folder, exc)
        return _Lock(None)
    prune(folder, keep=f"{group.key}.lock")
    lock = _Lock(folder / f"{group.key}.lock")
    lock.started = _started()
    if not lock.started:
        return _Lock(None)  # no start time, no record that another could check: "every"
    return lock


def _started() -> str:
    """This process's start time, for its record; "" if it cannot be read."""
    try:
        return start_time(os.getpid())
    except Exception:  # noqa: BLE001 - without it, no record: every process reports
        return ""


def _still_named(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open at ``fd`` (not pruned meanwhile)."""
    try:
        named = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _private_file(fd: int, path: Path) -> bool:
    """Whether ``fd`` is a private regular file, as the lock files are (not a program's)."""
    try:
        check_private(os.fstat(fd), path, want_dir=False)
    except OSError:
        return False
    return True


def _write_holder(fd: int, state: _Lock, group: Group) -> None:
    """Who leads, in the file: pid, start time, user, cgroup and service, a line each."""
    fields = (os.getpid(), state.started, group.user, group.cgroup, group.service)
    text = "".join(str(f).replace("\n", " ") + "\n" for f in fields)
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode("utf-8", "replace")[:_RECORD_SIZE], 0)


def _live(data: bytes) -> Holder | None:
    """The holder that ``data`` records, if that process still runs; else ``None``."""
    try:
        pid, started, user, cgroup, service = data.decode("utf-8", "replace").split("\n")[:5]
        if not _our_record(int(pid), started) and ended(int(pid), started):
            return None  # gone, a zombie, or its pid reused
        return Holder(int(pid), service, int(user), cgroup)
    except Exception:  # noqa: BLE001 - no record, a partial one, or a process gone
        return None


def _our_record(pid: int, started: str) -> bool:
    """Whether a record names this very process: a leader's turn reads no ``/proc`` file."""
    if pid != os.getpid():
        return False
    return any(state.started == started for state in _states.values() if state.started)


def reporters() -> list[Holder]:
    """The live processes that report a group's shared metrics, as their files say; by pid.

    Reads at most twice :data:`KEPT_FILES` files of this user's runtime
    directory, without locking them (a lock taken to look would stop a takeover).
    """
    base = runtime_dir()
    if base is None:
        return []
    folder = base / "groups"
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".lock"))
    except OSError:
        return []
    found = []
    for name in names[: 2 * KEPT_FILES]:
        path = folder / name
        try:
            fd = os.open(path, os.O_RDONLY | NOFOLLOW)
        except OSError:
            continue
        try:
            check_private(os.fstat(fd), path, want_dir=False)
            holder = _live(os.pread(fd, _RECORD_SIZE, 0))
        except OSError:
            holder = None
        finally:
            os.close(fd)
        if holder is not None:
            found.append(holder)
    return sorted(found)


def prune(folder: Path, keep: str) -> int:
    """Remove group files that name no live process, when ``folder`` holds more than
    :data:`KEPT_FILES`.

    Each is removed while this process holds its lock (a turn of its own, not
    waited for), at most :data:`MAX_PRUNED`; a process that locks it
    afterwards finds the path gone and opens a new one (:func:`_still_named`).
    Returns how many were removed. Never raises.
    """
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".lock") and n != keep]
    except OSError:
        return 0
    if len(names) < KEPT_FILES:
        return 0
    removed = 0
    for name in names[: MAX_PRUNED * 4]:
        if removed >= MAX_PRUNED:
            break
        path = folder / name
        if remove_if_free(path, functools.partial(_prunable, path)):
            removed += 1
    return removed


def _prunable(path: Path, fd: int) -> bool:
    """Whether the group file open at ``fd`` names no live process and is still ``path``."""
    return _live(os.pread(fd, _RECORD_SIZE, 0)) is None and _still_named(path, fd)
