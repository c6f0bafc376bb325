"""What a process pays to start reporting: import, instrument() and the first collection.

This package beside the peer (``opentelemetry-instrumentation-system-metrics``),
each in fresh child processes, interleaved (so that other load hits both), over
the same SDK set-up (a ``MeterProvider`` with an in-memory reader):

- in the child, the time of the import, of ``instrument()`` and of the first
  collection (``perf_counter``);
- from outside, the wall time of the whole child, against a child that sets
  up the SDK and imports the ``opentelemetry.instrumentation`` base only;
- ``python -X importtime`` of the same children: the modules each loads
  beyond the base child's (self times summed; what ``instrument()`` imports
  included), and how many.

``run.py`` runs it as a component; alone::

    python benchmarks/startup.py [ROUNDS]       # Markdown on stdout
    python benchmarks/startup.py child SUBJECT  # one child: JSON on stdout
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SUBJECTS = ("base", "ours", "peer")
MODULES = {
    "base": "opentelemetry.instrumentation.instrumentor",
    "ours": "opentelemetry.instrumentation.process",
    "peer": "opentelemetry.instrumentation.system_metrics",
}
"""What each subject imports; both instrumentors import the base themselves."""


def child(subject: str) -> dict[str, float]:
    """Set up the SDK, then import, instrument and collect once; seconds of each step."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    t0 = time.perf_counter()
    if subject == "ours":
        from opentelemetry.instrumentation.process import ProcessInstrumentor as Instrumentor
    elif subject == "peer":
        from opentelemetry.instrumentation.system_metrics import (
            SystemMetricsInstrumentor as Instrumentor,
        )
    else:
        import opentelemetry.instrumentation.instrumentor  # noqa: F401
    t1 = time.perf_counter()
    if subject != "base":
        Instrumentor().instrument(meter_provider=provider)
    t2 = time.perf_counter()
    points = _points(reader.get_metrics_data()) if subject != "base" else 0
    t3 = time.perf_counter()
    return {"import": t1 - t0, "instrument": t2 - t1, "collect": t3 - t2, "points": points}


def _points(data: Any) -> int:
    return sum(
        len(m.data.data_points)
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    )


def _env(pycache: str) -> dict[str, str]:
    """No OTEL_* variable; bytecode written and read in a private folder.

    An installed package has its bytecode compiled; a source checkout run with
    PYTHONDONTWRITEBYTECODE would compile this package at every import, and
    not the peer (installed): one untimed run of each subject writes it first.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = pycache
    # A group of its own: each child leads, and reads the host metrics as the peer does.
    env["OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="startup-group-")
    return env


def _run_child(subject: str, pycache: str) -> tuple[float, dict[str, float]]:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, str(HERE / "startup.py"), "child", subject],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=_env(pycache),
    )
    wall = time.perf_counter() - t0
    return wall, json.loads(out.stdout)


def import_times(subject: str, pycache: str) -> dict[str, int]:
    """``-X importtime`` of a whole child: self microseconds of each module it loads.

    The whole child, not the import statement alone: what ``instrument()``
    imports counts too.
    """
    out = subprocess.run(
        [sys.executable, "-X", "importtime", str(HERE / "startup.py"), "child", subject],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=_env(pycache),
    )
    found: dict[str, int] = {}
    for line in out.stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            self_us, _cumulative, name = line.split(":", 1)[1].split("|")
            found[name.strip()] = int(self_us)
    return found


@dataclass(frozen=True)
class Startup:
    """Medians over fresh children, in milliseconds; ``*_beyond`` is beyond the base."""

    rounds: int
    steps: dict[str, dict[str, float]]
    """Per subject: import, instrument, collect, and their total, in the child."""
    wall: dict[str, float]
    """Per subject: the whole child's wall time."""
    wall_beyond: dict[str, float]
    """Per subject: the median over rounds of its wall time minus the base child's."""
    importtime_beyond: dict[str, float]
    """Per subject: the self times (-X importtime) of the modules beyond the base child's."""
    modules_beyond: dict[str, int]
    own_modules: dict[str, float]
    """Per subject: the self times of its own package's modules only."""
    points: dict[str, int]


