"""A lock of the process that takes it: never one that a fork copied.

A fork copies a lock as it is. Held by a thread of the parent, it is never
released in the child, where that thread does not exist. At-fork hooks could
renew it, but a fork from C (uWSGI's default) runs none, so the pid is
checked before any lock is taken, and each process makes its own.
"""

from __future__ import annotations

import os
import threading


class ProcessLock:
    """One ``threading.Lock`` per process, made by the first thread of it that asks."""

    __slots__ = ("_locks",)

    def __init__(self) -> None:
        self._locks: dict[int, threading.Lock] = {}

    def get(self, pid: int | None = None) -> threading.Lock:
        """The lock of this process (``pid``, where the caller has it already).

        ``setdefault`` on a dict of int keys is atomic (under the GIL, or the
        dict's own lock without one), so threads of a new process that race
        here all get the same lock. A lock is never replaced in the process it
        belongs to: no thread can wait on a lock that another one swapped out.
        """
        if pid is None:
            pid = os.getpid()
        lock = self._locks.get(pid)
        if lock is None:
            lock = self._locks.setdefault(pid, threading.Lock())
            for other in list(self._locks):  # a parent's: no thread of this process holds it
                if other != pid:
                    self._locks.pop(other, None)
        return lock
