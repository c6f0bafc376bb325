"""One cached snapshot of every enabled source, shared by all callbacks.

A refresh reads each enabled source once (the process ones inside one
``Process.oneshot()``) and publishes an immutable :class:`Snapshot`. Readers
never see a half-built one. Nothing here knows about OpenTelemetry.

The cache is bound to one process. It notices by itself when it runs in
another one (a fork, with or without Python's at-fork hooks) and re-binds
before it reads anything: new lock, psutil handle, facts, baselines and hooks.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .facts import Facts, read_facts, this_process
from .faultlog import FaultLog
from .group.shared import SharedGate
from .platforms import ON_LINUX
from .sources import SOURCES, ReadContext, Reading, Source
from .sources.base import ReadOptions
from .sources.process import REFRESH

_logger = logging.getLogger(__name__)

# Global, so that generations of two caches (before and after a re-instrument)
# never compare equal.
_generations = itertools.count(1)


@dataclass(frozen=True)
class Snapshot:
    """Readings of one refresh, in process ``pid``. A failed source is absent."""

    generation: int
    pid: int
    readings: Mapping[str, Reading]


class SnapshotCache:
    """Refreshes the enabled sources at most once per collection.

    A collection is detected by generation: a caller passes the generation of
    the snapshot it read last time; if the current snapshot is that same one,
    a new collection has started and the cache refreshes. Every other caller
    of that collection then finds a generation it has not seen and shares it.
    """

    def __init__(self, options: ReadOptions, source_names: Iterable[str]) -> None:
        names = set(source_names)
        self.options = options
        self.sources: tuple[Source, ...] = tuple(s for s in SOURCES.values() if s.name in names)
        self.faults = FaultLog(logger=_logger)
        """Rate-limits the log lines of failing sources and facts."""
        self.refreshes = 0
        self._failing: set[str] = set()
        self._closed = False
        self.on_unhooked_fork: Callable[[], None] | None = None
        """Called once in a process forked without Python's at-fork hooks, after the re-bind."""
        self._shared = SharedGate(options.shared_metrics)
        """Leaves out the shared sources where this process does not lead its group."""
        self._bind()
        _live_caches.add(self)

    def _bind(self) -> None:
        """Bind to the current process: new lock, facts, baselines and hooks."""
        # The lock first: after a fork the old one may be held by a thread
        # that does not exist in the child.
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._pid = os.getpid()
        process = this_process()
        facts = read_facts(process, cpu_frequency=self.options.cpu_frequency, faults=self.faults)
        self._ctx = ReadContext(
            process=process,
            facts=facts,
            options=self.options,
            faults=self.faults,
            direct=ON_LINUX and self.options.direct_reads,
        )
        self.idle = frozenset(s.name for s in self.sources if not self._open(s))
        """Sources with nothing to read in this process (their open hook said so)."""
        self._read(self._shared.sources(tuple(s for s in self.sources if s.stateful)))

    @property
    def facts(self) -> Facts:
        """The static facts of the process this cache is bound to."""
        return self._ctx.facts

    def snapshot(self, seen_generation: int = 0) -> Snapshot:
        """The snapshot of the current collection.

        ``seen_generation`` is the generation the caller read last; if that is
        still the current one, this call starts a new collection and refreshes.
        """
        snap = self._snapshot
        pid = os.getpid()
        if snap is not None and snap.generation != seen_generation and snap.pid == pid:
            return snap
        if pid != self._pid:
            # A fork that skipped Python's at-fork hooks (uWSGI does by default).
            self._rebind()
            self._unhooked_fork()
        with self._lock:
            snap = self._snapshot
            # Another thread may have refreshed while we waited for the lock.
            if snap is None or snap.generation == seen_generation:
                snap = self._refresh()
                self._snapshot = snap
            return snap

    def _refresh(self) -> Snapshot:
        wall, cpu = time.perf_counter(), time.thread_time()
        readings = self._read(self._shared.sources(self.sources))
        if any(s.name == REFRESH for s in self.sources):
            readings[REFRESH] = {
                "duration": time.perf_counter() - wall,
                "cpu_time": time.thread_time() - cpu,
            }
        self.refreshes += 1
        return Snapshot(next(_generations), self._pid, readings)

    def _read(self, sources: tuple[Source, ...]) -> dict[str, Reading]:
        ctx = self._ctx
        if self.idle:
            sources = tuple(s for s in sources if s.name not in self.idle)
        ctx.now = time.monotonic()
        readings: dict[str, Reading] = {}
        in_process = [s for s in sources if s.in_process]
        if in_process:
            try:
                oneshot = ctx.process.oneshot()
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

    def _open(self, source: Source) -> bool:
        """Run ``source``'s open hook; whether it has anything to read in this process."""
        if source.open is None:
            return True
        try:
            return source.open(self._ctx)
        except Exception as exc:  # noqa: BLE001 - a hook must never break the host
            self._hook_failed(source, "open", exc)
            return False

    def _close(self, source: Source) -> None:
        if source.close is None:
            return
        try:
            source.close(self._ctx)
        except Exception as exc:  # noqa: BLE001 - a hook must never break the host
            self._hook_failed(source, "close", exc)

    def _hook_failed(self, source: Source, which: str, exc: Exception) -> None:
        self.faults.warning(
            (source.name, which, type(exc).__name__),
            "process metrics: could not %s source %r (%s: %s); the metrics it feeds are left out.",
            which,
            source.name,
            type(exc).__name__,
            exc,
        )

    def close(self) -> None:
        """Stop for good: remove every hook; later snapshots read nothing."""
        if self._closed:
            return
        self._closed = True
        self._shared.close()
        for source in self.sources:
            self._close(source)
        self.sources = ()
        self._snapshot = None
        _live_caches.discard(self)

    def _unhooked_fork(self) -> None:
        callback = self.on_unhooked_fork
        if callback is None:
            return
        try:
            callback()
        except Exception as exc:  # noqa: BLE001 - never break the forking program
            self.faults.warning(
                (
                    "unhooked fork",  # pragma: no mutate - a fault key is only compared with itself
                    type(exc).__name__,
                ),
                "process metrics: the clean-up after a fork without at-fork hooks failed (%s: %s).",
                type(exc).__name__,
                exc,
                exc_info=True,
            )

    def _rebind(self) -> None:
        """Re-bind in a new process; if that fails, report nothing rather than the parent."""
        try:
            for source in self.sources:
                self._close(source)
            self._bind()
        except Exception as exc:  # noqa: BLE001 - never break the forking program
            self.sources = ()
            self._pid = os.getpid()
            self._lock = threading.Lock()
            self._snapshot = None
            self.faults.warning(
                (
                    "fork",  # pragma: no mutate - a fault key is only compared with itself
                    type(exc).__name__,
                ),
                "process metrics: re-initialising after fork failed (%s: %s); this child "
                "reports no process metrics.",
                type(exc).__name__,
                exc,
                exc_info=True,
            )


_live_caches: weakref.WeakSet[SnapshotCache] = weakref.WeakSet()


def _rebind_after_fork() -> None:
    for cache in list(_live_caches):
        if cache._pid != os.getpid():
            cache._rebind()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_rebind_after_fork)
