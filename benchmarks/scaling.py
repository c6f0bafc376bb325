"""Cost against what grows: threads and sockets (CPUs: percpu.py), one sweep point at a time.

The thread count, the open sockets and the procfs files belong to the whole
process, so each point of a sweep is its own interleaved run, with every
subject and its own SDK floor (built at that point: the points reported change).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psutil

import configs
import crowds
import subjects
import timing
from opentelemetry.instrumentation.process import ProcessMetricsOptions
from subjects import Shape, Subject


@dataclass
class Point:
    """One sweep point: each subject's statistics and raw samples."""

    x: int
    stats: dict[str, timing.Stat]
    shapes: dict[str, Shape]
    values: dict[str, list[float]]


@dataclass
class Sweep:
    name: str
    axis: str
    points: list[Point] = field(default_factory=list)
    groups: dict[str, str] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)

    def at(self, x: int) -> Point:
        return next(p for p in self.points if p.x == x)


@dataclass(frozen=True)
class Plan:
    rounds: int
    pause: float
    budget: float


def sweep(
    name: str,
    axis: str,
    xs: Sequence[int],
    set_x: Callable[[int], None],
    subjects_: list[Subject],
    plan: Plan,
) -> Sweep:
    """Time ``subjects_`` and the SDK floor of each OpenTelemetry one at every ``x``."""
    found = Sweep(name, axis)
    for x in xs:
        set_x(x)
        for s in subjects_:  # twice: a first collection may still see the last point
            s.warm_up()
            s.warm_up()
        floors = [
            subjects.floor_of(s)
            for s in subjects_
            if s.group in ("ours", "peer") and s.shape.points
        ]
        every = subjects_ + floors
        samples = timing.interleaved(every, plan.rounds, plan.pause, budget=plan.budget)
        stats = {k: timing.stat(v) for k, v in samples.values.items() if v}
        found.points.append(Point(x, stats, {s.name: s.shape for s in every}, samples.values))
        found.groups.update({s.name: s.group for s in every})
        found.descriptions.update({s.name: s.description for s in every})
        for f in floors:
            f.close()
    return found


def ours(table: dict[str, tuple[ProcessMetricsOptions, str]]) -> list[Subject]:
    return [subjects.ours(name, options, text) for name, (options, text) in table.items()]


def threads(xs: Sequence[int], plan: Plan, idle: crowds.IdleThreads) -> Sweep:
    """Ours per_thread off, capped at 10 series and at the default 200, the peer, psutil."""
    timed = ours(configs.threads())
    timed.append(subjects.peer("peer_default", None, "SystemMetricsInstrumentor()"))
    proc = psutil.Process()
    timed.append(subjects.bare("psutil_threads", proc.threads, "psutil.Process().threads()"))
    try:
        return sweep("threads", "extra idle threads", xs, idle.resize, timed, plan)
    finally:
        for s in timed:
            s.close()
        idle.resize(0)


def sockets(xs: Sequence[int], plan: Plan) -> Sweep:
    """Ours direct and through psutil, the peer's default, psutil.net_connections()."""
    timed = ours(configs.sockets())
    timed.append(subjects.peer("peer_default", None, "SystemMetricsInstrumentor()"))
    timed.append(
        subjects.bare("net_connections", subjects.net_connections, "psutil.net_connections('inet')")
    )
    held = crowds.LoopbackSockets()
    try:
        return sweep("sockets", "loopback sockets", xs, held.resize, timed, plan)
    finally:
        for s in timed:
            s.close()
        held.close()
