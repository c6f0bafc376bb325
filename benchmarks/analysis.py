"""Goals, ratios and count checks, from one run's typed results.

``report`` only formats what is computed here, so the docs page and
results/summary.md always agree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import configs
import timing
from counts import Count
from scaling import Sweep
from subjects import Shape

# Files that psutil's own calls read a second time when direct reads are off:
# net_connections() lists every process's fds (ours too), swap_memory() reads
# meminfo and vmstat, which the memory and page-fault sources read as well, and
# num_threads() reads status, which signals_pending (no psutil API) reads too, and
# memory_full_info() (PSS and USS) reads statm again for the RSS it also returns.
PSUTIL_REREADS = frozenset(
    {"/proc/self/fd", "/proc/meminfo", "/proc/vmstat", "/proc/self/status", "/proc/self/statm"}
)


@dataclass
class MainRun:
    """The interleaved main run, reduced."""

    samples: timing.Samples
    stats: dict[str, timing.Stat]
    shapes: dict[str, Shape]
    groups: dict[str, str]
    descriptions: dict[str, str]
    refresh: dict[str, tuple[float, float]]
    """Median refresh (wall, CPU) seconds that each of ours reported in its own metrics."""
    back_to_back: dict[str, timing.Stat] = field(default_factory=dict)


@dataclass(frozen=True)
class Goal:
    what: str
    required: str
    measured: str
    met: bool | None
    """None: a figure to report, without a target."""
    sure: bool = True
    """Whether the whole 95% interval is on the same side of the target."""


def paired(
    run: MainRun, names: Sequence[str], fn: Callable[[Mapping[str, float]], float]
) -> timing.Estimate:
    return timing.bootstrap({n: run.samples.values[n] for n in names}, fn)


def ratio(run: MainRun, a: str, b: str) -> timing.Estimate:
    """``a / b`` in the main run, paired by rounds."""
    return paired(run, [a, b], lambda m: m[a] / m[b])


def across(
    sweep: Sweep, cols: Mapping[str, tuple[int, str]], fn: Callable[[Mapping[str, float]], float]
) -> timing.Estimate:
    """``fn`` over subjects at (maybe different) sweep points, resampled independently."""
    columns = {k: sweep.at(x).values[name] for k, (x, name) in cols.items()}
    return timing.bootstrap(columns, fn, paired=False)


def within(
    sweep: Sweep, x: int, names: Sequence[str], fn: Callable[[Mapping[str, float]], float]
) -> timing.Estimate:
    """``fn`` over subjects at one sweep point, paired by rounds."""
    return timing.bootstrap({n: sweep.at(x).values[n] for n in names}, fn)


def fmt(e: timing.Estimate, unit: str = "x", digits: int = 2) -> str:
    return f"{e.value:.{digits}f}{unit} [{e.low:.{digits}f}, {e.high:.{digits}f}]"


def _target(
    what: str, e: timing.Estimate, limit: float, *, at_least: bool, unit: str, measured: str
) -> Goal:
    if at_least:
        met, sure = e.value >= limit, e.low >= limit or e.high < limit
    else:
        met, sure = e.value <= limit, e.high <= limit or e.low > limit
    sign = ">=" if at_least else "<="
    return Goal(what, f"{sign} {limit:g}{unit}", measured, met, sure)


def goal_x(sweep: Sweep, wanted: int) -> int:
    """The sweep point a goal names, or the largest one the run had (smoke runs)."""
    xs = [p.x for p in sweep.points]
    return wanted if wanted in xs else max(xs)


def per_thread_slope(threads: Sweep) -> tuple[int, timing.Estimate]:
    """µs that per_thread (capped at 10 series) adds per extra idle thread, 0 to 500.

    The slope of (per_thread_cap10 - per_thread_off), as the issue measured it:
    what the per-thread metric itself costs per thread, without what every
    collection of the default pays per thread anyway.
    """
    x = goal_x(threads, 500)
    cols = {
        "on0": (0, "per_thread_cap10"), "off0": (0, "per_thread_off"),
        "on1": (x, "per_thread_cap10"), "off1": (x, "per_thread_off"),
    }  # fmt: skip
    return x, across(
        threads, cols, lambda m: (m["on1"] - m["off1"] - m["on0"] + m["off0"]) / x * 1e6
    )


def slope(sweep: Sweep, name: str, x: int) -> timing.Estimate:
    """µs per unit of the sweep's axis that ``name`` grows from the first point to ``x``."""
    x0 = sweep.points[0].x
    cols = {"a": (x0, name), "b": (x, name)}
    return across(sweep, cols, lambda m: (m["b"] - m["a"]) / (x - x0) * 1e6)


