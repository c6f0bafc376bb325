"""One cached snapshot of every enabled source, shared by all callbacks.

A refresh reads each enabled source once (the process ones inside one
``Process.oneshot()``) and publishes an immutable :class:`Snapshot`. Readers
never see a half-built one. Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import psutil

from .facts import Facts, read_facts
from .faultlog import FaultLog
from .sources import SOURCES, ReadContext, Reading, Source

# Global, so that generations of two caches (before and after a re-instrument)
# never compare equal.
_generations = itertools.count(1)


@dataclass(frozen=True)
class Snapshot:
    """Readings of one refresh. A failed source is absent from ``readings``."""

    generation: int
    readings: Mapping[str, Reading]
    duration: float
    """Wall time the refresh took, in seconds."""


class SnapshotCache:
    """Refreshes the enabled sources at most once per collection.

    A collection is detected by generation: a caller passes the generation of
    the snapshot it read last time; if the current snapshot is that same one,
    a new collection has started and the cache refreshes. Every other caller
    of that collection then finds a generation it has not seen and shares it.
    """

    def __init__(
        self,
        source_names: Iterable[str],
        *,
        per_cpu: bool = False,
        max_threads: int = 0,
        cpu_frequency: bool = False,
    ) -> None:
        names = set(source_names)
        self.sources: tuple[Source, ...] = tuple(s for s in SOURCES.values() if s.name in names)
        self._per_cpu = per_cpu
        self._max_threads = max_threads
        self._cpu_frequency = cpu_frequency
        self.faults = FaultLog()
        """Rate-limits the log lines of failing sources and facts."""
        self._failing: set[str] = set()
        self.refreshes = 0
        self._reset()
        _live_caches.add(self)

    def _reset(self) -> None:
        """(Re)bind to the current process: new lock, facts and baselines."""
        # The lock first: after a fork the old one may be held by a thread
        # that does not exist in the child.
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._process = psutil.Process()
        self.facts: Facts = read_facts(
            self._process, cpu_frequency=self._cpu_frequency, faults=self.faults
        )
        self._ctx = ReadContext(
            process=self._process,
            facts=self.facts,
            now=time.monotonic(),
            per_cpu=self._per_cpu,
            max_threads=self._max_threads,
        )
        self._read(tuple(s for s in self.sources if s.stateful))

    def snapshot(self, seen_generation: int = 0) -> Snapshot:
        """The snapshot of the current collection.

        ``seen_generation`` is the generation the caller read last; if that is
        still the current one, this call starts a new collection and refreshes.
        """
        snap = self._snapshot
        if snap is not None and snap.generation != seen_generation:
            return snap
        with self._lock:
            snap = self._snapshot
            # Another thread may have refreshed while we waited for the lock.
            if snap is None or snap.generation == seen_generation:
                snap = self._refresh()
                self._snapshot = snap
            return snap

    def _refresh(self) -> Snapshot:
        start = time.perf_counter()
        readings = self._read(self.sources)
        duration = time.perf_counter() - start
        readings["snapshot"] = {"duration": duration}
        self.refreshes += 1
        return Snapshot(next(_generations), readings, duration)

    def _read(self, sources: tuple[Source, ...]) -> dict[str, Reading]:
        ctx = self._ctx
        ctx.now = time.monotonic()
        readings: dict[str, Reading] = {}
        in_process = [s for s in sources if s.in_process]
        if in_process:
            try:
                oneshot = self._process.oneshot()
                oneshot.__enter__()
            except Exception:  # noqa: BLE001 - oneshot() only caches; read without it
                oneshot = contextlib.nullcontext()
            try:
                for source in in_process:
                    self._read_one(source, ctx, readings)
            finally:
                oneshot.__exit__(None, None, None)
        for source in sources:
            if not source.in_process:
                self._read_one(source, ctx, readings)
        return readings

    def _read_one(self, source: Source, ctx: ReadContext, out: dict[str, Reading]) -> None:
        try:
            out[source.name] = source.read(ctx)
        except Exception as exc:  # noqa: BLE001 - a source must never break a collection
            self._failing.add(source.name)
            self.faults.warning(
                (source.name, type(exc).__name__),
                "process metrics: source %r failed (%s: %s); the metrics it feeds are left "
                "out while it fails. This fault is logged at most once per %.0f s.",
                source.name,
                type(exc).__name__,
                exc,
                self.faults.period,
            )
        else:
            if self._failing and source.name in self._failing:
                self._failing.discard(source.name)
                self.faults.log(
                    logging.INFO,
                    (source.name, "recovered"),
                    "process metrics: source %r works again; the metrics it feeds are back.",
                    source.name,
                )

    def _after_fork(self) -> None:
        try:
            self._reset()
        except Exception as exc:  # noqa: BLE001 - never break the forking program
            # Reporting the parent's process from the child would be wrong: report none.
            self.sources = ()
            self.faults.warning(
                ("fork", type(exc).__name__),
                "process metrics: re-initialising after fork failed (%s: %s); this child "
                "reports no process metrics.",
                type(exc).__name__,
                exc,
                exc_info=True,
            )


_live_caches: weakref.WeakSet[SnapshotCache] = weakref.WeakSet()


def _reinit_after_fork() -> None:
    for cache in list(_live_caches):
        cache._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reinit_after_fork)
