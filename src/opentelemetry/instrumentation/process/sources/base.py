"""What every source shares: the reading format, the read context, and deltas.

A source returns a *reading*: a flat mapping of field names to either a
number or a mapping from a key to a number. A key is a tuple of attribute
values whose type names the attributes (:func:`attributes`); each source
declares the key type of each of its fields, and the metric table is checked
against those names. Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

import copy
import errno
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Generic, NamedTuple, TypeAlias, TypeVar, cast

import psutil

from ..facts import Facts
from ..faultlog import FaultLog
from ..options import ProcessMetricsOptions
from ..platforms import ALL, current_platform


class Key(tuple[str | int | None, ...]):
    """A key of a reading: attribute values, named by its type's ``names``, in order.

    A value of ``None`` is an attribute left out of that point.
    """

    __slots__ = ()
    names: ClassVar[tuple[str, ...]] = ()


_KEY_TYPES: dict[tuple[str, ...], type[Key]] = {}


def attributes(*names: str) -> type[Key]:
    """The key type of a field whose points have the attributes ``names``.

    Build a key with a tuple of values, in the order of ``names``:
    ``MODE = attributes("cpu.mode")``, then ``MODE(("user",))``. Fields with the
    same attributes share one type (a class is a few objects that every full
    garbage collection walks).
    """
    found = _KEY_TYPES.get(names)
    if found is None:
        made = type("Key", (Key,), {"__slots__": (), "names": names})
        found = _KEY_TYPES[names] = cast("type[Key]", made)
    return found


Fields: TypeAlias = "Mapping[str, type[Key] | None]"
"""A source's fields: the key type of each field that has points, ``None`` for a number."""


def numbers(*names: str) -> dict[str, type[Key] | None]:
    """Fields that each hold one number."""
    return dict.fromkeys(names)


class Sample:
    """One event of a field that holds events, not a total: a stall, say (a histogram's)."""

    __slots__ = ("captured", "key", "value")

    def __init__(self, value: float, key: Key, captured: Any) -> None:
        self.value = value
        self.key = key
        """Its attributes, as a key of the field's key type."""
        self.captured = captured
        """What ran when it happened (a ``contextvars.Context``), or ``None``: the span's source."""


# Aliases as strings: no alias object made at import (linux/files.py says why).
Value: TypeAlias = "int | float | Mapping[Key, int | float] | tuple[Sample, ...]"
Reading: TypeAlias = "Mapping[str, Value]"


def known(**facts: int | float | None) -> Reading:
    """The facts that are known: an unknown one (``None`` or 0) is left out, never reported as 0."""
    return {k: v for k, v in facts.items() if v}


# Utilisation over a shorter window is mostly clock-tick noise: a second
# reader collecting right after the first reuses the last value instead.
MIN_UTILIZATION_WINDOW = 0.1


class Delta:
    """Turns consecutive cumulative readings into per-second-like ratios.

    It keeps the previous reading; ``step`` returns ``None`` only before any
    baseline exists.
    """

    def __init__(self) -> None:
        self._prev: tuple[float, Mapping[Key, float]] | None = None
        self._last: dict[Key, float] | None = None

    def step(
        self,
        now: float,
        values: Mapping[Key, float],
        ratio: Callable[[Mapping[Key, float], float], dict[Key, float]],
    ) -> dict[Key, float] | None:
        """The ratio of the change since the previous call, or the last one within the window."""
        prev = self._prev
        if prev is None:
            self._prev = (now, values)
            return None
        elapsed = now - prev[0]
        if elapsed < MIN_UTILIZATION_WINDOW and self._last is not None:
            return self._last
        deltas = {k: max(0.0, v - prev[1].get(k, v)) for k, v in values.items()}
        self._last = ratio(deltas, elapsed) if elapsed > 0 else self._last
        self._prev = (now, values)
        return self._last


_T = TypeVar("_T")
_S = TypeVar("_S")


class State(Generic[_S]):
    """What a source keeps between reads, typed: made on first use, one per process.

    ``name`` is the source's name; state that the sources of one module share
    (a discovery made once for all of them) has a name of its own.
    """

    __slots__ = ("make", "name")

    def __init__(self, name: str, make: Callable[[ReadContext], _S]) -> None:
        self.name = name
        self.make = make