def thread_goal(threads: Sweep) -> Goal:
    x, added = per_thread_slope(threads)
    whole = slope(threads, "per_thread_cap10", x)
    off = slope(threads, "per_thread_off", x)
    return _target(
        f"Cost per extra idle thread of per_thread with max_thread_series=10, 0 to {x} threads",
        added, 3.0, at_least=False, unit=" µs",
        measured=f"{fmt(added, ' µs')}; the whole collection grows {fmt(whole, ' µs')} per "
        f"thread, and {fmt(off, ' µs')} with per_thread off",
    )  # fmt: skip


@dataclass(frozen=True)
class Split:
    """per_thread with the default cap at N idle threads, against none: where the growth goes."""

    x: int
    ratio: timing.Estimate
    total_us: timing.Estimate
    reading_us: timing.Estimate
    """Growth of (collection - its SDK floor): reading, ranking, building observations."""
    sdk_us: timing.Estimate
    """Growth of the SDK floor: the SDK's own cost of the extra series."""
    points: tuple[int, int]


def thread_split(threads: Sweep) -> Split:
    x = goal_x(threads, 500)
    cols = {
        "t0": (0, "per_thread"),
        "f0": (0, "floor_per_thread"),
        "t1": (x, "per_thread"),
        "f1": (x, "floor_per_thread"),
    }
    points = (threads.at(0).shapes["per_thread"].points, threads.at(x).shapes["per_thread"].points)
    return Split(
        x=x,
        ratio=across(threads, cols, lambda m: m["t1"] / m["t0"]),
        total_us=across(threads, cols, lambda m: (m["t1"] - m["t0"]) * 1e6),
        reading_us=across(threads, cols, lambda m: (m["t1"] - m["f1"] - m["t0"] + m["f0"]) * 1e6),
        sdk_us=across(threads, cols, lambda m: (m["f1"] - m["f0"]) * 1e6),
        points=points,
    )


def split_goal(split: Split) -> Goal:
    extra = split.points[1] - split.points[0]
    return Goal(
        f"{split.x} idle threads with per_thread and the default cap, against none",
        "report, splitting reading from the SDK's per-point cost",
        f"{fmt(split.ratio)}: {fmt_us(split.total_us)}, of which reading and ranking "
        f"{fmt_us(split.reading_us)} and the SDK's {extra} extra points {fmt_us(split.sdk_us)}",
        None,
    )


def fmt_us(e: timing.Estimate) -> str:
    return f"{e.value:+,.0f} µs [{e.low:+,.0f}, {e.high:+,.0f}]"


def connection_ratio(sockets: Sweep, x: int) -> timing.Estimate:
    """psutil.net_connections() against our connection count beyond its SDK floor."""
    names = ["net_connections", "connections", "floor_connections"]
    return within(
        sockets,
        x,
        names,
        lambda m: m["net_connections"] / (m["connections"] - m["floor_connections"]),
    )


def psutil_path_ratio(sockets: Sweep, x: int) -> timing.Estimate:
    """Ours through psutil (direct_reads=False) against ours direct, both beyond the floor."""
    a, b, f = "connections_psutil", "connections", "floor_connections"
    return within(sockets, x, [a, b, f], lambda m: (m[a] - m[f]) / (m[b] - m[f]))


def connection_goal(sockets: Sweep) -> Goal:
    e = connection_ratio(sockets, 0)
    return _target(
        "Connection count (ours beyond its SDK floor) against psutil.net_connections(), "
        "no extra sockets",
        e,
        10.0,
        at_least=True,
        unit="x",
        measured=f"{fmt(e)} cheaper",
    )


