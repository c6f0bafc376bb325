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
"""

from __future__ import annotations

import os
from pathlib import Path

from ..locks import ProcessLock
from .heldfile import HeldFile
from .keys import Group
from .rundir import open_private, private_dir, runtime_dir, warn_unusable

try:
    import fcntl
except ImportError:  # Windows: runtime_dir() is None there, so fcntl is never used
    fcntl = None  # type: ignore[assignment]


class _Lock:
    """This process's lock file of one group (``file`` is ``None`` when unusable: it reports)."""

    __slots__ = ("file", "leading", "path", "pid", "users")

    def __init__(self, pid: int, file: HeldFile | None, path: Path | None = None) -> None:
        self.pid = pid
        self.file = file
        self.path = path
        self.leading = False
        self.users = 0


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
            try:
                fcntl.flock(state.file.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            except OSError as exc:  # a file system that has no flock (some network ones)
                warn_unusable(state.path or Path(os.curdir), exc)
                state.file.drop()
                state.file = None
                return True
            state.leading = True
            return True

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
                    state.file.drop()


def _forget_other_process() -> None:
    """In a forked child, drop its copies of the parent's states; under ``_mutex``."""
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
    pid = os.getpid()
    base = runtime_dir()
    if base is None:
        return _Lock(pid, None)
    path = base / "groups"
    try:
        private_dir(path)
        path = path / f"{group.key}.lock"
        return _Lock(pid, HeldFile.of(open_private(path)), path)
    except OSError as exc:
        warn_unusable(path, exc)
        return _Lock(pid, None, path)
