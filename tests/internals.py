"""The few internals that tests touch, each behind one small function.

Everything else in the tests goes through the public API. When the package's
internals move, only these functions need to follow.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.instrumentation.process import forks
from opentelemetry.instrumentation.process.snapshot import SnapshotCache


def fork_wait_seconds() -> float:
    """How long a fork waits for a collection in flight (documented in prefork.md)."""
    return float(forks.FORK_WAIT_SECONDS)


def snapshot_cache(source_names: Iterable[str]) -> SnapshotCache:
    """A snapshot cache of these sources, outside any instrumentation.

    Tests call only its ``snapshot(seen_generation)``, whose result has a
    ``generation``: the collection protocol of design.md.
    """
    return SnapshotCache(source_names)
