"""Cost against the number of threads (per-thread on) and of enabled metrics.

Both sweeps use the same interleaved, paused timing as the main run, one sweep
point at a time (the thread count belongs to the whole process).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics.export import MetricsData

import configs
import subjects
import timing
from opentelemetry.instrumentation.process import ProcessMetricsOptions


def threads(
    counts: list[int], rounds: int, pause: float, idle: subjects.IdleThreads
) -> dict[str, Any]:
    """default against default + per_thread, at each count of extra idle threads."""
    before = len(idle)
    rows = []
    live = [
        subjects.ours("default", ProcessMetricsOptions()),
        subjects.ours("per_thread", ProcessMetricsOptions(per_thread=True)),
    ]
    try:
        for n in counts:
            idle.resize(n)
            for s in live:
                s.measure_shape()
            samples = timing.interleaved(live, rounds, pause, warmup_rounds=1, budget=120)
            row: dict[str, Any] = {"extra_threads": n}
            for s in live:
                st = timing.stat(samples.values[s.name])
                row[s.name] = {"median": st.median, "mad": st.mad, "points": s.points}
            rows.append(row)
    finally:
        for s in live:
            s.close()
        idle.resize(before)
    return {"rows": rows, "max_thread_series": ProcessMetricsOptions().max_thread_series}


def metrics(ks: list[int], rounds: int, pause: float) -> dict[str, Any]:
    """The first k metrics of the table (no options, no exact-only), and their SDK floor."""
    order = configs.scaling_order()
    ks = sorted({min(k, len(order)) for k in ks})
    live: list[subjects.Subject] = []
    try:
        for k in ks:
            s = subjects.ours(f"k={k}", configs.only(order[:k]), f"first {k} metrics")
            s.measure_shape()
            assert s.reader is not None
            data = s.reader.get_metrics_data()
            assert isinstance(data, MetricsData)
            floor = subjects.floor_like(f"floor k={k}", data, "its SDK floor")
            floor.measure_shape()
            live += [s, floor]
        samples = timing.interleaved(live, rounds, pause, warmup_rounds=1, budget=180)
        rows = []
        for i, k in enumerate(ks):
            s, floor = live[2 * i], live[2 * i + 1]
            assert s.live is not None
            ours_st = timing.stat(samples.values[s.name])
            floor_st = timing.stat(samples.values[floor.name])
            rows.append(
                {
                    "k": k,
                    "added": order[k - 1],
                    "sources": len(s.live.cache.sources),
                    "points": s.points,
                    "median": ours_st.median,
                    "mad": ours_st.mad,
                    "floor": floor_st.median,
                }
            )
    finally:
        for s in live:
            s.close()
    return {"rows": rows, "order": order}
