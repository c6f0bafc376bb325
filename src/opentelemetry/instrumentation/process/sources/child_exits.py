"""How the children of this process ended, each counted once by its cause (supervisor mode).

The pass (``child_pass.py``) *notes* an end when it finds a child gone from
the listing or a zombie; the wait wrapper (``probes/reaps.py``) notes the
status of each child that this process reaped, those that lived and ended
between two collections included. An end is *counted* once its cause is
known, or can no longer be:

- a status this process reaped, once it is :data:`SETTLE` seconds old, so
  that a server's mark made just after the reap (gunicorn's ``child_exit``
  hook, :func:`~..probes.reaps.gunicorn_child_exit`) is in;
- a zombie's own status (``/proc/<pid>/stat``, field 52), when another process
  is its parent, or when this process did not reap it within a collection;
- ``unknown`` when neither is to be had: a child that another process reaped
  (a grandchild, a worker of uWSGI's C master), or that this process reaped
  through a reference to ``os.waitpid`` taken before the wrapper was put in.
  A child of this process waits one collection for its status first.

OOM kills
    The OOM killer's ``SIGKILL`` looks like any other; the cgroup counts it,
    in the cgroup whose memory the victim was charged to (``oom_kill`` in
    ``memory.events.local`` on v2, ``memory.oom_control`` on v1). So each
    child's memory cgroup is read from ``/proc/<pid>/cgroup`` when it is
    first seen and during its first minute (a worker may move itself), and
    the count of each such cgroup once per collection. The count of the
    child's own cgroup alone is read, not a hierarchical one of the master's
    or a container's: that would add the kills of its other sub-cgroups. The
    kills counted since the last collection, and those of the two before
    left unmatched (a kill counted just before its victim is reaped), go to
    the ``SIGKILL`` ends of that cgroup counted now: with ``N`` such ends and
    ``M`` kills, the ``M`` with the most resident memory at their last
    collection get ``oom_kill``, the others ``signal``. The killer picks its
    victim by memory too, but by the memory at the kill: a worker that grew
    fast since its last collection may be ranked below one that did not.

Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from pathlib import Path

from ..linux import cgroup
from ..linux.files import KernelFile, flat_keyed_file, read_bytes
from ..linux.files import Key as FileKey
from ..probes.reaps import Reaped
from .base import Key
from .exit_causes import OOM_KILLED, SEEDED, cause

SETTLE = 1.0
"""Seconds a reaped status waits before it is counted, for a server's mark to come in."""
CARRY = 3
"""Collections (and :data:`CARRY_TIME` seconds) during which an OOM kill that a cgroup
counted may be matched to an end: its victim's status settles later than the count."""
CARRY_TIME = 3 * SETTLE
FIRST_MINUTE = 60.0
"""Seconds after its first sight during which a child's cgroup is read again."""

_SIGKILL = int(signal.SIGKILL)
_OWN = b""
"""The key of this process's own memory cgroup in ``Exits.kills``."""


class Ending:
    """A child's end, noted but not counted yet."""

    __slots__ = ("cgroup", "noted", "ours", "reaped_at", "rss", "status", "timeout", "zombie")

    def __init__(self, rss: int, cgroup: bytes | None, noted: float, ours: bool) -> None:
        self.rss = rss
        """Its resident memory at its last collection (0 if never read)."""
        self.cgroup = cgroup
        """Its memory cgroup (the text of its ``/proc/<pid>/cgroup``), ``None``: this process's."""
        self.noted = noted
        self.ours = ours
        """This process may reap it: its status may still come."""
        self.status: int | None = None
        """The status this process reaped."""
        self.reaped_at = 0.0
        self.zombie: int | None = None
        """The status a zombie showed."""
        self.timeout = False


class OomKills:
    """One memory cgroup's count of OOM kills, and the kills not matched to an end yet."""

    __slots__ = ("credits", "file", "last")

    def __init__(self, file: KernelFile) -> None:
        self.file = file
        self.last: int | None = None
        self.credits: list[list[float]] = []
        """``[kills, collections since, when counted]``, oldest first."""

    def read(self, now: float) -> None:
        """Read the count once; what it grew by since the last read is new credit."""
        try:
            value = int(self.file.read()[_OOM_KILL])
        except (OSError, ValueError, KeyError):
            return  # unreadable now: no new credit, the baseline kept
        last, self.last = self.last, value
        if last is not None and value > last:
            self.credits.append([value - last, 0, now])

    def take(self, wanted: int) -> int:
        """Up to ``wanted`` kills, the oldest first."""
        got = 0
        for credit in self.credits:
            n = min(int(credit[0]), wanted - got)
            credit[0] -= n
            got += n
        self.credits = [c for c in self.credits if c[0] > 0]
        return got

    def age(self, now: float) -> None:
        """One collection more; kills older than :data:`CARRY` collections and seconds go."""
        for credit in self.credits:
            credit[1] += 1
        self.credits = [c for c in self.credits if c[1] < CARRY or now - c[2] < CARRY_TIME]


_OOM_KILL = "oom_kill"


def _oom_file(proc_cgroup: Path) -> KernelFile | None:
    """The file that counts OOM kills in the memory cgroup named in ``proc_cgroup``."""
    memory = cgroup.discover(proc_self_cgroup=proc_cgroup).memory
    if memory is None:
        return None
    # v2's local count is Linux 5.2+; oom_kill is 4.13+.
    v2 = ("memory.events.local", "memory.events")
    for name in v2 if memory.version == 2 else ("memory.oom_control",):
        found = flat_keyed_file(str(memory.own / name), (), (FileKey(_OOM_KILL, _OOM_KILL),))
        if found is not None:
            return found
    return None


