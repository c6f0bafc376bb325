"""Which sources a refresh reads: the shared ones only in the reporter of the group.

Shared sources (``Source.shared``: the host, the cgroup and the pressure
stalls) have the same values in every process of a group: the processes of
one service, one user and one cgroup (``group.keys.group_of``). With
``shared_metrics="once"`` a process reads them only while the election says
it reports; one that does not pays one ``flock`` try per refresh and reads
nothing of them.

The role is taken at a refresh, never at ``instrument()``: a short command
that never collects (``manage.py migrate`` in the web server's container)
takes it at most at its collection at exit, and holds it no longer than that.
It is kept until the process exits, so the collection at exit (the SDK's last
export) still has the shared metrics. A process that takes the role over from
another has no baseline of its own for their utilisation: its first refresh
as the reporter leaves the utilisation out (``took_over``), never a wrong one.

A process that does not report them says so once, at INFO, naming the group
and the process that does, and how to change it: at ``instrument()`` when
another process holds the role already, else at the first refresh that finds
it held. At DEBUG where that process is its parent, child or sibling: a worker
of the same server, left out by design. Nothing here knows about OpenTelemetry;
anything the group code raises falls back to ``"every"`` with one warning, and
never reaches the host application.
"""

from __future__ import annotations

import contextlib
import logging
import os
import weakref
from typing import TYPE_CHECKING

import psutil

from .options import SHARED_ONCE
from .sources.base import Source

if TYPE_CHECKING:  # the group code loads when a group is joined: never with "every"
    from .group.election import Election, Holder
    from .group.keys import Group

_logger = logging.getLogger(__name__)

_said: dict[tuple[int, str], int] = {}
"""(pid, group key) of the groups whose reporter this process has named, once each: the level."""


class SharedGate:
    """Filters the sources of a refresh by the election; ask it once per refresh.

    ``service`` is the identity of the service this process exports (its
    name, namespace and environment, as one string): only processes of the
    same service elect one reporter.
    """

    def __init__(self, mode: str, service: str) -> None:
        self.group: Group | None = None
        """The group this process takes part in; ``None`` with ``"every"`` or after a fault."""
        self.took_over = False
        """Whether the last refresh was the first one as the reporter after refreshes without."""
        self._election: Election | None = None
        self._finalizer: weakref.finalize[[], SharedGate] | None = None
        self._pid = os.getpid()
        self._refreshed = False
        self._led = False
        self._say = True
        """Whether to say it when another process reports: not in a forked child of this one."""
        self._service = service if mode == SHARED_ONCE else None
        if self._service is not None:
            self._join(self._service, say=True)

    def _join(self, service: str, say: bool = False) -> None:
        from .group.election import Election
        from .group.keys import group_of

        self.group = self._election = None
        self._say = say
        try:
            group = group_of(service)
            election = Election(group)
        except Exception as exc:  # noqa: BLE001 - never break the host: report as "every"
            _fall_back(exc)
            return
        self.group, self._election = group, election
        # A gate dropped without close() (a cache nobody closed) leaves the election too;
        # not at exit: the SDK's last collection, at exit, must still find the role held.
        finalizer = weakref.finalize(self, election.close)
        finalizer.atexit = False
        self._finalizer = finalizer
        if not say:  # a forked child: its parent said it at instrument()
            return
        try:
            holder = election.holder()  # another process reports already: said at start
        except Exception:  # noqa: BLE001 - only said; never break instrument()
            holder = None
        if holder is not None and holder.pid != os.getpid():
            _say_not_reporting(group, holder)
        _logger.debug(
            "process metrics: shared metrics once per group: this process joins the group of "
            "%s, user %d, cgroup %s (lock file %s.lock); its reporter is elected at a collection",
            service or "(no service name)",
            group.user,
            group.cgroup or "(none)",
            group.key,
        )

    def sources(self, sources: tuple[Source, ...]) -> tuple[Source, ...]:
        """``sources``, without the shared ones when this process does not report them."""
        if self._pid != os.getpid() and self._service is not None:
            self._forked(self._service)
        election = self._election
        if election is None or not any(s.shared for s in sources):
            self.took_over = False
            return sources
        try:
            leading = election.leader()
        except Exception as exc:  # noqa: BLE001 - never break a collection: report as "every"
            _fall_back(exc)
            self.close()
            self.took_over = False
            return sources
        self.took_over = leading and self._refreshed and not self._led
        self._refreshed, self._led = True, leading
        if leading:
            group = self.group
            level = None if group is None else _said.pop((os.getpid(), group.key), None)
            if group is not None and level is not None:  # said it did not: say it does
                _logger.log(
                    level,
                    "process metrics: this process (pid %d) now reports the shared metrics of "
                    "its group, %s: the process that did is gone.",
                    os.getpid(),
                    group.service,
                )
            return sources
        if self._say and self.group is not None and (os.getpid(), self.group.key) not in _said:
            try:
                holder = election.holder()
            except Exception:  # noqa: BLE001 - only said; the role is decided
                holder = None
            _say_not_reporting(self.group, holder)
        return tuple(s for s in sources if not s.shared)

    def _forked(self, service: str) -> None:
        """In a forked child: its own group (its cgroup is found again) and history of the role."""
        self._pid, self._refreshed, self._led = os.getpid(), False, False
        if self._finalizer is not None:
            self._finalizer.detach()  # the parent's election: its pid check dropped its state
        self._finalizer = None
        self._join(service)

    def close(self) -> None:
        """Leave the election for good (frees the role for another process if this was the last)."""
        finalizer, self._finalizer, self._election = self._finalizer, None, None
        self.group = self._service = None
        if finalizer is not None:
            finalizer()


def _say_not_reporting(group: Group, holder: Holder | None) -> None:
    """Say once in this process why it reports no shared metrics, and how to change that."""
    said = (os.getpid(), group.key)
    if said in _said:
        return
    # A worker of the same server (the reporter is its parent, child or sibling) is
    # left out by design: said at DEBUG. Anything else could surprise: at INFO.
    level = logging.DEBUG if holder is not None and _kin(holder.pid) else logging.INFO
    _said[said] = level
    who = "another process"
    if holder is not None:
        who = f"process {holder.pid}"
        with contextlib.suppress(Exception):  # its name, for a person; it may be gone
            who += f" ({psutil.Process(holder.pid).name()})"
    _logger.log(
        level,
        "process metrics: this process (pid %d) does not report the shared metrics "
        "(system.*, container.*, pressure stalls): %s reports them for its group, %s "
        "(user %d, cgroup %s). The processes of one service elect one reporter; a "
        "program that sets no service.name is told apart by its command line. To report "
        "them here as well, give this program a service.name of its own "
        "(OTEL_SERVICE_NAME), or set shared_metrics='every' "
        "(OTEL_PYTHON_PROCESS_METRICS_SHARED_METRICS=every).",
        os.getpid(),
        who,
        group.service,
        group.user,
        group.cgroup or "(none)",
    )


def _kin(pid: int) -> bool:
    """Whether process ``pid`` is this one's parent, child or sibling: of the same server."""
    ppid = os.getppid()
    if pid == ppid:
        return True
    try:
        return psutil.Process(pid).ppid() in (ppid, os.getpid())
    except psutil.Error:
        return False


def _fall_back(exc: BaseException) -> None:
    from .group.rundir import faults

    faults.warning(
        ("group", type(exc).__name__),  # pragma: no mutate - a fault key
        "process metrics: the group of this process cannot be worked out (%s: %s); it "
        "reports the shared metrics itself (shared_metrics='every').",
        type(exc).__name__,
        exc,
    )
