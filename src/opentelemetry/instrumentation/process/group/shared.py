"""Which sources a refresh reads: the shared ones only in the leader of the group.

Shared sources (``Source.shared``: the host, the cgroup and the pressure
stalls) have the same values in every process of a group. With
``shared_metrics="once"`` a process reads them only while the election says
it leads; a process that does not lead pays one ``flock`` try per refresh and
reads nothing of them. With ``"every"`` each process reads them. A process
that takes over the role has no baseline for the utilisation of
the shared sources (it never read them): its first leading collection reports
the cumulative values and leaves the utilisation out, never a wrong one.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from ..sources.base import Source
from .election import Election


class SharedGate:
    """Filters the sources of a refresh by the election; ask it once per refresh."""

    def __init__(self, mode: str) -> None:
        self._once = mode == "once"
        self._election: Election | None = None
        self._finalizer: Callable[[], object] | None = None

    def sources(self, sources: tuple[Source, ...]) -> tuple[Source, ...]:
        """``sources``, without the shared ones when this process does not lead."""
        if not self._once or not any(s.shared for s in sources):
            return sources
        if self._election is None:
            self._election = Election()
            # A gate dropped without close() (a cache nobody closed) leaves the election too.
            self._finalizer = weakref.finalize(self, self._election.close)
        if self._election.leader():
            return sources
        return tuple(s for s in sources if not s.shared)

    def close(self) -> None:
        """Leave the election (frees the role for another process if this was the last)."""
        if self._election is not None:
            if self._finalizer is not None:
                self._finalizer()
            self._election = None
