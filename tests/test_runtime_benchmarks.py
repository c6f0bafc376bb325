"""The runtime benchmarks: public API only, one function returning a typed result each.

Only their shape and exact counts are checked here, never a time.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from types import ModuleType

import pytest

import opentelemetry.instrumentation.process as package
from opentelemetry.instrumentation.process.probes.loops.monitor import DEFAULT_INTERVAL

from .support.loading import load_file

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
PACKAGE = "opentelemetry.instrumentation.process"


def load(name: str) -> ModuleType:
    return load_file(BENCHMARKS / f"{name}.py", f"bench_{name}")


@pytest.mark.parametrize("name", ["gc_pauses", "loop_lag"])
def test_uses_only_the_public_api(name: str) -> None:
    tree = ast.parse((BENCHMARKS / f"{name}.py").read_text())
    imported = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            imported += [(a.name, "") for a in node.names]
    ours = [(module, what) for module, what in imported if module.startswith(PACKAGE)]
    assert ours, "the benchmark does not use the package"
    for module, what in ours:
        assert module == PACKAGE, f"{name} imports the internal module {module}"
        assert what in package.__all__, f"{name} imports {what}, which is not public"


def test_gc_benchmark_returns_every_row_and_prints_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = load("gc_pauses")
    result = bench.benchmark(rounds=2)
    assert capsys.readouterr() == ("", "")
    assert isinstance(result, bench.GcPauseCost) and result.rounds == 2
    assert [(r.workload, r.variant) for r in result.rows] == [
        (w, v) for w in ("churn", "forced") for v in bench.VARIANTS[1:]
    ]
    for row in result.rows:
        if row.workload == "forced":
            assert row.collections == bench.FORCED_COLLECTIONS  # one per gc.collect(0)
        # The package variants read the time in collections back from the SDK.
        assert (row.pause_ns is not None) == row.variant.startswith("package")
        assert (row.share_of_gc is not None) == (
            row.workload == "churn" and row.variant.startswith("package")
        )
    assert dataclasses.asdict(result)  # serialisable as it is
    with pytest.raises(ValueError, match="rounds must be an int >= 1; got 0"):
        bench.benchmark(rounds=0)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_loop_benchmark_returns_its_result_and_prints_nothing(
    loop: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    bench = load("loop_lag")
    result = bench.benchmark(loop=loop, seconds=0.1, rounds=1)
    assert capsys.readouterr() == ("", "")
    assert isinstance(result, bench.LoopProbeCost) and result.loop == loop
    for workload in (result.idle, result.callbacks, result.tasks):
        assert workload.baseline > 0 and workload.probe > 0 and workload.delays_only > 0
    assert result.idle_us_per_tick == pytest.approx(
        result.idle_cpu_share * bench.PROBE_INTERVAL * 1e6
    )
    calls = result.calls_per_iteration
    assert list(calls) == list(bench.CONFIGS)
    added = {config: n - calls[bench.CONFIGS[0]] for config, n in calls.items()}
    # A tick every 20 ms adds a few calls, spread over 20000 iterations.
    assert 0 <= added[bench.CONFIGS[2]] < 0.1  # the utilisation excluded: select not timed
    # Timing select: the wrapper and its two clock reads, on asyncio's selector only.
    assert added[bench.CONFIGS[1]] == pytest.approx(3 if loop == "asyncio" else 0, abs=0.1)
    assert dataclasses.asdict(result)
    with pytest.raises(ValueError, match="loop must be one of asyncio, uvloop; got 'trio'"):
        bench.benchmark(loop="trio")


def test_the_probe_interval_the_benchmark_assumes_is_the_monitors() -> None:
    assert load("loop_lag").PROBE_INTERVAL == DEFAULT_INTERVAL
