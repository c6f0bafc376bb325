"""Internals that tests of other modules touch, each behind one small function.

The tests of one module may read that module's own internals (its state after
a fork, say); tests of behaviour across modules go through the public API or
through these functions, so that when an internal moves, one function follows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import psutil
import pytest

from opentelemetry.instrumentation.process import ProcessMetricsOptions, snapshot
from opentelemetry.instrumentation.process import sdk_fork_guard as forks
from opentelemetry.instrumentation.process.snapshot import SnapshotCache


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