class ReadContext:
    """What a source may use: this process, its facts, the options, and state between reads.

    One context lives per process: a forked child gets a copy, with its own
    process handle and facts, and the sources' ``after_fork`` applied.
    """

    def __init__(
        self,
        process: psutil.Process,
        facts: Facts,
        options: ProcessMetricsOptions,
        faults: FaultLog,
        now: float = 0.0,
        direct: bool = False,
    ) -> None:
        self.process = process
        self.facts = facts
        self.options = options
        self.faults = faults
        self.now = now
        self.direct = direct
        """Whether direct Linux reads may be tried (Linux, and the option allows them)."""
        self.deltas: dict[str, Delta] = {}
        self.floors: dict[str, dict[Key, float]] = {}
        self.state: dict[str, Any] = {}
        """Each source's :class:`State`, by its name: read it with :meth:`state_of`."""
        self.readings: Mapping[str, Reading] = {}
        """The readings of this refresh so far: a source reads those it ``needs``, by ``needed``."""
        self.direct_failed: set[str] = set()
        self.source: Source | None = None
        """The source being read: the direct reads it declares are those it may make."""

    def forked(self, process: psutil.Process, facts: Facts) -> ReadContext:
        """A copy for a forked child, with its own ``process`` and ``facts``; the rest is shared."""
        ctx = copy.copy(self)
        ctx.process, ctx.facts = process, facts
        return ctx

    def state_of(self, state: State[_S]) -> _S:
        """The ``state`` kept in this process, made now if it was not yet."""
        found: _S | None = self.state.get(state.name)
        if found is None:
            found = self.state[state.name] = state.make(self)
        return found

    def drop(self, state: State[_S]) -> _S | None:
        """Forget ``state``; what was kept, if anything."""
        found: _S | None = self.state.pop(state.name, None)
        return found

    def delta(self, name: str) -> Delta:
        """The :class:`Delta` kept under ``name``: a source's own name, where it keeps one."""
        return self.deltas.setdefault(name, Delta())

    def forget_deltas(self, names: Iterable[str]) -> None:
        """Drop the deltas of the sources ``names``: their next step has no baseline."""
        for name in names:
            self.deltas.pop(name, None)

    def never_below_previous(self, name: str, values: dict[Key, float]) -> dict[Key, float]:
        """``values``, none below its previous reading (a counter never goes down)."""
        floor = self.floors.get(name)
        if floor:
            values = {k: v if v >= floor.get(k, v) else floor[k] for k, v in values.items()}
        self.floors[name] = values
        return values

    def needed(self, source: str, field: str) -> int | float | None:
        """The number ``field`` of ``source``'s reading in this refresh; ``None`` if it has none.

        ``source`` is one that the source being read declares in ``needs`` (read
        earlier in the refresh): another fails it. ``None`` when that source is
        off, failed, or gave no such field: read the value some other way then.
        """
        reader = self.source
        if reader is not None and source not in reader.needs:
            raise RuntimeError(f"source {reader.name!r} reads {source!r}'s reading: declare it")
        found = self.readings.get(source, {}).get(field)
        return found if isinstance(found, (int, float)) else None

    def direct_read(self, name: str, read: Callable[[], _T]) -> _T | None:
        """``read()``, the direct read ``name``; ``None`` when it is off or given up.

        A read that raises ``OSError`` is given up for this process (said once),
        and its caller falls back to psutil. But for ``EBADF`` or ``ENOTSOCK``:
        another thread of the program closed or replaced the read's own
        descriptor meanwhile (CPython's ``test_subprocess`` moves descriptors
        with ``dup2``), which says nothing of the read: it is made once more,
        and if that too is raced, psutil stands in for this collection only.
        """
        source = self.source
        if source is not None and all(d.name != name for d in source.direct):
            raise RuntimeError(f"source {source.name!r} reads {name!r} directly: declare it")
        if not self.use_direct(name):
            return None
        try:
            return read()
        except OSError as exc:
            if exc.errno not in _RACED:
                self.direct_failed_once(name, exc)
                return None
        try:
            return read()
        except OSError as exc:
            if exc.errno not in _RACED:
                self.direct_failed_once(name, exc)
            return None

    def use_direct(self, name: str) -> bool:
        """Whether the direct read ``name`` may be tried: allowed, and not failed before."""
        return self.direct and name not in self.direct_failed

    def direct_failed_once(self, name: str, exc: BaseException) -> None:
        """Give up the direct read ``name`` for this process, and say so once."""
        self.direct_failed.add(name)
        self.faults.warning(
            (
                "direct",  # pragma: no mutate - a fault key is only compared with itself
                name,
                type(exc).__name__,
            ),
            "process metrics: the direct Linux read %r failed (%s: %s); psutil is used "
            "instead from now on.",
            name,
            type(exc).__name__,
            exc,
        )


