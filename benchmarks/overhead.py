"""What the package costs an application: pyperformance's benchmarks, in instrumented workers.

pyperformance is a suite this project did not write. Each of its benchmarks is
a script that runs under pyperf; pyperf runs it in fresh worker processes, and
``appcost/sitecustomize.py`` (on ``PYTHONPATH``, passed on with
``--inherit-environ``) sets up one mode in each worker before the benchmark
starts: the SDK and a periodic reader alone (``baseline``), the package's
defaults, the defaults plus each opt-in probe, or the peer
(``opentelemetry-instrumentation-system-metrics``), at each export interval.

Interleaving: a round runs every benchmark once in every mode, the modes of one
benchmark back to back in a new random order, appending to one pyperf file per
mode (``--append``). The number of loops per value is calibrated once per
benchmark, in the baseline, and the same loops run in every mode.

    python benchmarks/overhead.py                      # full: every mode, 3 rounds (about 6 h)
    python benchmarks/overhead.py --smoke              # 3 benchmarks, 3 modes, 1 round
    python benchmarks/overhead.py --rounds 2 --modes baseline@1s,defaults@1s
    python benchmarks/overhead.py --report-only benchmarks/results/overhead
    python -m pyperf compare_to results/overhead/baseline@1s.json results/overhead/defaults@1s.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pyperf
from pyperf._utils import is_significant

HERE = Path(__file__).resolve().parent
SITE = HERE / "appcost"
RESULTS = HERE / "results" / "overhead"
sys.path.insert(0, str(HERE))

from appcost.appmode import PROBES  # noqa: E402

NAMED = ("gc_collect", "gc_traversal", "async_tree_io", "async_tree_cpu_io_mixed", "coroutines")
"""The GC-heavy and asyncio benchmarks that the subset must hold (checked in ``subset``)."""


def subset() -> list[Any]:
    """The benchmarks run, by a rule fixed before any result, in pyperformance's order.

    Rule: every benchmark of pyperformance's ``default`` group (``pyperformance
    list -b default``), except (1) those whose folder has a ``requirements.txt``
    (they need packages beyond pyperf: django, sqlalchemy, tornado, ...) and
    (2) the ``startup`` group, which times new interpreters started by the
    benchmark rather than work in the instrumented worker (``startup.py``
    measures what starting to report costs), and (3) those that fail in the
    baseline, before any comparison (``pickle_pure_python`` and
    ``unpickle_pure_python`` refuse to run once the C pickle module is
    loaded, and the SDK loads it), and (4) those that time a command in a
    child process (pyperf's ``bench_command``: ``2to3``), where neither the
    package nor the CPU clock of the instrumented worker reaches. The
    GC-heavy and asyncio ones (``NAMED``) pass the rule; that is checked, not
    assumed.
    """
    from pyperformance import _manifest

    listed = subprocess.run(
        [sys.executable, "-m", "pyperformance", "list", "-b", "default"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    default = {line[2:].strip() for line in listed.splitlines() if line.startswith("- ")}
    found = [
        b
        for b in _manifest.load_manifest(None).benchmarks
        if b.name in default
        and not (Path(b.runscript).parent / "requirements.txt").exists()
        and "startup" not in (b.tags or ())
        and "bench_command" not in Path(b.runscript).read_text()
    ]
    missing = set(NAMED) - {b.name for b in found}
    if missing:
        raise RuntimeError(f"the subset rule lost {sorted(missing)}: look at the rule again")
    return found


def modes(intervals: tuple[int, ...], clock: str) -> dict[str, dict[str, Any]]:
    """Every mode, by name (``defaults@60s``): what ``appcost/appmode.py`` sets up."""
    found: dict[str, dict[str, Any]] = {}
    for s in intervals:
        # At short intervals, a random start between two collections (sitecustomize.py).
        base = {"interval_ms": s * 1000, "clock": clock, "phase": s <= PHASE_UP_TO}
        found[f"baseline@{s}s"] = {"kind": "baseline", **base}
        found[f"defaults@{s}s"] = {"kind": "ours", "options": {}, **base}
        for p in PROBES:
            found[f"{p}@{s}s"] = {"kind": "ours", "options": {p: True}, **base}
        found[f"peer@{s}s"] = {"kind": "peer", **base}
    return {k: {"name": k, **v} for k, v in found.items()}


PHASE_UP_TO = 5
"""Seconds: up to this interval a worker starts at a random phase; above it, a worker
of a few seconds sees no collection at all, and what is measured is what the package
costs between collections (its share of each collection is cost / interval)."""


@dataclass(frozen=True)
class Plan:
    rounds: int
    processes: int
    """Worker processes per benchmark, mode and round."""
    values: int
    warmups: int
    min_time: float
    """Seconds of one value, for the calibration of loops (pyperf's ``--min-time``)."""
    intervals: tuple[int, ...]
    clock: str
    """``cpu`` (the worker's CPU time) or ``wall`` (pyperf's own)."""
    benchmarks: tuple[str, ...] = ()
    """Empty: the whole subset."""
    modes: tuple[str, ...] = ()
    """Empty: every mode."""
    loops: int = 0
    """Loops per value; 0: calibrated per benchmark."""
    hours: float = 0
    """A budget: no new round starts that would end after it (0: none)."""


# A worker runs 1 + 6 values of at least 0.25 s (2 to 9 s with its start and
# phase): at a 1 s interval, its values hold 1.5 collections on average. Three
# rounds, the fewest that the interval by worker runs takes: about 2 h a round for
# the 16 modes on a shared 2-core machine (8 s per benchmark and mode).
FULL = Plan(
    rounds=3, processes=1, values=6, warmups=1, min_time=0.25, intervals=(1, 60), clock="cpu"
)
SMOKE = Plan(
    rounds=1,
    processes=1,
    values=2,
    warmups=0,
    min_time=0.02,
    intervals=(1,),
    clock="cpu",
    benchmarks=("gc_collect", "async_tree_io", "richards"),
    modes=("baseline@1s", "defaults@1s", "event_loop@1s"),
    loops=1,
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _pyperf(bench: Any, args: list[str], mode: dict[str, Any], runtime: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {
        "PYTHONPATH": str(SITE),
        "PROCESS_OVERHEAD_MODE": json.dumps(mode),
        "PROCESS_OVERHEAD_MARKS": os.path.join(runtime, "..", "marks.jsonl"),
        "OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR": runtime,
    }
    inherit = ",".join(k for k in env if k.startswith(("PYTHONPATH", "PROCESS_OVERHEAD", "OTEL_")))
    command = [sys.executable, bench.runscript, *bench.extra_opts, "--quiet"]
    command += ["--inherit-environ", inherit, *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        # The worker's own error first: pyperf's master only says that a worker failed.
        errors = [x for x in done.stderr.splitlines() if x[:1].isalpha() and "Error" in x]
        raise RuntimeError(f"{bench.name} failed: {' / '.join(errors[:2])}\n{done.stderr[-600:]}")


def calibrate(
    bench: Any, plan: Plan, mode: dict[str, Any], runtime: str, tmp: Path
) -> tuple[int, list[str]]:
    """Loops per value for ``bench``, calibrated by pyperf in the baseline, and the names
    of the pyperf benchmarks that its script runs."""
    out = tmp / f"calibrate-{bench.name}.json"
    args = ["-p", "1", "-n", "1", "-w", "0", "--min-time", str(plan.min_time), "-o", str(out)]
    _pyperf(bench, args, mode, runtime)
    # A script may run several benchmarks (bm_base64 runs 11): one -l for all, the fewest.
    found = pyperf.BenchmarkSuite.load(str(out)).get_benchmarks()
    return min(int(b.get_metadata()["loops"]) for b in found), [b.get_name() for b in found]


def run(plan: Plan, out: Path, *, resume: bool = False) -> dict[str, Any]:
    """Measure: one pyperf suite per mode in ``out``; returns the run's record.

    ``resume``: keep what ``out`` has, and run only what a round lacks (a benchmark
    whose every mode already has that round's run is skipped).
    """
    everything = modes(plan.intervals, plan.clock)
    chosen = {k: v for k, v in everything.items() if not plan.modes or k in plan.modes}
    benches = [b for b in subset() if not plan.benchmarks or b.name in plan.benchmarks]
    out.mkdir(parents=True, exist_ok=True)
    before: dict[str, Any] = {}
    if resume and (out / "run.json").exists():
        before = json.loads((out / "run.json").read_text())
    for f in out.glob("*@*.json"):
        if not resume:
            f.unlink()
    rng = random.Random(28)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        runtime = tempfile.mkdtemp(dir=tmp)
        os.chmod(runtime, 0o700)
        base = next(v for k, v in chosen.items() if k.startswith("baseline@"))
        loops, names, skipped = {}, {}, {}
        known = _calibrated(out, plan)
        for b in benches:
            if plan.loops:
                loops[b.name] = plan.loops
                continue
            try:
                loops[b.name], names[b.name] = known.get(b.name) or calibrate(
                    b, plan, base, runtime, Path(tmp)
                )
            except RuntimeError as e:  # rule (3) of subset()
                skipped[b.name] = str(e).splitlines()[0][-300:]
                log(f"{b.name} fails in the baseline, left out: {skipped[b.name]}")
        benches = [b for b in benches if b.name not in skipped]
        if not plan.loops:
            saved = {"min_time": plan.min_time, "clock": plan.clock, "loops": loops, "names": names}
            (out / "calibration.json").write_text(json.dumps(saved, indent=1))
        log(f"calibrated {len(benches)} benchmarks in {time.monotonic() - started:.0f} s")
        failed: list[dict[str, Any]] = []
        rounds_done, round_start = 0, time.monotonic()
        # SIGTERM: finish the benchmark under way in every mode, then report what is done.
        stop, stopped = [], ""
        signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
        for r in range(plan.rounds):
            spent = time.monotonic() - started
            if (
                r
                and plan.hours
                and spent + (time.monotonic() - round_start) / r > plan.hours * 3600
            ):
                log(f"stopping after {r} rounds: another would end past {plan.hours} h")
                break
            if r == 0:
                round_start = time.monotonic()
            for i, b in enumerate(benches):
                if resume and _has_round(out, chosen, names.get(b.name, []), r + 1):
                    continue
                order = list(chosen)
                rng.shuffle(order)
                for name in order:
                    args = ["-p", str(plan.processes), "-n", str(plan.values)]
                    args += ["-w", str(plan.warmups), "-l", str(loops[b.name])]
                    args += ["--append", str(out / f"{name}.json")]
                    try:
                        _pyperf(b, args, chosen[name], runtime)
                    except RuntimeError as e:  # the package broke a benchmark: a finding
                        failed.append(
                            {"benchmark": b.name, "mode": name, "round": r, "error": str(e)[-600:]}
                        )
                        log(f"FAILED: {b.name} in {name}")
                if i % 10 == 9:
                    log(f"round {r + 1}/{plan.rounds}: {i + 1}/{len(benches)} benchmarks")
                if stop:
                    stopped = f"stopped (SIGTERM) in round {r + 1}, after {i + 1} benchmarks"
                    log(stopped)
                    break
            if stopped:
                break
            log(f"round {r + 1}/{plan.rounds} done, {time.monotonic() - started:.0f} s")
            rounds_done += 1
        marks = [json.loads(line) for line in (Path(tmp) / "marks.jsonl").read_text().splitlines()]
    record = {
        "plan": asdict(plan),
        "modes": chosen,
        "benchmarks": [b.name for b in benches],
        "loops": loops,
        "names": names,
        "skipped": skipped,
        "failed": failed,
        "tags": {b.name: list(b.tags or ()) for b in benches},
        "rounds_done": rounds_done,
        "stopped": stopped,
        "duration_s": round(time.monotonic() - started) + before.get("duration_s", 0),
        "workers": workers(marks, chosen, len(benches) * plan.rounds * plan.processes),
    }
    for name, w in before.get("workers", {}).items():  # a resumed run: the earlier workers too
        if name in record["workers"]:
            record["workers"][name]["workers"] += w["workers"]
            record["workers"][name]["wrong"] += w["wrong"]
    (out / "run.json").write_text(json.dumps(record, indent=1))
    return record


def _has_round(out: Path, chosen: dict[str, Any], names: list[str], runs: int) -> bool:
    """Whether every mode's file has ``runs`` runs of each pyperf benchmark in ``names``."""
    if not names:
        return False
    for mode in chosen:
        path = out / f"{mode}.json"
        if not path.exists():
            return False
        found = {b.get_name(): b.get_nrun() for b in pyperf.BenchmarkSuite.load(str(path))}
        if any(found.get(n, 0) < runs for n in names):
            return False
    return True


def workers(marks: list[dict[str, Any]], chosen: dict[str, Any], wanted: int) -> dict[str, Any]:
    """Per mode: the workers that ran it, and those that did not run what it says."""
    found: dict[str, Any] = {}
    for name, mode in chosen.items():
        mine = [m for m in marks if m["name"] == name]
        wrong = [
            m
            for m in mine
            if m["ours"] != (mode["kind"] == "ours")
            or (mode["kind"] == "peer" and not m["peer"])
            or (m["options"] and not all(m["options"].values()))
        ]
        found[name] = {"workers": len(mine), "wanted_at_least": wanted, "wrong": wrong[:3]}
    return found


def _calibrated(out: Path, plan: Plan) -> dict[str, tuple[int, list[str]]]:
    """Loops from an earlier calibration in ``out`` with the same min_time and clock."""
    path = out / "calibration.json"
    if not path.exists():
        return {}
    saved = json.loads(path.read_text())
    if (saved["min_time"], saved["clock"]) != (plan.min_time, plan.clock):
        return {}
    return {k: (v, saved["names"].get(k, [])) for k, v in saved["loops"].items()}


# --- analysis ------------------------------------------------------------------


@dataclass(frozen=True)
class Ratio:
    benchmark: str
    ratio: float
    """Mean in the mode over mean in the baseline of the same interval (>1: slower)."""
    significant: bool
    """pyperf's t-test (``compare_to``'s) on the two sets of values."""


@dataclass(frozen=True)
class Compared:
    mode: str
    baseline: str
    ratios: list[Ratio]
    geomean: float
    low: float
    high: float
    """95% interval of the geometric mean, bootstrapping each benchmark's ``unit``."""
    runs: int
    """Worker processes per benchmark in the mode (the fewest)."""
    unit: str = "runs"
    """Where the interval comes from: worker ``runs`` resampled (3 or more per benchmark),
    else the spread of the ratios across ``benchmarks`` (a t-interval on their logs): each
    benchmark ran in its own processes, so this spread holds the differences between
    processes, and the benchmarks' real differences too (it is the wider of the two)."""


def _run_means(bench: pyperf.Benchmark) -> list[float]:
    return [sum(r.values) / len(r.values) for r in bench.get_runs() if r.values]


def compare(
    base_path: Path, mode_path: Path, resamples: int = 2000, only: set[str] | None = None
) -> Compared:
    """Per-benchmark ratios, their significance, and the geometric mean with its interval.

    The unit of the interval is a worker run (a process): the runs of one
    benchmark in the two modes are paired by index, since round ``i`` ran them
    side by side, and resampled together. With fewer than 3 runs per
    benchmark, the interval comes from the spread across benchmarks instead.
    """
    base = {b.get_name(): b for b in pyperf.BenchmarkSuite.load(str(base_path)).get_benchmarks()}
    mode = {b.get_name(): b for b in pyperf.BenchmarkSuite.load(str(mode_path)).get_benchmarks()}
    names = [n for n in base if n in mode and (only is None or n in only)]
    ratios, pairs, values = [], [], []
    for n in names:
        v1, v2 = base[n].get_values(), mode[n].get_values()
        k = min(len(v1), len(v2))  # pyperf's t-test wants as many values on each side
        sig = k > 1 and is_significant(v1[:k], v2[:k])[0]
        ratios.append(Ratio(n, (sum(v2) / len(v2)) / (sum(v1) / len(v1)), bool(sig)))
        m1, m2 = _run_means(base[n]), _run_means(mode[n])
        k = min(len(m1), len(m2))
        pairs.append((m1[:k], m2[:k]))
        values.append((list(v1), list(v2)))
    geomean = math.exp(sum(math.log(r.ratio) for r in ratios) / len(ratios))
    runs = min(len(p[0]) for p in pairs)
    if runs >= 3:
        unit, (low, high) = "runs", _interval(pairs, resamples, paired=True)
    else:
        unit, (low, high) = "benchmarks", _across([math.log(r.ratio) for r in ratios])
    return Compared(mode_path.stem, base_path.stem, ratios, geomean, low, high, runs, unit)


T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
T975 += (2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086)
T975 += (2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
"""Student's t, 0.975 quantile, for 1 to 30 degrees of freedom."""


def _across(logs: list[float]) -> tuple[float, float]:
    """95% t-interval of the geometric mean, from the spread of the log ratios."""
    n = len(logs)
    if n < 3:
        return math.nan, math.nan
    df = n - 1
    t = T975[df - 1] if df <= len(T975) else 1.96 + 2.4 / df  # within 0.002 past df = 30
    half = t * statistics.stdev(logs) / math.sqrt(n)
    mean = sum(logs) / n
    return math.exp(mean - half), math.exp(mean + half)


def _interval(
    pairs: list[tuple[list[float], list[float]]], resamples: int, *, paired: bool
) -> tuple[float, float]:
    if min(min(len(a), len(b)) for a, b in pairs) < 2:
        return math.nan, math.nan
    rng = random.Random(5)
    found = []
    for _ in range(resamples):
        logs = []
        for a, b in pairs:
            ia = [rng.randrange(len(a)) for _ in a]
            ib = ia if paired else [rng.randrange(len(b)) for _ in b]
            mean_a = sum(a[i] for i in ia) / len(ia)
            logs.append(math.log(sum(b[i] for i in ib) / len(ib) / mean_a))
        found.append(math.exp(sum(logs) / len(logs)))
    found.sort()
    return found[int(0.025 * resamples)], found[int(0.975 * resamples) - 1]


def analyse(out: Path, only: set[str] | None = None) -> list[Compared]:
    """Every mode against the baseline of its interval, from the pyperf files in ``out``;
    with ``only``, the pyperf benchmarks of those names alone."""
    found = []
    for path in sorted(out.glob("*@*.json")):
        name, interval = path.stem.split("@")
        base = out / f"baseline@{interval}.json"
        if name != "baseline" and base.exists():
            found.append(compare(base, path, only=only))
    return found


def _cell(r: Ratio | None) -> str:
    return "" if r is None else f"{r.ratio:.3f}{'*' if r.significant else ''}"


def markdown(found: list[Compared], interval: str) -> str:
    """One table per interval: a row per benchmark, a column per mode, then the geometric mean."""
    cols = [c for c in found if c.baseline == f"baseline@{interval}"]
    if not cols:
        return f"(no mode was run at {interval})"
    head = "| Benchmark | " + " | ".join(f"`{c.mode.split('@')[0]}`" for c in cols) + " |"
    lines = [head, "|---|" + "---:|" * len(cols)]
    by = [{r.benchmark: r for r in c.ratios} for c in cols]
    for name in [r.benchmark for r in cols[0].ratios]:
        lines.append(f"| {name} | " + " | ".join(_cell(b.get(name)) for b in by) + " |")
    lines.append("| **geometric mean** | " + " | ".join(_geo(c) for c in cols) + " |")
    lines.append("| 95% interval | " + " | ".join(_span(c) for c in cols) + " |")
    lines.append("| significant (pyperf): slower / faster | " + " | ".join(map(_sig, cols)) + " |")
    return "\n".join(lines)


def _geo(c: Compared) -> str:
    return f"**{c.geomean:.4f}**"


def _span(c: Compared) -> str:
    if math.isnan(c.low):
        return f"n/a ({c.runs} run)"
    return f"{c.low:.4f} to {c.high:.4f}" + (" (across)" if c.unit == "benchmarks" else "")


def _sig(c: Compared) -> str:
    slower = sum(r.significant and r.ratio > 1 for r in c.ratios)
    faster = sum(r.significant and r.ratio < 1 for r in c.ratios)
    return f"{slower} / {faster} of {len(c.ratios)}"


def report(out: Path) -> dict[str, Any]:
    """Analyse ``out``, write ``overhead.md`` and ``overhead.json`` beside the pyperf files."""
    record = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    only = None
    if record.get("names"):  # the subset's rule as it is now, on a run made before a change
        rule = {b.name for b in subset()}
        record["left_out_now"] = sorted(set(record["benchmarks"]) - rule)
        only = {n for b, ns in record["names"].items() if b in rule for n in ns}
    found = analyse(out, only)
    intervals = sorted({c.baseline.split("@")[1] for c in found}, key=lambda s: int(s[:-1]))
    tables = {i: markdown(found, i) for i in intervals}
    text = "\n\n".join(f"### Export interval {i}\n\n{t}" for i, t in tables.items())
    (out / "overhead.md").write_text(text + "\n")
    data = {"run": record, "compared": [asdict(c) for c in found], "tables": tables}
    a, b = out / "baseline@1s.json", out / "baseline@60s.json"
    if a.exists() and b.exists():  # the same SDK twice: what noise alone gives
        data["a_a"] = asdict(compare(a, b, only=only))
    (out / "overhead.json").write_text(json.dumps(data, indent=1))
    return data


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="3 benchmarks, 3 modes, 1 round")
    parser.add_argument("--out", type=Path, help=f"results folder (default: {RESULTS})")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (the size knob)")
    parser.add_argument("--values", type=int, help="values per worker process")
    parser.add_argument("--hours", type=float, help="start no round that would end after this")
    parser.add_argument("--clock", choices=("cpu", "wall"), help="what a value is")
    parser.add_argument("--modes", help="comma-separated mode names (default: all)")
    parser.add_argument("--benchmarks", help="comma-separated benchmark names (default: subset)")
    parser.add_argument("--intervals", help="comma-separated export intervals in s (default 1,60)")
    parser.add_argument("--report-only", type=Path, metavar="DIR", help="analyse a finished run")
    parser.add_argument(
        "--resume", action="store_true", help="keep the results folder, run what it lacks"
    )
    return parser.parse_args()


def main() -> int:
    args = arguments()
    if args.report_only:
        print(report(args.report_only)["tables"] and (args.report_only / "overhead.md").read_text())
        return 0
    plan = SMOKE if args.smoke else FULL
    changes: dict[str, Any] = {}
    for key in ("rounds", "values", "clock", "hours"):
        if getattr(args, key):
            changes[key] = getattr(args, key)
    if args.modes:
        changes["modes"] = tuple(args.modes.split(","))
    if args.benchmarks:
        changes["benchmarks"] = tuple(args.benchmarks.split(","))
    if args.intervals:
        changes["intervals"] = tuple(int(s) for s in args.intervals.split(","))
    plan = replace(plan, **changes)
    with tempfile.TemporaryDirectory(prefix="overhead-smoke-") as tmp:
        out = args.out or (Path(tmp) if args.smoke else RESULTS)
        record = run(plan, out, resume=args.resume)
        data = report(out)
    print((data["tables"] and "\n\n".join(data["tables"].values())) or "no comparison")
    log(f"done in {record['duration_s']} s")
    return smoke_check(data) if args.smoke else 0


def smoke_check(data: dict[str, Any]) -> int:
    """The smoke run asserts that every worker ran its mode, and every mode every benchmark.

    Nothing about time.
    """
    run_ = data["run"]
    if run_["failed"]:
        log(f"SMOKE FAILED: {run_['failed'][:2]}")
        return 1
    for name, w in run_["workers"].items():
        if w["wrong"] or w["workers"] < w["wanted_at_least"]:
            log(f"SMOKE FAILED: {name}: {w}")
            return 1
    wanted = len(run_["modes"]) - 1
    got = [c for c in data["compared"] if len(c["ratios"]) == len(run_["benchmarks"])]
    if len(got) != wanted:
        log(f"SMOKE FAILED: {len(got)} of {wanted} modes have every benchmark")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
