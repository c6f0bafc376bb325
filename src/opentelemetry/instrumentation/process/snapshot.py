"""One cached snapshot of every enabled source, shared by all callbacks.

A refresh reads each enabled source once (the process ones inside one
``Process.oneshot()``) and publishes an immutable :class:`Snapshot`; readers
never see a half-built one. Nothing here knows about OpenTelemetry.
The cache is bound to one process. In a forked child (with or without
Python's at-fork hooks) its first snapshot re-binds, under the child's own
lock: a psutil handle, the facts and baselines a fork changes; a child that
never collects pays nothing. The pid check is the one mechanism of the
re-bind; the one at-fork hook here notes when, and whether, a fork ran
Python's hooks, which a pid cannot tell.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from .facts import Facts, after_fork, read_facts, started_monotonic, this_process
from .faultlog import FaultLog
from .locks import ProcessLock
from .platforms import FREE_THREADED, ON_LINUX
from .shared_sources import SharedGate
from .sources import SOURCES, ReadContext, Reading, Source
from .sources.process import REFRESH

if TYPE_CHECKING:
    from .group.keys import Group
    from .options import ProcessMetricsOptions

_logger = logging.getLogger(__name__)

# Global, so that generations of two caches (before and after a re-instrument)
# never compare equal.
_generations = itertools.count(1)


class Snapshot:
    """Readings of one refresh, in process ``pid``. A failed source is absent."""

    __slots__ = ("generation", "pid", "readings")

    def __init__(self, generation: int, pid: int, readings: Mapping[str, Reading]) -> None:
        self.generation = generation
        self.pid = pid
        self.readings = readings


class SnapshotCache:
    """Refreshes the enabled sources at most once per collection.

    A collection is detected by generation: a caller passes the generation of
    the snapshot it read last time; if the current snapshot is that same one,
    a new collection has started and the cache refreshes. Every other caller
    of that collection then finds a generation it has not seen and shares it.
    """

    def __init__(
        self, options: ProcessMetricsOptions, source_names: Iterable[str], service: str = ""
    ) -> None:
        """Read the static facts and the baselines of ``source_names``' stateful sources.

        ``service`` names the service this process exports (see
        :class:`~.shared_sources.SharedGate`): with ``shared_metrics="once"``,
        the processes of one service elect one reporter of the shared sources.
        """
        names = set(source_names)
        self.options = options
        self.sources: tuple[Source, ...] = SOURCES.among(names)
        self.faults = FaultLog(logger=_logger)
        """Rate-limits the log lines of failing sources and facts."""
        self._failing: set[str] = set()
        self._closed = False
        self.on_fork: Callable[[bool], None] | None = None
        """Called once in a forked child, after the re-bind, with whether the fork ran
        Python's at-fork hooks."""
        self._shared = SharedGate(options.shared_metrics, service)
        """Leaves out the shared sources where this process does not report for its group."""
        self._pid = os.getpid()
        """The process this cache is bound to; another one re-binds at its first snapshot."""
        self._lock = ProcessLock()
        """The lock of refreshes, this process's own."""
        self._snapshot: Snapshot | None = None
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
        """Sources with nothing to read (their open hook said so); a fork does not change it."""
        # Baselines, in every process (the role is taken at a collection, not
        # here): whoever reports first has a real utilisation at once.
        self._read(tuple(s for s in self.sources if s.stateful))

    @property
    def group(self) -> Group | None:
        """The group whose shared metrics one process reports; ``None`` with ``"every"``."""
        return self._shared.group

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
        forked = hooked = False
        with self._lock.get(pid):
            if self._pid != pid:
                # The first snapshot in a forked child: the one place that re-binds.
                forked, hooked = True, self._rebind(pid)
            snap = self._snapshot
            # Another thread may have refreshed while we waited for the lock.
            if snap is None or snap.generation == seen_generation:
                snap = self._refresh()
                self._snapshot = snap
        if forked:
            self._forked(hooked)
        return snap

    def _refresh(self) -> Snapshot:
        wall, cpu = time.perf_counter(), time.thread_time()
        sources = self._shared.sources(self.sources)
        if self._shared.took_over:  # its baselines of the shared sources are not its own
            self._ctx.forget_deltas(s.name for s in self.sources if s.shared)
        readings = self._read(sources)
        if any(s.name == REFRESH for s in self.sources):
            readings[REFRESH] = {
                "duration": time.perf_counter() - wall,
                "cpu_time": time.thread_time() - cpu,
            }
        return Snapshot(next(_generations), self._pid, readings)

    def _read(self, sources: tuple[Source, ...]) -> dict[str, Reading]:
        ctx = self._ctx
        if self.idle:
            sources = tuple(s for s in sources if s.name not in self.idle)
        ctx.now = time.monotonic()
        readings: dict[str, Reading] = {}
        ctx.readings = readings  # a source reads the earlier ones it needs
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
        ctx.source = source
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
        """Import what ``source`` reads with, run its open hook; whether it has anything to read.

        Nothing is imported at a collection: the last one runs at exit, where
        a module made then (a class built from a string) would turn Ctrl-C's
        exit by SIGINT into status 1 (docs/design.md, "Nothing at exit").
        """
        try:
            for module in source.modules:
                importlib.import_module(module, __package__)
            if source.open is None:
                return True
            return source.open(self._ctx)
        except Exception as exc:  # noqa: BLE001 - a hook must never break the host
            self._hook_failed(source, "open", exc)
            return False

    def _after_fork(self, source: Source, ctx: ReadContext, forked_at: float | None) -> bool:
        """Run ``source``'s after-fork hook; whether the source can still be read here."""
        if source.after_fork is None:
            return True
        try:
            source.after_fork(ctx, forked_at)
        except Exception as exc:  # noqa: BLE001 - a hook must never break the host
            self._hook_failed(source, "reset", exc)
            return False
        return True

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

    def _forked(self, hooked: bool) -> None:
        if FREE_THREADED and not hooked:
            # CPython's free-threaded collector stops the world and waits for the
            # parent's threads, which only PyOS_AfterFork_Child() would clear: a
            # child forked while another thread ran hangs at its first collection.
            # Nothing in Python can mend that; say how to avoid it (docs/pythons.md).
            self.faults.warning(
                ("unhooked fork", "free-threaded"),  # pragma: no mutate - a fault key
                "process metrics: this process was forked without Python's at-fork hooks "
                "(uWSGI's default) on a free-threaded Python. Such a child hangs at its first "
                "garbage collection when another thread ran at the fork (an SDK's export "
                "thread, say). Fork with os.fork(), or have uWSGI run the hooks "
                "(--py-call-osafterfork or --py-call-uwsgi-fork-hooks).",
            )
        callback = self.on_fork
        if callback is None:
            return
        try:
            callback(hooked)
        except Exception as exc:  # noqa: BLE001 - never break the forking program
            self.faults.warning(
                (
                    "fork clean-up",  # pragma: no mutate - a fault key is only compared with itself
                    type(exc).__name__,
                ),
                "process metrics: the clean-up after a fork failed (%s: %s).",
                type(exc).__name__,
                exc,
                exc_info=True,
            )

    def _rebind(self, pid: int) -> bool:
        """Re-bind to process ``pid`` (a fork); whether that fork ran Python's hooks.

        Called under ``pid``'s lock. Only what a fork changes is read again:
        the psutil handle (bound to a pid), the facts of the process itself
        (:func:`~.facts.after_fork`), and each source's state that belongs to
        the parent (its ``after_fork`` hook: this process's own CPU baseline,
        its threads, its event loops). Open hooks do not run again: what they
        found (cgroup folders, pressure files, a ``gc.callbacks`` hook) is
        inherited with the memory and the cgroup membership. If re-binding
        fails, the child reports nothing rather than its parent's values.
        """
        hooked = _fork_time[0] == pid
        try:
            process = this_process()
            facts = after_fork(self._ctx.facts, process, faults=self.faults)
            # A fork zeroes the child's CPU times: the baseline is then, at 0.
            at = _fork_time[1] if hooked else started_monotonic(facts)
            ctx = self._ctx = self._ctx.forked(process, facts)
            failed = [s for s in self.sources if not self._after_fork(s, ctx, at)]
            if failed:
                self.idle |= {s.name for s in failed}
        except Exception as exc:  # noqa: BLE001 - never break the forking program
            self.sources = ()
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
        self._pid = pid
        self._snapshot = None
        return hooked


_fork_time: tuple[int, float] = (0, 0.0)
"""(pid, ``time.monotonic()``) of the last fork that ran Python's at-fork hooks."""


def _note_fork() -> None:
    # All that must happen at the fork itself: when it happened. The child's
    # CPU baseline is (this moment, 0); re-binding waits for a collection.
    global _fork_time
    _fork_time = (os.getpid(), time.monotonic())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_note_fork)
