"""The application-cost benchmarks: their children set up what they say, their arithmetic.

Never a time, nor an instruction count (they need Valgrind, which the smoke run
has): the counted children run here without a counter, for real, and the page's
goals are checked on made-up ratios.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .support.loading import load_file

# The benchmarks' own packages: in the full environment, not in the version cells.
pytest.importorskip("pyperf")
pytest.importorskip("pyperformance")

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str) -> ModuleType:
    return load_file(BENCHMARKS / f"{name}.py", f"bench_{name}")


def child(tmp_path: Path, *args: str) -> dict[str, Any]:
    """One child of instructions.py, as the counter runs it, without the counter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env |= {"PYTHONPATH": str(BENCHMARKS), "PYTHONHASHSEED": "0"}
    env["OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"] = str(runtime)
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "instructions.py"), "child", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return found


@pytest.mark.parametrize(
    ("mode", "ours", "options", "callbacks"),
    [
        ("sdk", False, {}, 0),
        ("gc_callback", False, {}, 1),
        ("defaults", True, {"event_loop": False, "gil_wait": False}, 1),
        ("event_loop", True, {"event_loop": True, "gil_wait": False}, 1),
        ("gil_wait", True, {"gil_wait": True, "event_loop": False}, 1),
        ("peer", False, {}, 0),
    ],
)
def test_each_mode_sets_up_what_it_says(
    tmp_path: Path, mode: str, ours: bool, options: dict[str, bool], callbacks: int
) -> None:
    found = child(tmp_path, "between", mode, "kinds", "none")
    assert found["mode"]["ours"] is ours
    assert options.items() <= found["mode"]["options"].items()
    # The package's pause callback, or the empty one of gc_callback; the SDK has none.
    assert found["mode"]["gc_callbacks"] >= callbacks
    assert (found["mode"]["gc_callbacks"] == 0) is (callbacks == 0)


def test_the_work_runs_and_collects_garbage(tmp_path: Path) -> None:
    none = child(tmp_path, "between", "defaults", "kinds", "none")
    cycles = child(tmp_path, "between", "defaults", "kinds", "cycles")
    assert none["gc"] == [0, 0, 0]
    assert cycles["gc"][0] >= 300_000 // 1000  # a generation-0 collection per few hundred cycles


def test_every_pyperformance_benchmark_of_the_subset_loads_and_runs(tmp_path: Path) -> None:
    """Their scripts run with the stand-in for pyperf.Runner: each records its benchmark."""
    instructions = load("instructions")
    assert child(tmp_path, "between", "sdk", "pyperformance", "none")["gc"] is not None
    for name in ("richards", "create_gc_cycles"):
        found = child(tmp_path, "between", "sdk", "pyperformance", name)
        assert found["seconds"] > 0, name
    assert len(instructions.PYPERFORMANCE) >= 10


def test_a_probe_is_compared_with_its_own_start(tmp_path: Path) -> None:
    """A probe's work at 0 loops: a loop started and closed, the baseline of its seconds."""
    instructions = load("instructions")
    plan = instructions.Plan(3, ("defaults", "event_loop"), ("probes",), (), 0)
    jobs = instructions.jobs(plan)
    _, base = jobs["between/event_loop/probes/idle_uvloop"]
    assert base == "between/event_loop/probes/idle_uvloop@0"
    assert jobs[base] == (("between", "event_loop", "probes", "idle_uvloop", "0"), "")
    assert "between/event_loop/probes/none" not in jobs
    assert "between/gc_pause_histogram/probes/gc_collect0" not in jobs  # not in the plan
    child(tmp_path, "between", "event_loop", "probes", "idle_asyncio", "0")


def _entry(defaults: dict[str, float], peer: dict[str, float]) -> dict[str, Any]:
    """A record whose work under the SDK alone costs 100 million instructions each."""
    between: dict[str, Any] = {"sdk": {}, "defaults": {}, "peer": {}}
    for w in ("allocation", "cycles", "json", "asyncio"):
        between["sdk"][w] = {"median": 1e8, "spread": 0.0002}
        between["defaults"][w] = {"median": 1e8 * defaults[w], "runs": [1e8 * defaults[w]] * 3}
        between["peer"][w] = {"median": 1e8 * peer[w], "spread": 0.0001}
    return {"between": between, "collections": {"default": {"median": 1e7, "runs": [1e7] * 3}}}


def test_the_goals_between_collections() -> None:
    app_cost = load("app_cost")
    peer = {"allocation": 1.0088, "cycles": 1.0024, "json": 1.0077, "asyncio": 1.0006}
    met = {"allocation": 1.0118, "cycles": 1.0120, "json": 1.0092, "asyncio": 1.0016}
    rows = app_cost.goals(_entry(met, peer), {}).splitlines()[2:]
    assert len(rows) == 5 and all(row.endswith("| **met** |") for row in rows), rows
    missed = {"allocation": 1.0119, "cycles": 1.0121, "json": 1.0093, "asyncio": 1.0017}
    rows = app_cost.goals(_entry(missed, peer), {}).splitlines()[2:]
    assert [row.endswith("| **missed** |") for row in rows] == [True] * 4 + [False]
    assert "| <= 1.0088 + 0.0030 | 1.0119 |" in rows[1]


def test_the_heap_counts_what_instrumenting_adds() -> None:
    heap = load("heap")
    found = {mode: heap.one(mode) for mode in ("baseline", "defaults")}
    assert found["defaults"]["objects"] > found["baseline"]["objects"]
    assert found["defaults"]["modules"] > found["baseline"]["modules"]
