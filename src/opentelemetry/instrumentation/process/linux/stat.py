"""``/proc/<pid>/stat`` and ``/proc/<pid>/task/<tid>/stat``: the one parser of these files.

The kernel counts CPU times and the start time in clock ticks
(:data:`CLOCK_TICKS` a second, ``USER_HZ``); :class:`Stat` gives the times
in seconds, as psutil does. Each call opens, reads and closes the file.
"""

from __future__ import annotations

import os

CLOCK_TICKS: int = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""Clock ticks a second (``USER_HZ``): the unit of the times in ``stat`` and ``cpuacct.stat``.

Windows has no ``os.sysconf``: 100 there, where nothing reads these files.
"""


class Stat:
    """The fields of one ``stat`` file that this package reads (proc(5))."""

    __slots__ = ("exit_code", "majflt", "minflt", "ppid", "starttime", "state", "stime", "utime")

    def __init__(
        self,
        *,
        state: str,
        ppid: int,
        minflt: int,
        majflt: int,
        utime: float,
        stime: float,
        starttime: int,
        exit_code: int | None = None,
    ) -> None:
        self.state = state
        """One letter: ``R`` running, ``S`` sleeping, ``Z`` zombie, ..."""
        self.ppid = ppid
        self.minflt = minflt
        """Minor page faults (no disk read)."""
        self.majflt = majflt
        """Major page faults (a page read from disk)."""
        self.utime = utime
        """Seconds in user mode."""
        self.stime = stime
        """Seconds in kernel mode."""
        self.starttime = starttime
        """When it started, in clock ticks after boot: with the pid, one process over all time."""
        self.exit_code = exit_code
        """A zombie's wait status (field 52, Linux 3.5+; 0 unless the reader may trace it)."""


def parse(data: bytes) -> Stat:
    """The fields of a ``stat`` file's text; raises ``ValueError`` on text that is not one."""
    # The name (comm) may itself hold ") ": the fields start after the last one.
    _, paren, rest = data.rpartition(b")")
    fields = rest.split()
    if not paren or len(fields) < 20:
        raise ValueError(f"not a stat line: {data[:80]!r}")
    return Stat(
        state=fields[0].decode("ascii", "replace"),
        ppid=int(fields[1]),
        minflt=int(fields[7]),
        majflt=int(fields[9]),
        utime=int(fields[11]) / CLOCK_TICKS,
        stime=int(fields[12]) / CLOCK_TICKS,
        starttime=int(fields[19]),
        exit_code=int(fields[49]) if len(fields) > 49 else None,  # field 52
    )


def read(path: str) -> Stat:
    """The ``stat`` file at ``path`` (``/proc/<pid>/stat``, or a task's).

    Raises ``FileNotFoundError`` or ``ProcessLookupError`` when the process or
    thread has gone, another ``OSError`` when it cannot be read.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 4096)  # pragma: no mutate - the line is a few hundred bytes
    finally:
        os.close(fd)
    if not data:  # a task that exited between the open and the read
        raise ProcessLookupError(f"{path}: empty")
    return parse(data)


def of_process(pid: int) -> Stat:
    """``/proc/<pid>/stat``; raises as :func:`read` does."""
    return read(f"/proc/{pid}/stat")
