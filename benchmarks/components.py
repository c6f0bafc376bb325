"""The standalone benchmarks of single components, folded into the run.

Each module below has ``measure(quick) -> <its typed result>`` and
``markdown(result) -> str``, or ``benchmark(**sizes)`` and ``table(result)``
(gc_pauses.py, loop_lag.py; saturation.py: ``run_in_limited_cgroup`` and
``table``, since it needs root and makes its own cgroups), and can still be run
alone. ``run.py`` runs each in a child process (some add an audit hook, which
cannot be removed and would tax every collection timed after it) and keeps its
Markdown and its data.

    python benchmarks/components.py NAME quick|full   # JSON on stdout
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

COMPONENTS = {
    "gc_pauses": "Time each garbage collection pays for the GC pause recorder",
    "loop_lag": "Overhead of the event-loop lag probe",
    "direct_reads": "The direct Linux readers against the psutil calls they replace",
    "cgroup_readers": "The cgroup and pressure readers against bare reads of the same files",
    "saturation": "What the saturation group adds, in a real limited cgroup",
    "forks": "What a fork costs, instrumented and not",
    "startup": "What a process pays to start reporting, beside the peer",
    "stalls": "What the run-queue wait and the GIL-wait probe cost",
}


@dataclass(frozen=True)
class Component:
    name: str
    title: str
    command: str
    markdown: str
    data: Any
    missing: str = ""


def measure_all(quick: bool) -> list[Component]:
    return [measure_one(name, quick) for name in COMPONENTS]


def measure_one(name: str, quick: bool) -> Component:
    title, command = COMPONENTS[name], f"python benchmarks/{name}.py"
    if not (HERE / f"{name}.py").exists():
        return Component(name, title, command, "", None, f"benchmarks/{name}.py is not here yet")
    mode = "quick" if quick else "full"
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), name, mode],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        return Component(name, title, command, "", None, f"failed: {done.stderr[-400:]}")
    found = json.loads(done.stdout)
    if "missing" in found:
        return Component(name, title, command, "", None, found["missing"])
    return Component(name, title, command, found["markdown"], found["data"])


def child(name: str, quick: bool) -> dict[str, Any]:
    sys.path.insert(0, str(HERE))
    if name == "saturation":
        return _saturation(quick)
    module = importlib.import_module(name)
    if hasattr(module, "benchmark"):  # gc_pauses.py, loop_lag.py: benchmark() and table()
        result = module.benchmark(**(_QUICK.get(name, {}) if quick else {}))
        return {"markdown": module.table(result), "data": asdict(result)}
    result = module.measure(quick=quick)
    return {"markdown": module.markdown(result), "data": asdict(result)}


# Sizes of the quick (smoke) variant of the modules that take them as keywords.
_QUICK: dict[str, dict[str, Any]] = {
    "gc_pauses": {"rounds": 6},
    "loop_lag": {"seconds": 0.5, "rounds": 2},
}


def _saturation(quick: bool) -> dict[str, Any]:
    """saturation.py has its own entry point: it needs root and cgroups it makes."""
    import saturation

    why = saturation.unavailable()
    if why is not None:
        return {"missing": why}
    rounds, calls = (3, 20) if quick else (40, 200)
    cost = saturation.run_in_limited_cgroup(rounds, calls)
    return {"markdown": saturation.table(cost), "data": asdict(cost)}


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], sys.argv[2] == "quick")))
