"""The benchmark: this package beside the peers, the SDK floor and bare reads, in one run.

    python benchmarks/run.py            # full run: results/, plots and docs/benchmarks.md
    python benchmarks/run.py --smoke    # CI: every phase a few times; asserts only exact counts

The method and the figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PLOTS = ROOT / "docs" / "_static" / "benchmarks"
sys.path.insert(0, str(HERE))

import analysis  # noqa: E402
import components  # noqa: E402
import configs  # noqa: E402
import counts  # noqa: E402
import crowds  # noqa: E402
import instructions  # noqa: E402
import latency  # noqa: E402
import machine  # noqa: E402
import memory  # noqa: E402
import page_check  # noqa: E402
import percpu  # noqa: E402
import report  # noqa: E402
import scaling  # noqa: E402
import timing  # noqa: E402
from analysis import Check  # noqa: E402
from latency import Lateness  # noqa: E402
from report import Results  # noqa: E402
from subjects import Shape  # noqa: E402

RUNTIME_DIR_ENV = "OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"


@dataclass(frozen=True)
class Plan:
    """How much of everything: the full run and the smoke run differ only here."""

    rounds: int
    pause: float
    back_to_back: int
    thread_xs: tuple[int, ...]
    socket_xs: tuple[int, ...]
    cpu_xs: tuple[int, ...]
    sweep_rounds: int
    latency_seconds: float
    latency_blocks: int
    rss_repeats: int
    leak_collections: int
    count_collections: int
    smoke: bool


FULL = Plan(
    rounds=200, pause=0.03, back_to_back=200, thread_xs=(0, 100, 500, 2000),
    socket_xs=(0, 1000, 10_000), cpu_xs=(2, 16, 64, 256), sweep_rounds=40, latency_seconds=2.0,
    latency_blocks=3, rss_repeats=5, leak_collections=20_000, count_collections=2, smoke=False,
)  # fmt: skip
SMOKE = Plan(
    rounds=3, pause=0.002, back_to_back=3, thread_xs=(0, 20), socket_xs=(0, 100), cpu_xs=(2, 8),
    sweep_rounds=2, latency_seconds=0.1, latency_blocks=1, rss_repeats=1, leak_collections=200,
    count_collections=1, smoke=True,
)  # fmt: skip


QUIET = False  # the smoke run prints its report only


def log(message: str) -> None:
    if not QUIET:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main_run(plan: Plan) -> analysis.MainRun:
    """Ours, the peers, their SDK floors and bare reads, interleaved, then back to back."""
    timed = configs.build_main()
    log(f"main run: {plan.rounds} rounds x {len(timed)} subjects, {plan.pause * 1e3:g} ms pauses")
    samples = timing.interleaved(timed, plan.rounds, plan.pause, budget=900)
    log(f"back to back: {plan.back_to_back} collections per subject")
    b2b = timing.back_to_back(timed, plan.back_to_back, budget=120)
    run = analysis.MainRun(
        samples=samples,
        stats={k: timing.stat(v) for k, v in samples.values.items() if v},
        shapes={s.name: s.shape for s in timed},
        groups={s.name: s.group for s in timed},
        descriptions={s.name: s.description for s in timed},
        refresh={s.name: _median(s.refresh) for s in timed if s.refresh},
        back_to_back={k: timing.stat(v) for k, v in b2b.values.items() if v},
    )
    for s in timed:
        s.close()
    return run


def _median(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


def thread_phase(plan: Plan) -> tuple[scaling.Sweep, list[Lateness]]:
    sweep_plan = scaling.Plan(plan.sweep_rounds, plan.pause, budget=240)
    idle = crowds.IdleThreads()
    log(f"threads: {plan.thread_xs} idle threads")
    threads = scaling.threads(plan.thread_xs, sweep_plan, idle)
    x = 500 if 500 in plan.thread_xs else max(plan.thread_xs)
    log(f"GIL lateness at {x} idle threads")
    idle.resize(x)
    timed = scaling.ours({k: v for k, v in configs.threads().items() if k != "per_thread_cap10"})
    try:
        for s in timed:
            s.warm_up()
        late = latency.measure(timed, plan.latency_seconds, plan.latency_blocks)
    finally:
        for s in timed:
            s.close()
        idle.resize(0)
    return threads, late


def count_instructions(smoke: bool) -> dict[str, Any]:
    """Instructions between collections and per collection (instructions.py); {} without a
    counter, except under CI, where that fails the run."""
    if not instructions.counter().tool and os.environ.get("CI") != "true":
        log("instructions: not counted, no valgrind (apt-get install valgrind) nor perf counter")
        return {}
    return instructions.measure(instructions.plan(smoke), log)


def measure(plan: Plan, info: dict[str, Any], out: Path) -> Results:
    log("counts: opens and psutil calls per collection (child processes)")
    found = counts.measure(plan.count_collections)
    counted = count_instructions(plan.smoke)
    run = main_run(plan)
    threads, late = thread_phase(plan)
    log(f"sockets: {plan.socket_xs} loopback sockets")
    sweep_plan = scaling.Plan(plan.sweep_rounds, plan.pause, budget=240)
    sockets = scaling.sockets(plan.socket_xs, sweep_plan)
    log(f"CPUs: procfs files of {plan.cpu_xs} CPUs")
    cpus = percpu.cpus(plan.cpu_xs, sweep_plan)
    log("memory: RSS and tracemalloc in child processes")
    rss = memory.rss(plan.rss_repeats)
    leaks = memory.leaks(
        [("default", plan.leak_collections), ("everything", plan.leak_collections // 4)]
    )
    log("components: pyperf scripts, each in a child process")
    parts = components.measure_all(plan.smoke, out)
    return Results(info, run, threads, sockets, cpus, late, found, rss, leaks, parts, counted)


def analyse(r: Results) -> None:
    r.goals = analysis.goals(r.main, r.threads, r.sockets, r.counts)
    r.checks = analysis.checks(r.counts)
    r.breakdowns = [
        analysis.breakdown(r.main, "default", "bare_default"),
        analysis.breakdown(r.main, "everything", None),
    ]


def write(r: Results, out: Path, *, docs: bool) -> dict[str, str]:
    """bench.json (pyperf), results.json, summary.md; with ``docs``, the docs page."""
    samples = {"main": r.main.samples} | {
        f"{s.name}/{p.x}": timing.Samples(p.values)
        for s in (r.threads, r.sockets, r.cpus)
        for p in s.points
    }
    meta = {"cpu_model_name": str(r.info["cpu_model"]), "python_version": str(r.info["python"])}
    timing.dump_suite(samples, r.main.descriptions, str(out / "bench.json"), meta)
    values = report.tables(r) | report.figures(r)
    data = {"results": _plain(r), "placeholders": values}
    (out / "results.json").write_text(json.dumps(data, indent=1, default=str))
    (out / "summary.md").write_text(report.summary(values))
    if docs:
        render(values)
    return values


def _plain(r: Results) -> dict[str, Any]:
    """The typed results as JSON, without the raw samples (they are in bench.json)."""
    found = asdict(r)
    found["main"].pop("samples")
    found.pop("instructions")  # in instructions.json
    for name in ("threads", "sockets", "cpus"):
        for p in found[name]["points"]:
            p.pop("values")
    return found


def render(values: dict[str, str]) -> None:
    template = (HERE / "docs_template.md").read_text()
    (ROOT / "docs" / "benchmarks.md").write_text(report.fill(template, values))
    log("wrote docs/benchmarks.md")


def render_only(path: Path) -> int:
    data = json.loads(path.read_text())
    values = data["placeholders"] | sweep_tables(data["results"]) | instructions.page()
    (path.parent / "summary.md").write_text(report.summary(values))
    render(values)
    return 0


def sweep_tables(results: dict[str, Any]) -> dict[str, str]:
    """The sweep tables again, from a results.json's typed results (after a format change)."""
    found = {}
    for name, columns in (
        ("threads", report.THREAD_COLUMNS),
        ("sockets", report.SOCKET_COLUMNS),
        ("cpus", report.CPU_COLUMNS),
    ):
        raw = results[name]
        points = [
            scaling.Point(
                p["x"],
                {k: timing.Stat(**v) for k, v in p["stats"].items()},
                {k: Shape(**v) for k, v in p["shapes"].items()},
                {},
            )
            for p in raw["points"]
        ]
        sweep = scaling.Sweep(raw["name"], raw["axis"], points, raw["groups"], raw["descriptions"])
        found[name] = report.sweep_table(sweep, columns)
    return found


