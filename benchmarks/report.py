"""Markdown from one run's results: the tables, the docs page, the smoke report."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import analysis
import configs
import instructions
from analysis import Breakdown, Check, Goal, MainRun
from components import Component
from counts import Count
from latency import Lateness
from machine import counted_on, cpu
from memory import Leak, Rss
from scaling import Sweep
from subjects import Shape
from timing import Stat

THREAD_COLUMNS = ["per_thread_off", "per_thread_cap10", "per_thread", "peer_default"]
THREAD_COLUMNS += ["psutil_threads"]
SOCKET_COLUMNS = ["connections", "connections_psutil", "peer_default_set", "peer_default"]
SOCKET_COLUMNS += ["net_connections"]
CPU_COLUMNS = ("cpu_total", "cpu_per_cpu", "cpu_frequency", "peer_cpu")


@dataclass
class Results:
    info: dict[str, Any]
    main: MainRun
    threads: Sweep
    sockets: Sweep
    cpus: Sweep
    latency: list[Lateness]
    counts: list[Count]
    rss: list[Rss]
    leaks: list[Leak]
    components: list[Component]
    instructions: dict[str, Any] = field(default_factory=dict)
    goals: list[Goal] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    breakdowns: list[Breakdown] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)


def us(seconds: float | None) -> str:
    if seconds is None:
        return ""
    value = seconds * 1e6
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.1f}"


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def machine(info: dict[str, Any], run: MainRun) -> str:
    cpu_name = cpu(info)
    pause = f"{run.samples.rounds} interleaved rounds, {info['pause_ms']:g} ms pause before each"
    gap = f"shortest gap between two collections of one subject {run.samples.min_gap:.2f} s"
    rows = [
        ["CPU", cpu_name],
        ["CPUs", f"{info['logical_cpus']} logical, {info['physical_cores']} cores"],
        ["Memory", f"{info['memory_gib']} GiB"],
        ["OS", f"{info['os']}, kernel {info['kernel']}"],
        ["TCP established hash", f"{info['tcp_ehash_entries']:,} buckets"],
        ["Python", info["python"]],
        *[[k, v] for k, v in info["versions"].items()],
        ["Load average at start / end", f"{_load(info, 'start')} / {_load(info, 'end')}"],
        ["Run", f"{info['date']}, {info['mode']}, {info['duration_s']} s, `{info['argv']}`"],
        ["Main run", f"{pause} collection; {gap}"],
    ]
    return table(["", ""], rows)


def _load(info: dict[str, Any], when: str) -> str:
    values = info.get(f"loadavg_{when}")
    return ", ".join(f"{x:.2f}" for x in values) if values else "n/a"


def goals(rows: Sequence[Goal]) -> str:
    return table(
        ["Goal", "Required", "Measured", "Verdict"],
        [[g.what, g.required, g.measured, verdict(g)] for g in rows],
    )


def verdict(g: Goal) -> str:
    if g.met is None:
        return "reported"
    word = "**met**" if g.met else "**missed**"
    return word if g.sure else f"{word} (the 95% interval straddles the target)"


def main_table(run: MainRun) -> str:
    rows = []
    for name in sorted(run.stats, key=lambda n: (_order(run.groups[n]), run.stats[n].median)):
        st, shape = run.stats[name], run.shapes[name]
        points = [shape.instruments or "", shape.points or ""]
        what = run.descriptions[name]
        rows.append([f"`{name}`", run.groups[name], what, *points, us(st.median), us(st.mad)])
    return table(["Subject", "Group", "What", "Instruments", "Points", "µs", "±"], rows)


def _order(group: str) -> int:
    return ["ours", "peer", "floor", "bare"].index(group)


def ratios(run: MainRun) -> str:
    rows = []
    for n in [n for n, g in run.groups.items() if g == "ours"]:
        floor = f"floor_{n}"
        against = [analysis.fmt(analysis.ratio(run, peer, n)) for peer in configs.PEERS]
        own = analysis.fmt(analysis.ratio(run, n, floor)) if floor in run.stats else ""
        rows.append([f"`{n}`", us(run.stats[n].median), *against, own])
    header = ["Ours", "µs", *[f"{p} / ours" for p in configs.PEERS], "ours / its SDK floor"]
    return table(header, rows)


def breakdowns(rows: Sequence[Breakdown]) -> str:
    out = []
    for b in rows:
        refresh = [us(b.refresh), us(b.refresh_cpu), us(b.bare), us(b.observe)]
        out.append([f"`{b.name}`", us(b.total), us(b.floor), us(b.total - b.floor), *refresh])
    header = ["Configuration", "Collection µs", "SDK floor µs", "Beyond the floor µs"]
    header += ["Refresh, wall µs", "Refresh, CPU µs", "Bare reads µs", "The rest µs"]
    return table(header, out)


def sweep_table(s: Sweep, names: Sequence[str]) -> str:
    """µs per collection of ``names`` (and each one's floor) at every point, with points.

    One row per subject and one column per point, so that the table fits the page.
    """
    cols = [n for n in names if n in s.groups]
    cols += [f"floor_{n}" for n in cols if f"floor_{n}" in s.groups]
    rows = [[f"`{n}`", *[_cell(p.stats.get(n), p.shapes.get(n)) for p in s.points]] for n in cols]
    return table([f"µs (points) at {s.axis}:", *[f"{p.x:,}" for p in s.points]], rows)


def _cell(st: Stat | None, shape: Shape | None) -> str:
    if st is None:
        return ""
    return f"{us(st.median)} ({shape.points})" if shape and shape.points else us(st.median)


def connection_ratios(sockets: Sweep) -> str:
    rows = []
    for p in sockets.points:
        bare = analysis.connection_ratio(sockets, p.x)
        via = analysis.psutil_path_ratio(sockets, p.x)
        rows.append([f"{p.x:,}", analysis.fmt(bare), analysis.fmt(via)])
    header = [
        "Loopback sockets",
        "psutil.net_connections() / ours beyond its floor",
        "ours with direct_reads=False / ours, both beyond the floor",
    ]
    return table(header, rows)


def latency(rows: Sequence[Lateness]) -> str:
    header = ["Collecting back to back", "Collections", "Wake-ups", "p50 ms", "p99 ms", "max ms"]
    out = []
    for r in rows:
        late = [f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.max_ms:.2f}"]
        name = r.config if r.config == "no collections" else f"`{r.config}`"
        out.append([name, r.collections, r.wakeups, *late])
    return table(header, out)


def counts(rows: Sequence[Count]) -> str:
    out = []
    for c in rows:
        calls = f"{sum(c.psutil_calls.values())} ({len(c.psutil_calls)} distinct)"
        strace = "n/a" if c.strace_opens is None else f"{c.strace_opens:g}"
        twice = {**c.twice, **(c.strace_twice or {})}
        listed = ", ".join(f"`{p}` x{n:g}" for p, n in twice.items()) or "none"
        counted = [c.opens, strace, len(c.paths), calls, c.frequency_reads, listed]
        out.append([f"`{c.subject}`", c.group, *counted])
    header = ["Subject", "Group", "Opens (audit hook)", "Opens (strace)", "Distinct files"]
    return table([*header, "psutil calls", "Frequency reads", "Opened twice"], out)


def paths(rows: Sequence[Count], name: str) -> str:
    c = next(x for x in rows if x.subject == name)
    body = table(["Path", "Opens"], [[f"`{p}`", n] for p, n in c.paths.items()])
    calls = ", ".join(f"`{k}` x{v}" for k, v in c.psutil_calls.items()) or "none"
    return f"{body}\n\npsutil calls: {calls}."


def back_to_back(run: MainRun) -> str:
    rows = []
    for n, b in run.back_to_back.items():
        paused = run.stats[n].median
        rows.append([f"`{n}`", us(paused), us(b.median), f"{b.median / paused:.2f}"])
    return table(["Subject", "Paused µs", "Back-to-back µs", "Back-to-back / paused"], rows)


def rss(rows: Sequence[Rss]) -> str:
    mib = 2**20
    out = []
    for r in rows:
        added = [f"{r.import_added / mib:.2f}", f"{r.instrument_added / mib:.2f}"]
        out.append([f"`{r.mode}`", f"{r.sdk / mib:.1f}", *added])
    header = ["Child process", "RSS with the SDK, MiB", "import adds, MiB"]
    return table([*header, "instrumenting + 3 collections add, MiB"], out)


def leaks(rows: Sequence[Leak]) -> str:
    out = []
    for x in rows:
        marks = ", ".join(f"{b:+,}" for b in x.checkpoints)
        verdict = "no leak" if x.ok else "**GROWS**"
        out.append([f"`{x.config}`", f"{x.collections:,}", marks, f"{x.growth:+,} B", verdict])
    header = ["Configuration", "Collections", "Traced bytes above the baseline at each tenth"]
    return table([*header, "First to last", "Verdict"], out)


def components(rows: Sequence[Component]) -> str:
    parts = [f"### {c.title}\n\n`{c.command}`\n\n{c.markdown}" for c in rows if not c.missing]
    parts += [f"### {c.title}\n\nNot measured: {c.missing}." for c in rows if c.missing]
    return "\n\n".join(parts)


def tables(r: Results) -> dict[str, str]:
    """Every table of the docs page, by placeholder name."""
    return {
        "machine": machine(r.info, r.main),
        "goals": goals(r.goals),
        "main": main_table(r.main),
        "ratios": ratios(r.main),
        "breakdown": breakdowns(r.breakdowns),
        "threads": sweep_table(r.threads, THREAD_COLUMNS),
        "latency": latency(r.latency),
        "sockets": sweep_table(r.sockets, SOCKET_COLUMNS),
        "connection_ratios": connection_ratios(r.sockets),
        "cpus": sweep_table(r.cpus, CPU_COLUMNS),
        **count_tables(r.counts, r.info),
        "run_when": f"{r.info['date']} on {cpu(r.info)}",
        "back_to_back": back_to_back(r.main),
        "rss": rss(r.rss),
        "leaks": leaks(r.leaks),
        "components": components(r.components),
    }


def count_tables(rows: Sequence[Count], info: dict[str, Any]) -> dict[str, str]:
    """The exact counts' tables, and when and where they were counted."""
    return {
        "counts": counts(rows),
        "opens_default": paths(rows, "default"),
        "opens_everything": paths(rows, "everything"),
        "opens_everything_psutil": paths(rows, "everything_psutil"),
        "opens_peer_default": paths(rows, "peer_default"),
        "counts_when": f"{info['date']} on {counted_on(info)}",
    } | instructions.page()


def figures(r: Results) -> dict[str, str]:
    """The figures the prose quotes, by placeholder name."""
    split = analysis.thread_split(r.threads)
    x, slope = analysis.per_thread_slope(r.threads)
    late = {x.config: x for x in r.latency}
    top = r.sockets.points[-1].x
    return {
        "default_ratio": analysis.fmt(analysis.ratio(r.main, "peer_default", "default")),
        "peer_set_ratio": analysis.fmt(analysis.ratio(r.main, "peer_default", "peer_default_set")),
        "slope": analysis.fmt(slope, " µs"),
        "slope_x": f"{x:,}",
        "split_ratio": analysis.fmt(split.ratio),
        "split_reading": f"{split.reading_us.value:,.0f}",
        "split_sdk": f"{split.sdk_us.value:,.0f}",
        "split_points": f"{split.points[0]} to {split.points[1]}",
        "slope_off": analysis.fmt(analysis.slope(r.threads, "per_thread_off", x), " µs"),
        "connection_ratio": analysis.fmt(analysis.connection_ratio(r.sockets, 0)),
        "socket_ours": analysis.fmt(analysis.slope(r.sockets, "connections", top), " µs"),
        "socket_psutil": analysis.fmt(analysis.slope(r.sockets, "net_connections", top), " µs"),
        "socket_x": f"{top:,}",
        "late_on": _late(late.get("per_thread")),
        "late_off": _late(late.get("per_thread_off")),
        "late_idle": _late(late.get("no collections")),
        "ehash": f"{r.info['tcp_ehash_entries']:,}",
        **peer_set(r),
    }


def peer_set(r: Results) -> dict[str, str]:
    """What bounds ours against the peer's default, from the medians of the run."""
    st, zero = r.main.stats, r.sockets.points[0].stats
    floor = st["floor_peer_default_set"].median
    dump = zero["connections"].median - zero["floor_connections"].median
    peer = st["peer_default"].median
    return {
        "peer_set_us": us(st["peer_default_set"].median),
        "peer_us": us(peer),
        "peer_set_floor": us(floor),
        "peer_set_points": str(r.main.shapes["peer_default_set"].points),
        "connections_us": us(dump),
        "peer_set_bound": f"{peer / (floor + dump):.1f}x",
    }


def _late(x: Lateness | None) -> str:
    return "n/a" if x is None else f"{x.p99_ms:.1f} ms at p99 and {x.max_ms:.1f} ms at most"


def fill(template: str, values: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"docs template: unknown placeholder {key!r}")
        return values[key]

    return re.sub(r"\{\{(\w+)\}\}", one, template)


def summary(values: dict[str, str]) -> str:
    parts = ["# Benchmark summary", "", "Generated by `benchmarks/run.py`.", ""]
    for name, body in values.items():
        parts += [f"## {name}", "", body, ""]
    return "\n".join(parts)


def smoke(checks: Sequence[Check], rounds: int, seconds: int) -> str:
    """The smoke run's whole report: the exact counts it asserts, nothing timed."""
    lines = [
        f"Benchmark SMOKE run: every phase ran a few times ({rounds} rounds, {seconds} s); "
        "no timing is shown (`make bench` measures).",
        "Exact counts per collection, as asserted:",
    ]
    lines += [f"  {'ok  ' if c.ok else 'FAIL'} {c.what}: {c.measured}" for c in checks]
    failed = sum(not c.ok for c in checks)
    lines.append(f"Smoke run: {len(checks) - failed} of {len(checks)} count checks passed.")
    return "\n".join(lines)
