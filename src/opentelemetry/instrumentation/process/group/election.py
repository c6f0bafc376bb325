"""The election: one process of a group reports the shared metrics.

The leader is the process that holds an exclusive ``flock`` on
``<runtime dir>/groups/<group key>.lock`` (see ``keys.group_of``); the kernel
frees it when the leader dies, and another process takes it at its next try.
One descriptor per group and process (``O_CLOEXEC``), shared by every
:class:`Election` of that group in the process; a forked child never believes
it leads: at its first use of the election (a pid check, which a fork from C
passes too) it closes its copies of the parent's descriptors. Without a safe
runtime directory every process reports, after one warning. Details:
docs/design.md, "Worker slots and the election".

The leader writes who it is in the file (:class:`Holder`), so that a process
that does not report can say which one does, and the snapshot command can
list them (:func:`reporters`). A file whose lock is free may be removed
(:func:`prune`, when the folder holds more than :data:`KEPT_FILES`): a
process that took a lock checks that the path still names the file it
locked, and opens it again if not.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import NamedTuple

from ..locks import ProcessLock
from .heldfile import HeldFile
from .keys import Group, start_time
from .rundir import (
    NOFOLLOW,
    check_private,
    open_private,
    private_dir,
    runtime_dir,
    warn_unusable,
)

try:
    import fcntl
except ImportError:  # Windows: runtime_dir() is None there, so fcntl is never used
    fcntl = None  # type: ignore[assignment]


class _Lock:
    """This process's lock file of one group (``file`` is ``None`` when unusable: it reports)."""

    __slots__ = ("file", "leading", "path", "started", "users")

    def __init__(self, file: HeldFile | None, path: Path | None = None) -> None:
        self.file = file
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
        """True while this process holds the group's lock, or when no lock can be used.

        A non-leader tries to take the lock at each call (one non-blocking
        ``flock``); a leader keeps it until it exits or every election of the
        group in this process is closed.
        """
        if self._closed:
            return False
        with _mutex.get():
            state = _current(self.group)
            if state.file is None:
                return True  # no safe lock file: "every" (warned once)
            if state.leading:
                return True
            for _ in range(2):  # again, once, if the file was pruned before the lock
                try:
                    fcntl.flock(state.file.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False
                except OSError as exc:  # a file system that has no flock (some network ones)
                    warn_unusable(state.path or Path(os.curdir), exc)
                    state.file.drop()
                    state.file = None
                    return True
                if _still_named(state):
                    state.leading = True
                    _write_holder(state, self.group)
                    return True
                state.file.drop()  # a removed file: its lock elects no one
                fresh = _open(self.group)
                state.file, state.path = fresh.file, fresh.path
                if state.file is None:
                    return True  # warned: "every"
            return False

    def holder(self) -> Holder | None:
        """The live process that reports this group, as it wrote itself; ``None`` if unknown."""
        with _mutex.get():
            state = _current(self.group)
            if state.file is None:
                return None
            return _live(os.pread(state.file.fd, _RECORD_SIZE, 0))

    def close(self) -> None:
        """Stop taking part; the last election of the group to close frees its lock."""
        if self._closed:
            return
        self._closed = True
        with _mutex.get():
            _forget_other_process()
            state = _states.get(self.group.key)
            if state is None:
                return
            state.users -= 1
            if state.users <= 0:
                del _states[self.group.key]
                if state.file is not None:
                    if state.leading and state.file.ours():
                        with contextlib.suppress(OSError):  # it reports no more
                            os.ftruncate(state.file.fd, 0)
                    state.file.drop()


def _forget_other_process() -> None:
    """In a forked child, drop its copies of the parent's states; under ``_mutex``.

    A child joins its own group anew (the shared-sources gate's pid check):
    its cgroup, and so its group, may not be its parent's.
    """
    global _pid
    if _pid == os.getpid():
        return
    _pid = os.getpid()
    for state in _states.values():
        if state.file is not None:
            state.file.drop()  # a child's copy: the parent keeps its lock
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
    path = folder / f"{group.key}.lock"
    lock = _Lock(_open_file(path), path)
    lock.started = _started()
    return lock


def _open_file(path: Path) -> HeldFile | None:
    """The group's lock file at ``path``; ``None`` (every process reports) where unusable."""
    try:
        return HeldFile.of(open_private(path))
    except OSError as exc:
        warn_unusable(path, exc)
        return None


def _started() -> str:
    """This process's start time, for its record if it leads; "" (no record) if unknown."""
    try:
        return start_time(os.getpid())
    except Exception:  # noqa: BLE001 - without it, no record: who leads is untold
        return ""


def _still_named(state: _Lock) -> bool:
    """Whether the locked file is still the one its path names (not pruned meanwhile)."""
    if state.path is None or state.file is None:
        return True
    try:
        st = os.stat(state.path, follow_symlinks=False)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == state.file.ident


def _write_holder(state: _Lock, group: Group) -> None:
    """Who leads, in the file: pid, start time, user, cgroup and service, a line each."""
    if state.file is None or not state.started:
        return
    fields = (os.getpid(), state.started, group.user, group.cgroup, group.service)
    text = "".join(str(f).replace("\n", " ") + "\n" for f in fields)
    with contextlib.suppress(OSError):  # who leads is only told, never needed
        os.ftruncate(state.file.fd, 0)
        os.pwrite(state.file.fd, text.encode("utf-8", "replace")[:_RECORD_SIZE], 0)


def _live(data: bytes) -> Holder | None:
    """The holder that ``data`` records, if that process still runs; else ``None``."""
    try:
        pid, started, user, cgroup, service = data.decode("utf-8", "replace").split("\n")[:5]
        if start_time(int(pid)) != started:
            return None  # gone, and its pid perhaps reused
        return Holder(int(pid), service, int(user), cgroup)
    except Exception:  # noqa: BLE001 - no record, a partial one, or a process gone
        return None


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
    """Remove group files whose lock is free, when ``folder`` holds more than :data:`KEPT_FILES`.

    Each is removed while this process holds its lock, at most :data:`MAX_PRUNED`;
    a process that locks it afterwards finds the path gone and opens a new one
    (:func:`_still_named`). Returns how many were removed. Never raises.
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
        try:
            fd = os.open(path, os.O_RDWR | NOFOLLOW)
        except OSError:
            continue
        try:
            check_private(os.fstat(fd), path, want_dir=False)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            st = os.stat(path, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
                os.unlink(path)
                removed += 1
        except OSError:
            pass  # held: a live group, or not ours
        finally:
            os.close(fd)
    return removed
