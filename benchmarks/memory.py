"""Memory: the RSS that import + instrument() add, and tracemalloc growth over many collections.

Each measurement runs in a fresh child process, so that nothing the harness
imported is counted:

    python benchmarks/memory.py rss MODE        # JSON: RSS after each step
    python benchmarks/memory.py leak CONFIG N   # JSON: tracemalloc checkpoints
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RSS_MODES = ("sdk", "ours_default", "ours_everything", "peer_default")
LEAK_LIMIT = 16 * 1024
"""Traced growth allowed from the first to the last checkpoint: under one byte per
collection over 20,000, where a leak of one small object each time shows ~1 MB."""


@dataclass(frozen=True)
class Rss:
    """Median RSS (bytes) of fresh children: with the bare SDK, then what each step adds."""

    mode: str
    sdk: float
    import_added: float
    instrument_added: float


@dataclass(frozen=True)
class Leak:
    config: str
    collections: int
    checkpoints: list[int]
    """Traced bytes above the baseline at each tenth of the collections."""

    @property
    def growth(self) -> int:
        return self.checkpoints[-1] - self.checkpoints[0] if self.checkpoints else 0

    @property
    def ok(self) -> bool:
        return abs(self.growth) < LEAK_LIMIT


def _rss() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _instrument(mode: str, provider: Any) -> None:
    if mode.startswith("ours"):
        from opentelemetry.instrumentation.process import ProcessMetrics, ProcessMetricsOptions

        everything = {"include": ("*", "system.network.connection.count"), "per_thread": True}
        kwargs: dict[str, Any] = everything if mode == "ours_everything" else {}
        ProcessMetrics(ProcessMetricsOptions(**kwargs), meter_provider=provider)
    elif mode == "peer_default":
        os.environ.pop("OTEL_PYTHON_SYSTEM_METRICS_EXCLUDED_METRICS", None)
        from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor

        SystemMetricsInstrumentor().instrument(meter_provider=provider)


def rss_child(mode: str) -> dict[str, int]:
    """RSS with the SDK and one reader, after the import, after instrumenting and 3 collections."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    reader.get_metrics_data()
    gc.collect()
    steps = {"sdk": _rss()}
    if mode.startswith("ours"):
        import opentelemetry.instrumentation.process
    elif mode.startswith("peer"):
        import opentelemetry.instrumentation.system_metrics  # noqa: F401
    steps["import"] = _rss()
    _instrument(mode, provider)
    for _ in range(3):
        reader.get_metrics_data()
    gc.collect()
    steps["instrumented"] = _rss()
    return steps


def leak_child(config: str, n: int) -> dict[str, Any]:
    """tracemalloc's traced size at each tenth of ``n`` collections of one configuration."""
    sys.path.insert(0, str(HERE))
    import configs
    import subjects

    options, text = {**configs.main(), **configs.threads()}[config]
    subject = subjects.ours(config, options, text)
    tracemalloc.start(1)
    for _ in range(max(100, n // 100)):  # warm-up: SDK storage, interned attribute sets
        subject.collect()
    step = max(1, n // 10)
    marks = array.array("q", [0] * (n // step))  # allocated before the baseline
    gc.collect()
    base = tracemalloc.get_traced_memory()[0]
    for i in range(1, n + 1):
        subject.collect()
        if i % step == 0:
            gc.collect()
            marks[i // step - 1] = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    return {"config": config, "collections": n, "checkpoints": list(marks)}


def _child(args: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(HERE / "memory.py"), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=900,
    )
    found: dict[str, Any] = json.loads(out.stdout)
    return found


def rss(repeats: int) -> list[Rss]:
    found = []
    for mode in RSS_MODES:
        runs = [_child(["rss", mode]) for _ in range(repeats)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        found.append(
            Rss(mode, med["sdk"], med["import"] - med["sdk"], med["instrumented"] - med["import"])
        )
    return found


def leaks(runs: list[tuple[str, int]]) -> list[Leak]:
    """The leak children, two at a time (nothing is timed meanwhile)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        found = pool.map(lambda r: _child(["leak", r[0], str(r[1])]), runs)
        return [Leak(**x) for x in found]


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