def counts_only(path: Path) -> int:
    """Count again (exact, no timing), and rewrite the counts part of results.json and the page.

    The timed figures stay those of the last full run; the page says when each was made.
    """
    data = json.loads(path.read_text())
    found = counts.measure(FULL.count_collections)
    info = machine.describe()
    log("instructions: between collections, per collection, the probes (about 40 minutes)")
    counted = count_instructions(smoke=False)
    if counted:
        instructions.record(counted, info)
    values = data["placeholders"] | sweep_tables(data["results"]) | instructions.page()
    values |= report.count_tables(found, info)
    # The peer's and the bare baselines' rows stay as counted: this package's change
    # cannot touch them, and their counts move with the host.
    values["counts"] = page_check.keep_others(page_check.PAGE.read_text(), values["counts"])
    timed = data["results"]["info"]
    values.setdefault("run_when", f"{timed['date']} on {machine.cpu(timed)}")
    opens = report.goals([analysis.opens_goal(found)]).splitlines()[-1]
    values["goals"] = "\n".join(
        opens if line.startswith("| Opens per collection") else line
        for line in values["goals"].splitlines()
    )
    data["results"]["counts"] = [asdict(c) for c in found]
    data["placeholders"] = values
    path.write_text(json.dumps(data, indent=1, default=str))
    (path.parent / "summary.md").write_text(report.summary(values))
    render(values)
    import app_cost

    app_cost.render()
    checks = analysis.checks(found)
    for c in checks:
        log(f"{'ok' if c.ok else 'FAILED'}: {c.what}: {c.measured}")
    return 0 if all(c.ok for c in checks) else 1


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a few iterations (CI)")
    parser.add_argument("--out", type=Path, help="results folder (default: benchmarks/results)")
    parser.add_argument("--no-docs", action="store_true", help="leave the docs and plots alone")
    parser.add_argument("--rounds", type=int, help="override the main run's interleaved rounds")
    parser.add_argument("--no-app-cost", action="store_true", help="skip heap.py and its page")
    parser.add_argument(
        "--render-only",
        type=Path,
        metavar="RESULTS_JSON",
        help="measure nothing: rewrite summary.md and the docs page from a results.json",
    )
    parser.add_argument(
        "--counts-only",
        type=Path,
        metavar="RESULTS_JSON",
        help="count again (exact, untimed) and rewrite the counts in a results.json and the page",
    )
    return parser.parse_args()