class Exits:
    """The ends of the children of this process, noted and counted by cause."""

    __slots__ = ("counted", "ending", "kills", "own", "totals")

    def __init__(self) -> None:
        self.totals: dict[Key, int] = dict.fromkeys(SEEDED, 0)
        self.ending: dict[int, Ending] = {}
        self.counted: dict[int, tuple[float, int]] = {}
        """Pids counted lately: when, and the collections left during which a note of a reap
        made before then is dropped (pids are given again: a later reap is another child)."""
        self.kills: dict[bytes, OomKills | None] = {}
        """Each memory cgroup seen, by its text; ``None`` where its count cannot be read."""
        self.own: bytes | None = None
        """This process's cgroups (the text of ``/proc/self/cgroup``), read once."""

    # --- noting ------------------------------------------------------------------

    def cgroup_of(self, pid: int) -> bytes | None:
        """The memory cgroup of child ``pid`` (``None``: this process's, or not to be had)."""
        try:
            own = self._own()
            found = read_bytes(f"/proc/{pid}/cgroup")
        except OSError:
            return None
        if found == own:
            return None
        if found not in self.kills:
            counter = _oom_file(Path(f"/proc/{pid}/cgroup"))
            if counter is None and not os.path.exists(f"/proc/{pid}"):
                return None  # gone meanwhile: tried again with the next child there
            self.kills[found] = OomKills(counter) if counter is not None else None
        return found

    def note(
        self,
        pid: int,
        rss: int,
        cgroup: bytes | None,
        now: float,
        ours: bool,
        zombie: int | None = None,
    ) -> None:
        """Child ``pid`` ended: gone from the listing, or a zombie (with its status, if read)."""
        if pid in self.ending:
            return
        ending = self.ending[pid] = Ending(rss, cgroup, now, ours)
        ending.zombie = zombie

    def _own(self) -> bytes:
        """This process's cgroups; the first call finds its OOM kill count."""
        if self.own is None:
            self.own = read_bytes("/proc/self/cgroup")
            counter = _oom_file(Path("/proc/self/cgroup"))
            self.kills[_OWN] = OomKills(counter) if counter is not None else None
        return self.own

    # --- counting ----------------------------------------------------------------

    def count(
        self,
        now: float,
        reaped: Iterable[Reaped],
        zombies: set[int],
        live: Iterable[bytes | None],
        reaping: bool,
        oom: bool,
    ) -> None:
        """Count what can be, at the collection of ``now`` (``time.monotonic()``).

        ``reaped`` are the wait wrapper's notes, drained before the listing;
        ``zombies`` the pids noted as zombies, before the pass trims them;
        ``live`` the cgroups of the live children; ``reaping`` whether the
        wrapper is in; ``oom`` whether the cgroups' OOM kill counts are read
        (Linux).
        """
        self._take(reaped, zombies, now)
        done = []
        for pid, ending in self.ending.items():
            if ending.status is not None:
                if now - ending.reaped_at >= SETTLE:
                    done.append((pid, ending))
            elif not (reaping and ending.ours) or ending.noted < now:
                done.append((pid, ending))  # no status will come, or none came in a collection
        for pid, _ in done:
            del self.ending[pid]
        keys: dict[int, Key] = {}
        killed: dict[bytes, list[tuple[int, int]]] = {}
        for pid, ending in done:
            status = ending.status if ending.status is not None else ending.zombie
            keys[pid] = cause(status, ending.timeout)
            if status is not None and status & 0x7F == _SIGKILL and not ending.timeout:
                killed.setdefault(ending.cgroup or _OWN, []).append((ending.rss, pid))
        for pid in self._oom_killed(now, killed, live) if oom else ():
            keys[pid] = OOM_KILLED
        for key in keys.values():
            self.totals[key] = self.totals.get(key, 0) + 1
        self.counted = {pid: (at, n - 1) for pid, (at, n) in self.counted.items() if n > 1}
        for pid, _ in done:
            self.counted[pid] = (now, 2)

    def _take(self, reaped: Iterable[Reaped], zombies: set[int], now: float) -> None:
        for pid, status, timeout, at, _ in reaped:
            ending = self.ending.get(pid)
            if ending is None:
                counted = self.counted.get(pid)
                if status is None or pid in zombies or (counted and at <= counted[0]):
                    continue  # counted already: as a zombie, or before a late note or mark
                # Reaped without ever being seen alive: born and gone between two collections.
                ending = self.ending[pid] = Ending(0, None, now, True)
            if status is None:
                ending.timeout = ending.timeout or timeout
            else:
                ending.status, ending.reaped_at = status, at

    def _oom_killed(
        self, now: float, killed: dict[bytes, list[tuple[int, int]]], live: Iterable[bytes | None]
    ) -> list[int]:
        """Read each cgroup's count once; the pids of ``killed`` that the OOM killer took.

        ``killed``: ``(rss, pid)`` of the ``SIGKILL`` ends counted now, by cgroup.
        """
        try:
            self._own()
        except OSError:
            return []
        for name in {_OWN, *(c or _OWN for c in live), *killed}:
            found = self.kills.get(name)
            if found is not None:
                found.read(now)
        taken: list[int] = []
        for name, ends in killed.items():
            found = self.kills.get(name)
            if found is not None:
                ends.sort(reverse=True)  # the most memory first
                taken.extend(pid for _, pid in ends[: found.take(len(ends))])
        for found in self.kills.values():
            if found is not None:
                found.age(now)
        return taken
