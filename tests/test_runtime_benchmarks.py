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
    seconds = 0.1
    result = bench.benchmark(loop=loop, seconds=seconds, rounds=1)
    assert capsys.readouterr() == ("", "")
    assert isinstance(result, bench.LoopProbeCost) and result.loop == loop
    base, probe, delays_only = configs = list(bench.CONFIGS)
    assert result.configs == configs
    for f in result.figures:
        # What the probe reads needs the probe; the others run every configuration.
        wanted = configs[1:] if f.workload in bench.REPORTED else configs
        if f.name == "utilization":
            wanted = [probe]
        assert sorted(f.medians) == sorted(wanted), f
        assert all(v >= 0 for v in f.medians.values()), f
    for workload in ("callbacks", "tasks"):
        assert all(v > 0 for v in result.figure(workload, "per CPU second").medians.values())
    calls = result.figure("calls", "per iteration").medians
    added = {config: n - calls[base] for config, n in calls.items()}
    # An iteration's own calls, exact: the hook on asyncio's select and its one clock
    # read (select cannot wait: a poll), whichever part is measured; uvloop is not probed.
    hooked = 2 if loop == "asyncio" else 0
    assert added == {base: 0, probe: hooked, delays_only: hooked}
    # The mean adds the ticks' work, a few calls every 20 ms.
    mean = result.figure("calls", "per iteration, mean").medians
    assert all(0 <= mean[c] - calls[c] < 0.5 for c in configs), (mean, calls)
    wakes = result.figure("idle", "wakes per second").medians
    if loop == "asyncio":  # the probe never wakes a sleeping loop
        assert (
            wakes[probe] - wakes[base] < 1 / seconds
            and wakes[delays_only] - wakes[base] < 1 / seconds
        )
        # One block: a tick due in it is read at least this late.
        least = (bench.BLOCK - 0.02) * 1e3
        for workload in bench.REPORTED:
            assert min(result.figure(workload, "max, ms").medians.values()) >= least
    else:  # nothing reported
        assert not [f for f in result.figures if f.workload in bench.REPORTED]
    assert dataclasses.asdict(result)
    with pytest.raises(ValueError, match="loop must be one of asyncio, uvloop; got 'trio'"):
        bench.benchmark(loop="trio")
    with pytest.raises(ValueError, match="against must be a checkout with a src folder"):
        bench.benchmark(against=str(BENCHMARKS))
