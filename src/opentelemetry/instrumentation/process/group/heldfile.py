"""A lock file held by this process: its descriptor, and who took it.

A forked child inherits the descriptor, and with it the ``flock`` lock (locks
belong to the open file description). :meth:`HeldFile.ours` tells a child it
is not the holder by the pid that took it, and :meth:`HeldFile.drop` closes
the child's copy: the holder keeps its lock, and the lock is freed when the
holder dies, not when the last inheritor does.
"""

from __future__ import annotations

import contextlib
import os


class HeldFile:
    """An open, locked file: ``fd``, taken by process ``pid``; (dev, inode) to recognise it."""

    __slots__ = ("fd", "ident", "pid")

    def __init__(self, fd: int, pid: int, ident: tuple[int, int]) -> None:
        self.fd = fd
        self.pid = pid
        self.ident = ident

    @classmethod
    def of(cls, fd: int) -> HeldFile:
        st = os.fstat(fd)
        return cls(fd, os.getpid(), (st.st_dev, st.st_ino))

    def ours(self) -> bool:
        """Whether this process took the lock (not a forked child that inherited it)."""
        return self.pid == os.getpid()

    def drop(self) -> None:
        """Close the descriptor if it is still this file: a child may have reused the number."""
        with contextlib.suppress(OSError):
            st = os.fstat(self.fd)
            if (st.st_dev, st.st_ino) == self.ident:
                os.close(self.fd)
