"""Memory: the RSS that import + instrument() add, and tracemalloc growth over many collections.

Each measurement runs in a fresh child process (``python benchmarks/memory.py ...``),
so that nothing imported by the harness is counted:

    python benchmarks/memory.py rss MODE           # JSON: RSS after each step
    python benchmarks/memory.py leak CONFIG N      # JSON: tracemalloc checkpoints
"""

from __future__ import annotations

import array
import gc
import json
import os
import statistics
import subprocess
import sys
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
RSS_MODES = ("sdk", "ours_default", "ours_everything", "peer_default", "peer_process")


def _rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def rss_child(mode: str) -> dict[str, int]:
    """RSS after: the SDK with one reader (the baseline), import, instrument(), one collection."""
    steps: dict[str, int] = {}
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    reader.get_metrics_data()
    gc.collect()
    steps["sdk"] = _rss()
    if mode.startswith("ours"):
        from opentelemetry.instrumentation.process import ProcessInstrumentor

        steps["import"] = _rss()
        if mode == "ours_default":
            ProcessInstrumentor().instrument(meter_provider=provider)
        else:
            ProcessInstrumentor().instrument(
                meter_provider=provider,
                include=["*", "system.network.connection.count"],
                per_thread=True,
                per_cpu=True,
                cpu_frequency=True,
            )
    elif mode.startswith("peer"):
        os.environ.pop("OTEL_PYTHON_SYSTEM_METRICS_EXCLUDED_METRICS", None)
        from opentelemetry.instrumentation.system_metrics import (
            _DEFAULT_CONFIG,
            SystemMetricsInstrumentor,
        )

        steps["import"] = _rss()
        # As subjects.peer_process_config(), which is not imported here: it would
        # import this package and count it in the peer's RSS.
        config = (
            {
                k: v
                for k, v in _DEFAULT_CONFIG.items()
                if k.startswith(("process.", "cpython.")) and not k.startswith("process.runtime.")
            }
            if mode == "peer_process"
            else None
        )
        SystemMetricsInstrumentor(config=config).instrument(meter_provider=provider)
    else:
        steps["import"] = steps["sdk"]
    gc.collect()
    steps["instrument"] = _rss()
    for _ in range(3):
        reader.get_metrics_data()
    gc.collect()
    steps["collected"] = _rss()
    return steps


def leak_child(config: str, n: int) -> dict[str, Any]:
    """tracemalloc's traced size at checkpoints over ``n`` collections of one configuration."""
    sys.path.insert(0, HERE)
    import configs
    import subjects

    idle = subjects.IdleThreads()
    idle.resize(configs.WITH_THREADS_N)
    subject = subjects.ours(config, configs.ours()[config])
    tracemalloc.start(1)  # one frame: where each block was allocated
    for _ in range(max(100, n // 100)):  # warm-up: SDK storage, interned attribute sets
        subject.collect()
    # Checkpoints go into storage allocated before the baseline: appending to a list
    # would itself show as growth.
    step = max(1, n // 10)
    marks = array.array("q", [0] * (n // step))
    gc.collect()
    first = tracemalloc.take_snapshot()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(1, n + 1):
        subject.collect()
        if i % step == 0:
            gc.collect()
            marks[i // step - 1] = tracemalloc.get_traced_memory()[0] - base
    last = tracemalloc.take_snapshot()
    tracemalloc.stop()
    checkpoints = [((j + 1) * step, marks[j]) for j in range(len(marks))]
    top = [
        {"where": str(d.traceback[0]), "size_diff": d.size_diff, "count_diff": d.count_diff}
        for d in last.compare_to(first, "lineno")[:5]
    ]
    idle.resize(0)
    return {"config": config, "collections": n, "checkpoints": checkpoints, "top": top}


def _child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "memory.py"), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def rss(repeats: int) -> dict[str, Any]:
    """Median RSS steps over ``repeats`` children per mode, and each mode's added RSS."""
    found: dict[str, Any] = {}
    for mode in RSS_MODES:
        runs = [_child(["rss", mode]) for _ in range(repeats)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        found[mode] = {
            **med,
            "import_added": med["import"] - med["sdk"],
            "added": med["collected"] - med["sdk"],
        }
    return found


def leaks(runs: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """The leak children, two at a time (nothing is being timed meanwhile)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda r: _child(["leak", r[0], str(r[1])]), runs))


def main() -> None:
    kind = sys.argv[1]
    if kind == "rss":
        print(json.dumps(rss_child(sys.argv[2])))
    elif kind == "leak":
        print(json.dumps(leak_child(sys.argv[2], int(sys.argv[3]))))
    else:
        raise SystemExit(f"unknown mode {kind!r}: rss or leak")


if __name__ == "__main__":
    main()
