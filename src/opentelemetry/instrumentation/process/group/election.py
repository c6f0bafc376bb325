"""The election: one process of a group reports the shared metrics.

The leader is the process that holds an exclusive ``flock`` on
``<runtime dir>/groups/<group key>.lock`` (see ``keys.group_key``); the kernel
frees it when the leader dies, and another process takes it at its next try.
One descriptor per process (``O_CLOEXEC``), shared by every :class:`Election`
of it; a forked child never believes it leads. Without a safe runtime
directory every process reports, after one warning. Details: docs/design.md,
"Worker slots and the election".
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from . import keys
from .heldfile import HeldFile
from .rundir import open_private, private_dir, runtime_dir, warn_unusable

try:
    import fcntl
except ImportError:  # Windows: runtime_dir() is None there, so fcntl is never used
    fcntl = None  # type: ignore[assignment]


class _Lock:
    """This process's lock file (``None`` when unusable: every process reports)."""

    # A plain class, not a dataclass: far cheaper to create at import (CONTRIBUTING.md).
    __slots__ = ("file", "leading", "path", "pid")

    def __init__(self, pid: int, file: HeldFile | None, path: Path | None = None) -> None:
        self.pid = pid
        self.file = file
        self.path = path
        self.leading = False


_state: _Lock | None = None
_users = 0
_mutex = threading.Lock()


class Election:
    """Whether this process reports its group's shared metrics, asked once per refresh."""

    def __init__(self) -> None:
        global _users
        with _mutex:
            _current_pid_users()
            _users += 1
        self._closed = False

    def leader(self) -> bool:
        """True while this process holds the group's lock, or when no lock can be used.

        A non-leader tries to take the lock at each call (one non-blocking
        ``flock``); a leader keeps it until it exits or every election of the
        process is closed.
        """
        if self._closed:
            return False
        with _mutex:
            state = _current()
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

    @property
    def fallback(self) -> bool:
        """Whether no lock can be used here, so that every process reports."""
        with _mutex:
            return _current().file is None

    def close(self) -> None:
        """Stop taking part; the last election of the process to close frees the lock."""
        global _state, _users
        if self._closed:
            return
        self._closed = True
        with _mutex:
            _users = max(0, _users - 1)
            if _users == 0 and _state is not None:
                if _state.file is not None and _state.pid == os.getpid():
                    _state.file.drop()
                _state = None


def _current_pid_users() -> None:
    """Forget the state and users of a parent (a fork that skipped the at-fork hooks)."""
    global _state, _users
    state = _state
    if state is not None and state.pid != os.getpid():
        _state, _users = None, 0
        if state.file is not None:
            state.file.drop()  # a child's copy: the parent keeps its lock


def _current() -> _Lock:
    """This process's lock state, opened on first use; inherited state is dropped."""
    global _state
    _current_pid_users()
    state = _state
    pid = os.getpid()
    if state is not None:
        return state
    _state = state = _open(pid)
    return state


def _open(pid: int) -> _Lock:
    base = runtime_dir()
    if base is None:
        return _Lock(pid, None)
    path = base / "groups"
    try:
        private_dir(path)
        path = path / f"{keys.group_key()}.lock"
        return _Lock(pid, HeldFile.of(open_private(path)), path)
    except OSError as exc:
        warn_unusable(path, exc)
        return _Lock(pid, None, path)


def _forget_in_child() -> None:
    global _state, _mutex, _users
    _mutex = threading.Lock()
    _users = 0  # the parent's elections are the parent's: a close here frees this one's lock
    state, _state = _state, None
    if state is not None and state.file is not None:
        state.file.drop()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
