"""What a fork costs with this package instrumented: fork() plus waitpid() of a child that exits.

Three long-lived worker processes, each with the same SDK set-up (a
``MeterProvider`` whose periodic reader has its export thread, and an asyncio
loop running in a thread): one without this package, one instrumented with
the defaults, one with ``event_loop=True``. Each has collected once. In each
round, each worker in turn (the order alternates) forks a child that calls
``os._exit(0)`` at once and waits for it, a few times; the round's figure is
the median. The ratios are medians of the per-round ratios, so that load on
the machine hits both sides of each.

``run.py`` runs it as a component; alone::

    python benchmarks/forks.py [ROUNDS]    # Markdown on stdout
    python benchmarks/forks.py worker NAME # one worker (reads counts on stdin)
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKERS = {
    "sdk": "the SDK alone (this package not imported)",
    "imported": "this package imported, not instrumented",
    "default": "instrumented, defaults",
    "event_loop": "instrumented, event_loop=True",
}


def _setup(name: str) -> Any:
    """The worker's process: SDK, export thread, a running loop; instrumented unless "sdk"."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        MetricExporter,
        MetricExportResult,
        PeriodicExportingMetricReader,
    )

    class Drop(MetricExporter):
        def export(self, *_args: Any, **_kwargs: Any) -> MetricExportResult:
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 0) -> bool:
            return True

        def shutdown(self, *_args: Any, **_kwargs: Any) -> None:
            return None

    reader = PeriodicExportingMetricReader(Drop(), export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader])
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    if name != "sdk":
        from opentelemetry.instrumentation.process import ProcessInstrumentor
    if name in ("default", "event_loop"):
        ProcessInstrumentor().instrument(meter_provider=provider, event_loop=name == "event_loop")
    time.sleep(0.1)  # the loop is running (and, with event_loop, monitored)
    provider.force_flush()  # one collection, as a process that has reported
    return provider


def _fork_once() -> float:
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return time.perf_counter() - t0


def worker(name: str) -> None:
    """Set up, say "ready", then for each count N read on stdin, print N fork times."""
    warnings.simplefilter("ignore", DeprecationWarning)  # forking with threads is the point
    provider = _setup(name)
    print("ready", flush=True)
    for line in sys.stdin:
        n = int(line)
        print(json.dumps([_fork_once() for _ in range(n)]), flush=True)
    provider.shutdown()


@dataclass(frozen=True)
class Forks:
    """Medians, in milliseconds, and ratios to the worker without this package."""

    rounds: int
    per_round: int
    blocks: int
    """Sets of fresh workers the rounds are spread over."""
    median_ms: dict[str, float]
    ratio: dict[str, dict[str, float]]
    """Per baseline ("sdk", "imported") and worker: the median over rounds of
    (the worker's median) / (the baseline worker's median)."""
    ratio_range: dict[str, dict[str, tuple[float, float]]]
    """The quartiles of those per-round ratios."""


def _start(name: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, str(HERE / "forks.py"), "worker", name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    if p.stdout.readline().strip() != "ready":
        raise RuntimeError(f"fork worker {name} did not start")
    return p


def _block(rounds: int, per_round: int, medians: dict[str, list[float]]) -> None:
    """One set of fresh workers, ``rounds`` interleaved rounds."""
    procs = {name: _start(name) for name in WORKERS}
    try:
        names = list(WORKERS)
        for i in range(rounds):
            for name in names if i % 2 == 0 else names[::-1]:
                p = procs[name]
                assert p.stdin is not None and p.stdout is not None
                p.stdin.write(f"{per_round}\n")
                p.stdin.flush()
                medians[name].append(statistics.median(json.loads(p.stdout.readline())))
    finally:
        for p in procs.values():
            if p.stdin is not None:
                p.stdin.close()
        for p in procs.values():
            p.wait(30)


def measure(quick: bool = False, rounds: int | None = None) -> Forks:
    """Rounds in blocks, each with fresh workers: a worker's own luck (its CPU, its
    neighbours on the machine) moved the figures by 15 % between two identical ones."""
    n_rounds = rounds or (3 if quick else 60)
    per_round = 2 if quick else 5
    blocks = 1 if quick else 6
    medians: dict[str, list[float]] = {name: [] for name in WORKERS}
    for b in range(blocks):
        _block(n_rounds // blocks + (b < n_rounds % blocks), per_round, medians)
    ratio: dict[str, dict[str, float]] = {"sdk": {}, "imported": {}}
    spread: dict[str, dict[str, tuple[float, float]]] = {"sdk": {}, "imported": {}}
    for base in ratio:
        for name in ("imported", "default", "event_loop"):
            ratios = [a / b for a, b in zip(medians[name], medians[base], strict=True)]
            q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
            ratio[base][name], spread[base][name] = statistics.median(ratios), (q[0], q[2])
    return Forks(
        rounds=n_rounds,
        per_round=per_round,
        blocks=blocks,
        median_ms={k: statistics.median(v) * 1e3 for k, v in medians.items()},
        ratio=ratio,
        ratio_range=spread,
    )


def markdown(r: Forks) -> str:
    rows = []
    for name, label in WORKERS.items():
        cells = [label, f"{r.median_ms[name]:.2f}"]
        for base in ("sdk", "imported"):
            if name == base or (base == "imported" and name == "sdk"):
                cells.append("1" if name == base else "")
                continue
            lo, hi = r.ratio_range[base][name]
            cells.append(f"**{r.ratio[base][name]:.2f}x** ({lo:.2f}-{hi:.2f})")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(
        [
            "| Worker process | fork + waitpid, ms | to the SDK alone | to imported, not "
            "instrumented |",
            "|---|---:|---:|---:|",
            *rows,
            "",
            f"{r.rounds} interleaved rounds of {r.per_round} forks per worker, over "
            f"{r.blocks} sets of fresh workers; a ratio is the median of the per-round "
            "ratios (quartiles in brackets). The goal is at most 1.3x.",
        ]
    )


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "worker":
        worker(sys.argv[2])
        return
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else None
    print(markdown(measure(rounds=rounds)))


if __name__ == "__main__":
    main()
