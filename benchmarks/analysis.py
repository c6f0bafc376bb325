"""Figures and verdicts from one run's raw samples and counts.

``analyse`` turns them into JSON-able numbers; ``report`` only formats those, so
the docs page and results/summary.md always agree.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import configs
import timing

OURS_ORDER = list(configs.ours())
LEAK_LIMIT = 16 * 1024
"""Bytes of traced growth allowed between the first and last checkpoint: under one byte
per collection over 20,000, where a leak of one small object each time shows ~1 MB."""

TARGETS = {
    "default_vs_peer": 5.0,
    "process_vs_peer": 1.1,
    "beyond_floor_vs_bare": 1.25,
    "opens_default": 9,  # 6 files, and the 3 pressure stall files where the kernel has them
}


def analyse(
    *,
    info: dict[str, Any],
    shapes: dict[str, dict[str, Any]],
    main_run: timing.Samples,
    b2b: timing.Samples,
    counts: dict[str, Any],
    fresh: dict[str, bool],
    parts: dict[str, Any],
    cpu_host: dict[str, Any],
    cpu_synth: dict[str, Any],
    threads: dict[str, Any],
    metric_sweep: dict[str, Any],
    rss: dict[str, Any],
    leaks: list[dict[str, Any]],
    resamples: int,
) -> dict[str, Any]:
    values = main_run.values
    stats = {k: timing.stat(v).__dict__ for k, v in values.items() if v}
    b2b_stats = {k: timing.stat(v).__dict__ for k, v in b2b.values.items() if v}

    def boot(names: Sequence[str], fn: Callable[[Mapping[str, float]], float]) -> dict[str, float]:
        e = timing.bootstrap(values, names, fn, resamples=resamples)
        return {"value": e.value, "low": e.low, "high": e.high}

    def ratio(a: str, b: str) -> dict[str, float]:
        return boot([a, b], lambda m: m[a] / m[b])

    def beyond(ours: str, floor: str, ref: str) -> dict[str, float]:
        return boot([ours, floor, ref], lambda m: (m[ours] - m[floor]) / m[ref])

    def difference(a: str, b: str) -> dict[str, float]:
        return boot([a, b], lambda m: m[a] - m[b])

    def over_sum(a: str, b: str, c: str) -> dict[str, float]:
        return boot([a, b, c], lambda m: m[a] / (m[b] + m[c]))

    ratios = {
        ours: {
            "peer_default": ratio("peer_default", ours),
            "peer_process": ratio("peer_process", ours),
            "prometheus_client": ratio("prometheus_client", ours),
            "floor_default": ratio(ours, "floor_default"),
        }
        for ours in OURS_ORDER
    }
    overhead: dict[str, Any] = {}
    for name in ("process_set", "default"):
        floor, bare = f"floor_{name}", f"bare_{name}"
        row = {
            "beyond_floor_vs_bare": beyond(name, floor, bare),
            "beyond_floor_us": difference(name, floor),
        }
        kernel = f"kernel_{name}"
        if kernel in values:
            row["beyond_floor_vs_kernel"] = beyond(name, floor, kernel)
            row["bare_vs_kernel"] = ratio(bare, kernel)
            row["bare_vs_procfs"] = ratio(bare, f"procfs_{name}")
        overhead[name] = row
    peer_for = {"process_set": "peer_process", "default": "peer_default"}
    bounds: dict[str, Any] = {}
    for name, peer in peer_for.items():
        floor, bare, kernel = f"floor_{name}", f"bare_{name}", f"kernel_{name}"
        rows = {
            "measured": ratio(peer, name),
            "psutil_bound": over_sum(peer, floor, bare),
            "floor_only": ratio(peer, floor),
        }
        if kernel in values:
            rows["procfs_bound"] = over_sum(peer, floor, f"procfs_{name}")
            rows["kernel_bound"] = over_sum(peer, floor, kernel)
        bounds[name] = rows
    return {
        "info": info,
        "shapes": shapes,
        "stats": stats,
        "rounds": main_run.rounds,
        "min_gap_s": main_run.min_gap,
        "stopped_early": main_run.stopped_early,
        "back_to_back": b2b_stats,
        "ratios": ratios,
        "overhead": overhead,
        "bounds": bounds,
        "frequency": {
            "everything": ratio("everything", "everything_but_frequency"),
            "cpu_with_frequency": ratio("cpu_with_frequency", "cpu_usage_only"),
            "delta_everything_us": boot(
                ["everything", "everything_but_frequency"],
                lambda m: m["everything"] - m["everything_but_frequency"],
            ),
            "delta_cpu_us": boot(
                ["cpu_with_frequency", "cpu_usage_only"],
                lambda m: m["cpu_with_frequency"] - m["cpu_usage_only"],
            ),
        },
        "counts": counts,
        "kernel_fresh": fresh,
        "breakdown": parts,
        "cpu_host": cpu_host,
        "cpu_synthetic": cpu_synth,
        "threads": threads,
        "metric_sweep": metric_sweep,
        "rss": rss,
        "leaks": [{**x, "verdict": leak_verdict(x)} for x in leaks],
    }


def leak_verdict(leak: dict[str, Any]) -> dict[str, Any]:
    points = leak["checkpoints"]
    if len(points) < 2:
        return {"growth": 0, "ok": True}
    growth = points[-1][1] - points[0][1]
    return {
        "growth": growth,
        "per_collection": growth / max(1, points[-1][0] - points[0][0]),
        "ok": abs(growth) < LEAK_LIMIT,
    }


def opens_of(results: dict[str, Any], name: str) -> tuple[float, str]:
    """Opens per collection: strace's count when it ran, else the audit hook's."""
    st = results["counts"].get("strace")
    if st and name in st:
        return st[name]["opens"], "strace"
    return float(min(results["counts"]["audit"][name]["opens"])), "audit hook"


def _ratio_row(
    target: str, ratio: dict[str, Any], limit: float, *, at_least: bool, measured: str
) -> dict[str, Any]:
    """A target on a ratio with a confidence interval: met, by how much, and whether surely."""
    value, low, high = ratio["value"], ratio["low"], ratio["high"]
    if at_least:
        met, by, sure = value >= limit, value / limit, low >= limit or high < limit
    else:
        met, by, sure = value <= limit, limit / value, high <= limit or low > limit
    return {
        "target": target,
        "required": f"{'>=' if at_least else '<='} {limit:g}x",
        "measured": measured,
        "met": met,
        "by": by,
        "sure": sure,
    }


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    r, o = results["ratios"], results["overhead"]
    shapes = results["shapes"]
    rows = []
    d = r["default"]["peer_default"]
    rows.append(
        _ratio_row(
            "Default against default: ours faster than the peer's",
            d,
            TARGETS["default_vs_peer"],
            at_least=True,
            measured=f"{fmt_ratio(d)} ({shapes['default']['points']} points against "
            f"{shapes['peer_default']['points']})",
        )
    )
    p = r["process_set"]["peer_process"]
    rows.append(
        _ratio_row(
            "Equivalent process set: ours faster than the peer's",
            p,
            TARGETS["process_vs_peer"],
            at_least=True,
            measured=f"{fmt_ratio(p, 3)} ({shapes['process_set']['points']} points against "
            f"{shapes['peer_process']['points']})",
        )
    )
    b = o["process_set"]["beyond_floor_vs_bare"]
    rows.append(
        _ratio_row(
            "Process set: (ours - SDK floor) against the bare psutil reads",
            b,
            TARGETS["beyond_floor_vs_bare"],
            at_least=False,
            measured=fmt_ratio(b),
        )
    )
    opens, how = opens_of(results, "default")
    distinct = results["counts"]["audit"]["default"]["distinct_paths"]
    peer_d, _ = opens_of(results, "peer_default")
    peer_p, _ = opens_of(results, "peer_process")
    rows.append(
        {
            "target": "Opens per collection, default (no more than distinct sources)",
            "required": f"<= {TARGETS['opens_default']} and <= distinct files",
            "measured": f"{opens:g} opens of {distinct} distinct files ({how}); the peer: "
            f"{peer_d:g} (default), {peer_p:g} (process set)",
            "met": opens <= min(TARGETS["opens_default"], distinct),
            "by": None,
        }
    )
    off = {
        name: max(results["counts"]["audit"][name]["frequency_reads"])
        for name in OURS_ORDER
        if name not in configs.FREQUENCY_ON
    }
    st = results["counts"].get("strace") or {}
    off_strace = {n: st[n]["frequency_reads"] for n in off if n in st}
    worst = max([*off.values(), *off_strace.values()])
    rows.append(
        {
            "target": "Frequency reads per collection with frequency off",
            "required": "0",
            "measured": f"{worst:g} in every configuration with frequency off "
            f"({len(off)} configurations)",
            "met": worst == 0,
            "by": None,
        }
    )
    return rows


@dataclass(frozen=True)
class Check:
    """One deterministic check of the counts: what it asserts, what was measured."""

    what: str
    measured: str
    ok: bool


def count_checks(results: dict[str, Any]) -> list[Check]:
    """Deterministic checks, safe on any machine (CI runs them in smoke mode)."""
    audit = results["counts"]["audit"]
    quiet = [n for n in OURS_ORDER if n not in configs.FREQUENCY_ON]
    reads = {n: max(audit[n]["frequency_reads"]) for n in quiet}
    noisy = {n: r for n, r in reads.items() if r}
    checks = [
        Check(
            f"frequency reads with frequency off ({len(quiet)} configurations)",
            f"{sum(reads.values())} reads" + (f": {noisy}" if noisy else ""),
            not noisy,
        )
    ]
    default = audit["default"]
    calls = max(default["psutil_calls"])
    checks.append(
        Check(
            "psutil calls of the default configuration: each distinct call once",
            f"{calls} calls, {default['psutil_distinct']} distinct",
            calls == default["psutil_distinct"],
        )
    )
    if sys.platform.startswith("linux"):
        opens = max(default["opens"])
        checks.append(
            Check(
                f"files opened by one default collection: at most {TARGETS['opens_default']}",
                f"{opens} opens",
                opens <= TARGETS["opens_default"],
            )
        )
        stale = sorted(name for name, ok in results["kernel_fresh"].items() if not ok)
        checks.append(
            Check(
                "os.pread at offset 0 returns fresh content",
                f"{len(results['kernel_fresh']) - len(stale)} of {len(results['kernel_fresh'])}"
                " readers fresh" + (f"; stale: {stale}" if stale else ""),
                not stale,
            )
        )
    return checks


def check_counts(results: dict[str, Any]) -> list[str]:
    """The failed checks, one line each."""
    return [f"{c.what}: {c.measured}" for c in count_checks(results) if not c.ok]


def fmt_ratio(e: Mapping[str, float] | None, digits: int = 2) -> str:
    """A ratio and its 95% interval, or n/a."""
    if e is None:
        return "n/a"
    return f"{e['value']:.{digits}f}x [{e['low']:.{digits}f}, {e['high']:.{digits}f}]"