def main() -> int:
    args = arguments()
    if args.render_only:
        return render_only(args.render_only)
    if args.counts_only:
        return counts_only(args.counts_only)
    global QUIET
    QUIET = args.smoke
    plan = replace(
        SMOKE if args.smoke else FULL, **({"rounds": args.rounds} if args.rounds else {})
    )
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        # Elections of its own: another instrumented process of this user in this cgroup
        # (a test run, a second benchmark) would otherwise take the shared metrics' role,
        # and the subjects that time them would report no points.
        os.environ[RUNTIME_DIR_ENV] = str(Path(tmp) / "rundir")
        out = args.out or (Path(tmp) if args.smoke else HERE / "results")
        out.mkdir(parents=True, exist_ok=True)
        status = run(plan, out, smoke=args.smoke, docs=not (args.smoke or args.no_docs))
        del os.environ[RUNTIME_DIR_ENV]  # heap.py's children each have their own
    if args.no_app_cost:
        return status
    return app_cost(smoke=args.smoke, docs=not args.no_docs) or status


def app_cost(*, smoke: bool, docs: bool) -> int:
    """The heap (heap.py, in child processes), then the application-cost page."""
    import app_cost as cost

    log("application cost: heap.py" + (" (smoke)" if smoke else ", then the page"))
    heap = [sys.executable, str(HERE / "heap.py"), *(["--smoke"] if smoke else [])]
    status = subprocess.run(heap, stdout=subprocess.DEVNULL if smoke else None).returncode
    if status == 0 and docs and not smoke:
        cost.render()
    if smoke:
        print(f"application cost smoke run (heap.py): {'ok' if status == 0 else 'FAILED'}")
    return status


def run(plan: Plan, out: Path, *, smoke: bool, docs: bool) -> int:
    started = time.monotonic()
    info = machine.describe() | {"mode": "smoke" if smoke else "full", "pause_ms": plan.pause * 1e3}
    log(f"{info['mode']} run on {info['cpu_model']}, {info['logical_cpus']} CPUs")
    r = measure(plan, info, out)
    info["loadavg_end"] = os.getloadavg()
    info["duration_s"] = round(time.monotonic() - started)
    analyse(r)
    if r.instructions and not smoke:
        instructions.record(r.instructions, info)
    if docs:
        import plots

        made = plots.draw_all([r.threads, r.sockets, r.cpus], PLOTS)
        r.plots = [str(p.relative_to(ROOT / "docs")) for p in made]
    values = write(r, out, docs=docs)
    log(f"wrote {out} in {info['duration_s']} s")
    if smoke:
        page = page_check.PAGE.read_text()
        ok, measured = page_check.counts_check(page, values["counts"], r.counts, info)
        r.checks.append(Check(page_check.WHAT, measured, ok))
        if r.instructions:
            ok, measured = instructions.check(r.instructions, info)
            took = f" (counted in {r.instructions['minutes']} min)"
            r.checks.append(Check(instructions.WHAT, measured + took, ok))
        print(report.smoke(r.checks, r.main.samples.rounds, info["duration_s"]))
        print(page_check.staleness(page))
    failed = [c for c in r.checks if not c.ok]
    for c in failed:
        log(f"COUNT CHECK FAILED: {c.what}: {c.measured}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
