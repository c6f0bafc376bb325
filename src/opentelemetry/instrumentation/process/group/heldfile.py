"""A lock file held by this process: its descriptor, and who took it.

The descriptor is moved to a high number (:data:`HIGH_FD` or above): a
program may close a low one (0, 1, 2) and expect its next ``open`` or ``dup``
to take it, or count on the numbers ``os.pipe()`` returns; a descriptor of
ours that lives as long as the process must not sit there (CPython's
``test_subprocess`` found it at 3).

A forked child inherits the descriptor, and with it the ``flock`` lock (locks
belong to the open file description). :meth:`HeldFile.ours` tells a child it
is not the holder by the pid that took it, and :meth:`HeldFile.drop` closes
the child's copy: the holder keeps its lock, and the lock is freed when the
holder dies, not when the last inheritor does.
"""

from __future__ import annotations

import contextlib
import os

try:
    import fcntl
except ImportError:  # Windows: no lock files there (the runtime directory is None)
    fcntl = None  # type: ignore[assignment]

HIGH_FD = 256
"""The lowest number a held descriptor is moved to, where the descriptor limit allows it."""


class HeldFile:
    """An open, locked file: ``fd``, taken by process ``pid``; (dev, inode) to recognise it."""

    __slots__ = ("fd", "ident", "pid")

    def __init__(self, fd: int, pid: int, ident: tuple[int, int]) -> None:
        self.fd = fd
        self.pid = pid
        self.ident = ident

    @classmethod
    def of(cls, fd: int) -> HeldFile:
        """Hold ``fd`` (closed on ``exec``), moved to :data:`HIGH_FD` or above where it can be."""
        st = os.fstat(fd)
        return cls(_high(fd), os.getpid(), (st.st_dev, st.st_ino))

    def ours(self) -> bool:
        """Whether this process took the lock (not a forked child that inherited it)."""
        return self.pid == os.getpid()

    def drop(self) -> None:
        """Close the descriptor if it is still this file: a child may have reused the number."""
        with contextlib.suppress(OSError):
            st = os.fstat(self.fd)
            if (st.st_dev, st.st_ino) == self.ident:
                os.close(self.fd)


def _high(fd: int) -> int:
    """``fd`` moved to :data:`HIGH_FD` or above (closed on ``exec``); unmoved if it cannot be."""
    if fcntl is None or fd >= HIGH_FD:
        return fd
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
    except OSError:  # a descriptor limit below HIGH_FD: it stays where it is
        return fd
    os.close(fd)
    return high
