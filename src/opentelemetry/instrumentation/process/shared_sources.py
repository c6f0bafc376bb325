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

Nothing here knows about OpenTelemetry; anything the group code raises falls
back to ``"every"`` with one warning, and never reaches the host application.
"""

from __future__ import annotations

import logging
import os
import weakref

from .group.election import Election
from .group.keys import Group, group_of
from .group.rundir import faults
from .options import SHARED_ONCE
from .sources.base import Source

_logger = logging.getLogger(__name__)


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
        self._service = service if mode == SHARED_ONCE else None
        if self._service is not None:
            self._join(self._service, say=True)

    def _join(self, service: str, say: bool = False) -> None:
        self.group = self._election = None
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
            return sources
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


def _fall_back(exc: BaseException) -> None:
    faults.warning(
        ("group", type(exc).__name__),  # pragma: no mutate - a fault key
        "process metrics: the group of this process cannot be worked out (%s: %s); it "
        "reports the shared metrics itself (shared_metrics='every').",
        type(exc).__name__,
        exc,
    )
