"""What every source shares: the reading format, the read context, and deltas.

A source returns a *reading*: a flat mapping of field names to either a
number or a mapping from a tuple of attribute values to a number. The metric
table says which field feeds which metric and what the tuple positions are
called. Nothing here knows about OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import psutil

from ..facts import Facts
from ..faultlog import FaultLog
from ..platforms import ALL, current_platform

Key = tuple[str | int | None, ...]
Value = int | float | Mapping[Key, int | float]
Reading = Mapping[str, Value]

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


class ReadOptions(Protocol):
    """The options this side reads; ``ProcessMetricsOptions`` is one."""

    @property
    def per_cpu(self) -> bool: ...
    @property
    def cpu_frequency(self) -> bool: ...
    @property
    def max_thread_series(self) -> int: ...
    @property
    def direct_reads(self) -> bool: ...
    @property
    def thread_series_by(self) -> str: ...
    @property
    def saturation(self) -> bool | None: ...
    @property
    def gc_pause_histogram(self) -> bool: ...
    @property
    def event_loop(self) -> bool: ...
    @property
    def shared_metrics(self) -> str: ...
    @property
    def children(self) -> bool: ...
    @property
    def max_children(self) -> int: ...
    @property
    def child_pid(self) -> bool: ...
    @property
    def tree_root(self) -> str: ...


_T = TypeVar("_T")


@dataclass
class ReadContext:
    """What a source may use: this process, its facts, the options, and state between reads.

    One context lives per process: a fork (or a pid change) gets a new one.
    """

    process: psutil.Process
    facts: Facts
    options: ReadOptions
    faults: FaultLog
    now: float = 0.0
    direct: bool = False
    """Whether direct Linux reads may be tried (Linux, and the option allows them)."""
    deltas: dict[str, Delta] = field(default_factory=dict)
    floors: dict[str, dict[Key, float]] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    """Per-source state kept between reads (hooks, discovered paths), by source name."""
    direct_failed: set[str] = field(default_factory=set)

    def delta(self, name: str) -> Delta:
        return self.deltas.setdefault(name, Delta())

    def monotonic(self, name: str, values: dict[Key, float]) -> dict[Key, float]:
        """``values``, none below its previous reading (a counter never goes down)."""
        floor = self.floors.get(name)
        if floor:
            values = {k: v if v >= floor.get(k, v) else floor[k] for k, v in values.items()}
        self.floors[name] = values
        return values

    def direct_read(self, name: str, read: Callable[[], _T]) -> _T | None:
        """``read()``, the direct read ``name``; ``None`` when it is off or given up.

        A read that raises ``OSError`` is given up for this process (said once),
        and its caller falls back to psutil.
        """
        if not self.use_direct(name):
            return None
        try:
            return read()
        except OSError as exc:
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


def _always() -> bool:
    return True


@dataclass(frozen=True)
class Source:
    """One read from the OS or the runtime, named so that metrics can point at it."""

    name: str
    read: Callable[[ReadContext], Reading]
    fields: frozenset[str]
    """The fields its reading may hold (absent ones are unknown, never 0)."""
    cost: str
    """What one read costs, in words, for the metric reference."""
    platforms: frozenset[str] = ALL
    """Where it can be read; the metric reference says so for each metric."""
    field_platforms: Mapping[str, frozenset[str]] = field(default_factory=dict)
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
    open: Callable[[ReadContext], bool] | None = None
    """Called before the first read in each process: installs hooks, finds paths.

    Returns whether there is anything to read in this process; a source that
    has nothing is not read, and its metrics are not registered.
    """
    close: Callable[[ReadContext], None] | None = None
    """Called when reporting stops (``uninstrument()``) or before re-binding after a fork."""

    def supported(self, platform: str | None = None, field: str | None = None) -> bool:
        """Whether this source (or its ``field``) can be read on ``platform`` (default: here)."""
        where = self.field_platforms.get(field, self.platforms) if field else self.platforms
        return (platform or current_platform()) in where and self.available()