_RACED = frozenset({errno.EBADF, errno.ENOTSOCK})
"""Errors of a descriptor that another thread closed or replaced under a read of ours."""


def _always() -> bool:
    return True


def psutil_has(name: str) -> Callable[[], bool]:
    """A check that psutil has ``name`` (``"cpu_freq"``, ``"Process.io_counters"``).

    Checked when called, not when made: psutil can be patched in between.
    """
    owner, _, attr = name.rpartition(".")

    def check() -> bool:
        return hasattr(getattr(psutil, owner) if owner else psutil, attr)

    return check


class DirectRead:
    """A Linux read a source makes instead of a psutil call, which stays its fallback."""

    __slots__ = ("instead_of", "name", "reads")

    def __init__(self, name: str, reads: str, instead_of: str) -> None:
        self.name = name
        """Its name in ``ctx.direct_read(name, ...)`` and in the one warning when it fails."""
        self.reads = reads
        """What it reads, in words, for the docs."""
        self.instead_of = instead_of
        """The psutil call it replaces, and what that call costs that this read does not."""


class Source(NamedTuple):
    """One read from the OS or the runtime, named so that metrics can point at it."""

    name: str
    """Its id, in snake case (``process_rusage``): never dotted, so never read as a metric name."""
    read: Callable[[ReadContext], Reading]
    fields: Fields
    """The fields its reading may hold (absent ones are unknown, never 0), with their keys."""
    cost: str
    """What one read costs, in words, for the metric reference."""
    platforms: frozenset[str] = ALL
    """Where it can be read; the metric reference says so for each metric."""
    field_platforms: Mapping[str, frozenset[str]] = MappingProxyType({})
    """Fields given on fewer platforms than the source is read on."""
    in_process: bool = False
    """Read inside the one ``Process.oneshot()`` of a refresh."""
    stateful: bool = False
    """Keeps a baseline: read once at start, so the first collection has a delta."""
    shared: bool = False
    """The same in every process of a group (host, cgroup, pressure): with
    ``shared_metrics="once"`` only the group's elected process reads it."""
    available: Callable[[], bool] = _always
    """A run-time check on top of ``platforms`` (a psutil call that may be missing)."""
    modules: tuple[str, ...] = ()
    """Modules it reads with, imported when it opens (relative to the package: ``.linux.smaps``).

    A module that only an option needs is imported then, at ``instrument()``,
    never at a collection (the test of it derives from every source).
    """
    open: Callable[[ReadContext], bool] | None = None
    """Called before the first read in each process: installs hooks, finds paths.

    Returns whether there is anything to read in this process; a source that
    has nothing is not read, and its metrics are not registered.
    """
    close: Callable[[ReadContext], None] | None = None
    """Called when reporting stops (``uninstrument()``)."""
    needs: tuple[str, ...] = ()
    """Sources whose readings of the same refresh it reads (``ReadContext.readings``).

    Each comes earlier in ``SOURCES``, and is read in the oneshot if this one is;
    one that is not enabled, or failed, is simply absent.
    """
    direct: tuple[DirectRead, ...] = ()
    """The direct Linux reads it may make (``ctx.direct_read(name, ...)``), each with a
    psutil fallback: a read it has not declared here fails it."""
    keeps: tuple[State[Any], ...] = ()
    """The states it keeps between reads (:class:`State`); a state of several sources is
    declared by each."""
    auto: str = ""
    """For a source its option turns on by itself (``None``, auto): when it has anything
    to read, in words (the metric reference says it)."""
    after_fork: Callable[[ReadContext, float | None], None] | None = None
    """Called in a forked child, before its first read: drops the parent's state.

    It gets the time of the fork on the ``time.monotonic()`` clock (``None``
    if unknown). State that a fork does not change (the host's counters,
    paths the open hook found) stays.
    """

    def supported(self, platform: str | None = None, field: str | None = None) -> bool:
        """Whether this source (or its ``field``) can be read on ``platform`` (default: here)."""
        where = self.field_platforms.get(field, self.platforms) if field else self.platforms
        return (platform or current_platform()) in where and self.available()
