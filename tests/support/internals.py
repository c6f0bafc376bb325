"""Internals that tests of other modules touch, each behind one small function.

The tests of one module may read that module's own internals (its state after
a fork, say); tests of behaviour across modules go through the public API or
through these functions, so that when an internal moves, one function follows.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterable

import psutil
import pytest

from opentelemetry.instrumentation.process import ProcessMetricsOptions, snapshot
from opentelemetry.instrumentation.process import sdk_fork_guard as forks
from opentelemetry.instrumentation.process.group import slots
from opentelemetry.instrumentation.process.snapshot import Snapshot, SnapshotCache


def fork_wait_seconds() -> float:
    """How long a fork waits for a collection in flight (documented in prefork.md)."""
    return float(forks.FORK_WAIT_SECONDS)


def snapshot_cache(source_names: Iterable[str]) -> SnapshotCache:
    """A snapshot cache of these sources, outside any instrumentation.

    Tests call only its ``snapshot(seen_generation)``, whose result has a
    ``generation``: the collection protocol of design.md.
    """
    return SnapshotCache(ProcessMetricsOptions(), source_names)


def replace_process_handle(
    monkeypatch: pytest.MonkeyPatch, make: Callable[[], psutil.Process]
) -> None:
    """Make the snapshot cache bind to this process with ``make`` (to inject a fault)."""
    monkeypatch.setattr(snapshot, "this_process", make)


def count_refreshes(monkeypatch: pytest.MonkeyPatch) -> Callable[[SnapshotCache], int]:
    """From now on, count each snapshot cache's refreshes; returns how many ``cache`` made.

    Forked children inherit the count, and go on counting their own.
    """
    counts: weakref.WeakKeyDictionary[SnapshotCache, int] = weakref.WeakKeyDictionary()
    refresh = SnapshotCache._refresh

    def counted(cache: SnapshotCache) -> Snapshot:
        counts[cache] = counts.get(cache, 0) + 1  # a refresh holds its cache's lock
        return refresh(cache)

    monkeypatch.setattr(SnapshotCache, "_refresh", counted)
    return lambda cache: counts.get(cache, 0)


def live_caches() -> int:
    """The snapshot caches alive and not closed in this process, after a garbage collection."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, SnapshotCache) and not o._closed)


def release_slot() -> None:
    """Give this process's worker slot back: a worker holds its slot for life, a test is none."""
    with slots._lock.get():
        found, slots._claim = slots._claim, None
    if found is not None:
        found.held.drop()
