"""What instrumenting adds to the heap that every full garbage collection walks.

A full collection (``gc.collect()``, or the automatic generation-2 ones) visits
every object the collector tracks. Each mode runs in fresh processes: an SDK
``MeterProvider`` with a reader, and the base instrumentor imported
(``opentelemetry.instrumentation.instrumentor``: asyncio, wrapt, packaging and
``importlib.metadata``, which the peer pays too), then counted; then the mode
sets up and collects twice (the state kept between collections is there), and
is counted again. Modes: ``baseline`` (nothing more), ``no_metrics``
(``instrument(exclude=["*"])``: the package's modules and set-up, no
instrument: what its modules cost), ``defaults``
(``ProcessInstrumentor().instrument()``) and ``peer``
(``SystemMetricsInstrumentor().instrument()``). Reported: the objects and
modules added beyond the baseline's: counts, not times, so one round on a
busy machine gives them (a full collection's instructions grow with them:
``instructions.py`` counts pyperformance's ``gc_collect`` and ``gc_traversal``).

    python benchmarks/heap.py [--rounds 5]     # seconds; results/heap.json
    python benchmarks/heap.py --smoke          # one round, nothing written (CI)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "heap.json"
MODES = ("baseline", "no_metrics", "defaults", "peer")
GOAL = 2_000
"""Objects the defaults may add beyond the base instrumentor (issue 28): fewer than the peer."""

CHILD = """
import gc, json, sys
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
import opentelemetry.instrumentation.instrumentor  # the base that both instrumentors pay

def counted():
    gc.collect()
    return len(gc.get_objects()), len(sys.modules)

reader = InMemoryMetricReader()
provider = MeterProvider(metric_readers=[reader])
reader.get_metrics_data()
objects, modules = counted()
if sys.argv[1] == "no_metrics":
    from opentelemetry.instrumentation.process import ProcessInstrumentor
    ProcessInstrumentor().instrument(meter_provider=provider, exclude=["*"])
elif sys.argv[1] == "defaults":
    from opentelemetry.instrumentation.process import ProcessInstrumentor
    ProcessInstrumentor().instrument(meter_provider=provider)
elif sys.argv[1] == "peer":
    from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor
    SystemMetricsInstrumentor().instrument(meter_provider=provider)
reader.get_metrics_data()
reader.get_metrics_data()
after, after_modules = counted()
print(json.dumps({"objects": after - objects, "modules": after_modules - modules}))
"""


@dataclass(frozen=True)
class Heap:
    mode: str
    objects: int
    """GC-tracked objects added beyond the baseline's (median of rounds)."""
    modules: int
    """Modules imported beyond the baseline's."""
    objects_rounds: tuple[int, ...]


def one(mode: str) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True
    )
    result: dict[str, int] = json.loads(done.stdout)
    return result


def measure(rounds: int) -> list[Heap]:
    """Every mode, ``rounds`` fresh processes each, taking turns."""
    runs: dict[str, list[dict[str, int]]] = {m: [] for m in MODES}
    for r in range(rounds):
        for mode in MODES:
            runs[mode].append(one(mode))
        print(f"round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    base = statistics.median(x["objects"] for x in runs["baseline"])
    base_modules = statistics.median(x["modules"] for x in runs["baseline"])
    return [
        Heap(
            mode=m,
            objects=round(statistics.median(x["objects"] for x in runs[m]) - base),
            modules=round(statistics.median(x["modules"] for x in runs[m]) - base_modules),
            objects_rounds=tuple(int(x["objects"] - base) for x in runs[m]),
        )
        for m in MODES
    ]


def markdown(found: list[Heap]) -> str:
    lines = [
        "| Mode | GC-tracked objects added | Modules added |",
        "|---|---:|---:|",
    ]
    lines += [f"| `{h.mode}` | {h.objects:,} | {h.modules} |" for h in found]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="one round, nothing written")
    args = parser.parse_args()
    found = measure(1 if args.smoke else args.rounds)
    print(markdown(found))
    if args.smoke:  # each instrumentor adds something, or the child measured nothing
        return 0 if all(h.objects > 0 for h in found if h.mode != "baseline") else 1
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps([asdict(h) for h in found], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