def peer_default_goal(run: MainRun) -> Goal:
    e = ratio(run, "peer_default", "peer_default_set")
    pts = (run.shapes["peer_default_set"].points, run.shapes["peer_default"].points)
    return _target(
        "The peer's default set under our names (connections included) against the peer's default",
        e,
        3.0,
        at_least=True,
        unit="x",
        measured=f"{fmt(e)} faster ({pts[0]} points against {pts[1]})",
    )


def twice_problems(counts: Sequence[Count]) -> dict[str, dict[str, float]]:
    """Ours: files opened twice in one collection, beyond what psutil itself rereads."""
    found: dict[str, dict[str, float]] = {}
    for c in counts:
        if c.group != "ours":
            continue
        allowed = PSUTIL_REREADS if c.subject in configs.DIRECT_OFF else frozenset()
        twice = {**c.twice, **(c.strace_twice or {})}
        extra = {p: n for p, n in twice.items() if p not in allowed}
        if extra:
            found[c.subject] = extra
    return found


def opens_goal(counts: Sequence[Count]) -> Goal:
    ours = [c for c in counts if c.group == "ours"]
    bad = twice_problems(counts)
    direct = [c.subject for c in ours if c.subject not in configs.DIRECT_OFF]
    measured = (
        f"{len(direct) - len(bad)} of {len(direct)} configurations with direct reads on "
        "open each file once "
        f"(audit hook{' and strace' if any(c.strace_opens is not None for c in ours) else ''})"
    )
    if bad:
        measured += f"; twice: {bad}"
    return Goal(
        "Opens per collection in every configuration", "each distinct file once", measured, not bad
    )


def goals(run: MainRun, threads: Sweep, sockets: Sweep, counts: Sequence[Count]) -> list[Goal]:
    return [
        thread_goal(threads),
        split_goal(thread_split(threads)),
        connection_goal(sockets),
        peer_default_goal(run),
        opens_goal(counts),
    ]


@dataclass(frozen=True)
class Check:
    """A deterministic check of the counts: what it asserts, what was measured."""

    what: str
    measured: str
    ok: bool


def checks(counts: Sequence[Count]) -> list[Check]:
    """What the smoke run asserts: exact counts, safe on any machine."""
    by = {c.subject: c for c in counts}
    quiet = [c for c in counts if c.group == "ours" and c.subject not in configs.FREQUENCY_ON]
    noisy = {c.subject: c.frequency_reads for c in quiet if c.frequency_reads}
    default = by["default"]
    calls = sum(default.psutil_calls.values())
    bad = twice_problems(counts)
    ours = [c for c in counts if c.group == "ours"]
    return [
        Check(
            f"no file opened twice in one collection ({len(ours)} configurations; with "
            "direct_reads=False only psutil's own rereads)",
            f"{len(ours) - len(bad)} of {len(ours)} clean" + (f"; twice: {bad}" if bad else ""),
            not bad,
        ),
        Check(
            f"no frequency read with frequency off ({len(quiet)} configurations)",
            f"{sum(noisy.values())} reads" + (f": {noisy}" if noisy else ""),
            not noisy,
        ),
        Check(
            "the default calls each psutil function once",
            f"{calls} calls, {len(default.psutil_calls)} distinct",
            calls == len(default.psutil_calls),
        ),
    ]


@dataclass(frozen=True)
class Breakdown:
    """Where one collection of ours goes, from the public side (medians in seconds).

    ``total`` is the timed collection, ``floor`` its SDK floor, ``refresh`` and
    ``refresh_cpu`` the package's own ``process_metrics.refresh.duration`` and
    ``.cpu_time`` read from each timed collection, ``bare`` the same OS reads in a
    plain function (None where not measured): ``total - floor - refresh`` builds
    observations.
    """

    name: str
    total: float
    floor: float
    refresh: float | None
    refresh_cpu: float | None
    bare: float | None

    @property
    def observe(self) -> float | None:
        return None if self.refresh is None else self.total - self.floor - self.refresh


def breakdown(run: MainRun, name: str, bare: str | None) -> Breakdown:
    wall, cpu = run.refresh.get(name, (None, None))
    total, floor = run.stats[name].median, run.stats[f"floor_{name}"].median
    return Breakdown(name, total, floor, wall, cpu, run.stats[bare].median if bare else None)
