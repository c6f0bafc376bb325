"""The component benchmarks, pyperf scripts each, folded into the run.

A component benchmark times one internal component with ``pyperf.Runner``
(its workers, calibration, warm-ups and JSON); ``run.py`` runs each script in
a child process, keeps its pyperf file in the results folder, and puts a table
of it on the page: each benchmark's mean and standard deviation, and its ratio
to the first benchmark of the script.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyperf

HERE = Path(__file__).resolve().parent

COMPONENTS = {
    "cgroup_readers": "The cgroup and pressure readers against bare reads of the same files",
}


@dataclass(frozen=True)
class Component:
    name: str
    title: str
    command: str
    markdown: str
    missing: str = ""


def measure_one(name: str, quick: bool, out: Path) -> Component:
    """Run ``name``'s pyperf script (one value in one worker when ``quick``) into ``out``."""
    title, command = COMPONENTS[name], f"python benchmarks/{name}.py"
    path = out / f"{name}.json"
    speed = ["--debug-single-value"] if quick else []
    done = subprocess.run(
        [sys.executable, str(HERE / f"{name}.py"), "--quiet", *speed, "-o", str(path)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        return Component(name, title, command, "", f"failed: {done.stderr[-400:]}")
    return Component(name, title, command, table(pyperf.BenchmarkSuite.load(str(path))))


def table(suite: pyperf.BenchmarkSuite) -> str:
    benches = suite.get_benchmarks()
    first = benches[0]
    meta, runs = first.get_metadata(), [r.get_metadata() for r in first.get_runs()]
    load = [float(m["load_avg_1min"]) for m in runs if "load_avg_1min" in m]
    lines = [
        f"Measured {first.get_dates()[0]:%Y-%m-%d %H:%M} on {meta.get('cpu_model_name')}, "
        f"{meta.get('cpu_count')} CPUs, load average {min(load, default=0):g} to "
        f"{max(load, default=0):g}.",
        "",
        f"| Benchmark | Mean ± std dev | / `{first.get_name()}` |",
        "|---|---:|---:|",
    ]
    for b in benches:
        spread = f" ± {b.format_value(b.stdev())}" if b.get_nvalue() > 1 else ""
        ratio = f"{b.mean() / first.mean():.3f}x"
        lines.append(f"| `{b.get_name()}` | {b.format_value(b.mean())}{spread} | {ratio} |")
    return "\n".join(lines)


def measure_all(quick: bool, out: Path) -> list[Component]:
    return [measure_one(name, quick, out) for name in COMPONENTS]