def measure(quick: bool = False, rounds: int | None = None) -> Startup:
    with tempfile.TemporaryDirectory(prefix="startup-pycache-") as pycache:
        return _measure(rounds or (1 if quick else 20), pycache)


def _measure(n: int, pycache: str) -> Startup:
    walls: dict[str, list[float]] = {s: [] for s in SUBJECTS}
    steps: dict[str, list[dict[str, float]]] = {s: [] for s in SUBJECTS}
    imports: dict[str, list[dict[str, int]]] = {s: [] for s in SUBJECTS}
    for subject in SUBJECTS:  # untimed: writes the bytecode
        _run_child(subject, pycache)
    for i in range(n):
        order = SUBJECTS if i % 2 == 0 else SUBJECTS[::-1]
        for subject in order:
            wall, got = _run_child(subject, pycache)
            walls[subject].append(wall)
            steps[subject].append(got)
        for subject in order:
            imports[subject].append(import_times(subject, pycache))
    base_walls = walls["base"]
    median_steps = {
        s: {
            k: statistics.median(r[k] for r in steps[s]) * 1e3
            for k in ("import", "instrument", "collect")
        }
        | {
            "total": statistics.median(
                sum(r[k] for k in ("import", "instrument", "collect")) for r in steps[s]
            )
            * 1e3
        }
        for s in SUBJECTS
    }
    beyond: dict[str, float] = {}
    count: dict[str, int] = {}
    own: dict[str, float] = {}
    for s in ("ours", "peer"):
        sums, owns, ns = [], [], []
        for base_run, run in zip(imports["base"], imports[s], strict=True):
            extra = {k: v for k, v in run.items() if k not in base_run}
            sums.append(sum(extra.values()) / 1e3)
            owns.append(sum(v for k, v in run.items() if k.startswith(MODULES[s])) / 1e3)
            ns.append(len(extra))
        beyond[s], own[s], count[s] = (
            statistics.median(sums),
            statistics.median(owns),
            int(statistics.median(ns)),
        )
    return Startup(
        rounds=n,
        steps=median_steps,
        wall={s: statistics.median(v) * 1e3 for s, v in walls.items()},
        wall_beyond={
            s: statistics.median(w - b for w, b in zip(walls[s], base_walls, strict=True)) * 1e3
            for s in ("ours", "peer")
        },
        importtime_beyond=beyond,
        modules_beyond=count,
        own_modules=own,
        points={s: int(steps[s][0]["points"]) for s in ("ours", "peer")},
    )


def markdown(r: Startup) -> str:
    rows = []
    for s, label in (("ours", "this package (defaults)"), ("peer", "the peer (defaults)")):
        st = r.steps[s]
        rows.append(
            f"| {label} | {st['import']:.1f} | {st['instrument']:.1f} | {st['collect']:.1f} | "
            f"**{st['total']:.1f}** | {r.wall_beyond[s]:.1f} | {r.importtime_beyond[s]:.1f} "
            f"({r.modules_beyond[s]} modules; own {r.own_modules[s]:.1f}) | {r.points[s]} |"
        )
    ratio = r.steps["ours"]["total"] / r.steps["peer"]["total"]
    return "\n".join(
        [
            "| Child process | import, ms | instrument(), ms | first collection, ms | "
            "total, ms | wall beyond the base child, ms | -X importtime beyond the base child, ms "
            "| points |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            f"Medians of {r.rounds} fresh children of each, interleaved. The base child sets up "
            f"the SDK and imports `opentelemetry.instrumentation.instrumentor` only "
            f"({r.wall['base']:.0f} ms of wall time). This package's total is "
            f"**{ratio:.2f}x** the peer's.",
        ]
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        print(json.dumps(child(sys.argv[2])))
        return
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else None
    print(markdown(measure(rounds=rounds)))


if __name__ == "__main__":
    main()
