"""Benchmark of the refresh configurations, side by side with the peers, in one run.

    python benchmarks/run.py            # full run (a few minutes): results/ and docs/benchmarks.md
    python benchmarks/run.py --smoke    # CI: a few iterations of every phase; asserts only counts

See docs/benchmarks.md for the method and the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import analysis  # noqa: E402
import breakdown  # noqa: E402
import configs  # noqa: E402
import counts  # noqa: E402
import machine  # noqa: E402
import memory  # noqa: E402
import percpu  # noqa: E402
import report  # noqa: E402
import scaling  # noqa: E402
import subjects  # noqa: E402
import timing  # noqa: E402


@dataclass(frozen=True)
class Plan:
    """How much of everything: the full run and the smoke run differ only here."""

    rounds: int
    pause: float
    back_to_back: int
    thread_counts: tuple[int, ...]
    thread_rounds: int
    metric_ks: tuple[int, ...]
    metric_rounds: int
    percpu_rounds: int
    synthetic_cpus: tuple[int, ...]
    rss_repeats: int
    leak_collections: int
    count_collections: int
    bootstrap: int
    breakdown_rounds: int


FULL = Plan(
    rounds=300,
    pause=0.03,
    back_to_back=200,
    thread_counts=(0, 16, 64, 128, 256),
    thread_rounds=60,
    metric_ks=(1, 2, 4, 8, 12, 16, 23, 30, 36),
    metric_rounds=40,
    percpu_rounds=100,
    synthetic_cpus=(2, 16, 64, 256),
    rss_repeats=5,
    leak_collections=20_000,
    count_collections=3,
    bootstrap=2000,
    breakdown_rounds=60,
)
SMOKE = Plan(
    rounds=3,
    pause=0.002,
    back_to_back=3,
    thread_counts=(0, 4),
    thread_rounds=2,
    metric_ks=(1, 23),
    metric_rounds=2,
    percpu_rounds=3,
    synthetic_cpus=(2, 8),
    rss_repeats=1,
    leak_collections=200,
    count_collections=1,
    bootstrap=50,
    breakdown_rounds=2,
)


QUIET = False  # the smoke run prints its report only


def log(message: str) -> None:
    if not QUIET:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_counts(plan: Plan, workdir: Path) -> dict[str, Any]:
    """Exact counts in child processes: audit hook always, strace when installed."""
    script = str(HERE / "counts.py")
    n = str(plan.count_collections)
    out = subprocess.run(
        [sys.executable, script, "--mode", "audit", "--collections", n],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    found: dict[str, Any] = {"audit": json.loads(out.stdout), "strace": None}
    strace = shutil.which("strace")
    if strace and sys.platform.startswith("linux"):
        log_file = workdir / "strace.log"
        cmd = [strace, "-f", "-qq", "-e", "trace=open,openat,openat2", "-o", str(log_file)]
        base = [sys.executable, script, "--mode", "strace", "--collections", n]
        fast = [*cmd[:1], "--seccomp-bpf", *cmd[1:], *base]
        done = subprocess.run(fast, capture_output=True, timeout=300)
        if done.returncode != 0:  # an older strace, or seccomp refused: plain ptrace
            done = subprocess.run([*cmd, *base], capture_output=True, timeout=600)
        if done.returncode == 0:
            found["strace"] = counts.parse_strace(log_file.read_text())
        else:
            found["strace_error"] = done.stderr.decode(errors="replace")[-500:]
        log_file.unlink(missing_ok=True)
    return found


def render_only(path: Path) -> int:
    results = json.loads(path.read_text())
    (path.parent / "summary.md").write_text(report.summary(results))
    docs = report.docs(results, (HERE / "docs_template.md").read_text())
    (ROOT / "docs" / "benchmarks.md").write_text(docs)
    log(f"rewrote {path.parent / 'summary.md'} and docs/benchmarks.md from {path}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a few iterations (CI)")
    parser.add_argument(
        "--out",
        type=Path,
        help="results folder (default: benchmarks/results, or a temporary folder with --smoke)",
    )
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    parser.add_argument("--rounds", type=int, help="override the number of interleaved rounds")
    parser.add_argument(
        "--render-only",
        type=Path,
        metavar="RESULTS_JSON",
        help="measure nothing: rewrite summary.md and docs/benchmarks.md from a results.json",
    )
    args = parser.parse_args()
    if args.render_only:
        return render_only(args.render_only)
    global QUIET
    QUIET = args.smoke
    plan = SMOKE if args.smoke else FULL
    if args.rounds:
        plan = Plan(**{**asdict(plan), "rounds": args.rounds})
    tmp = tempfile.TemporaryDirectory(prefix="bench-")
    out = args.out or (Path(tmp.name) if args.smoke else HERE / "results")
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    info = machine.describe()
    info["mode"] = "smoke" if args.smoke else "full"
    info["plan"] = asdict(plan)
    log(f"{info['mode']} run on {info['cpu_model']}, {info['logical_cpus']} CPUs")

    log("counts: psutil calls and opens per collection (child processes)")
    counts = run_counts(plan, Path(tmp.name))

    idle = subjects.IdleThreads()
    idle.resize(configs.WITH_THREADS_N)
    log("building every configuration (one warm-up collection each)")
    main_subjects = subjects.build_main()
    fresh = {
        s.name: s.collect.check_fresh()
        for s in main_subjects
        if isinstance(s.collect, subjects.KernelFloor)
    }
    descriptions = {s.name: s.description for s in main_subjects}
    shapes = {
        s.name: {
            "group": s.group,
            "instruments": s.instruments,
            "points": s.points,
            "description": s.description,
            "sources": [x.name for x in s.live.cache.sources] if s.live else [],
        }
        for s in main_subjects
    }

    est = plan.rounds * len(main_subjects) * (plan.pause + 0.002)
    log(
        f"interleaved: {plan.rounds} rounds x {len(main_subjects)} subjects, "
        f"{plan.pause * 1e3:.0f} ms pause before each (about {est:.0f} s)"
    )
    main_run = timing.interleaved(main_subjects, plan.rounds, plan.pause, budget=900)
    log(f"back to back: {plan.back_to_back} collections per subject, no pause")
    b2b = timing.back_to_back(main_subjects, plan.back_to_back)

    log("per-CPU work")
    cpu_host = percpu.host(plan.percpu_rounds, plan.pause)
    cpu_synth = percpu.synthetic(list(plan.synthetic_cpus), plan.percpu_rounds)

    for s in main_subjects:
        s.close()

    log("breakdown: the parts of one collection of ours")
    parts = {
        name: breakdown.breakdown(name, plan.breakdown_rounds, plan.pause)
        for name in ("process_set", "default")
    }
    idle.resize(0)

    log("scaling: threads")
    threads = scaling.threads(list(plan.thread_counts), plan.thread_rounds, plan.pause, idle)
    log("scaling: number of metrics")
    metric_sweep = scaling.metrics(list(plan.metric_ks), plan.metric_rounds, plan.pause)

    log("memory: RSS in child processes")
    rss = memory.rss(plan.rss_repeats)
    log(f"memory: tracemalloc over {plan.leak_collections} collections (two children)")
    leaks = memory.leaks(
        [("default", plan.leak_collections), ("with_threads", plan.leak_collections // 4)]
    )
    info["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    info["duration_s"] = round(time.monotonic() - started)

    benches = timing.to_benchmarks("interleaved", main_run, descriptions)
    benches += timing.to_benchmarks("back_to_back", b2b, descriptions)
    pyperf_meta = {
        "cpu_model_name": str(info["cpu_model"]),
        "cpu_count": str(info["logical_cpus"]),
        "python_version": str(info["python"]),
        "platform": f"{info['os']}, Linux {info['kernel']}",
    }
    timing.dump_suite(benches, str(out / "bench.json"), pyperf_meta)

    results = analysis.analyse(
        info=info,
        shapes=shapes,
        main_run=main_run,
        b2b=b2b,
        counts=counts,
        fresh=fresh,
        parts=parts,
        cpu_host=cpu_host,
        cpu_synth=cpu_synth,
        threads=threads,
        metric_sweep=metric_sweep,
        rss=rss,
        leaks=leaks,
        resamples=plan.bootstrap,
    )
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    summary = report.summary(results)
    (out / "summary.md").write_text(summary)
    if not args.smoke and not args.no_docs:
        docs = report.docs(results, (HERE / "docs_template.md").read_text())
        (ROOT / "docs" / "benchmarks.md").write_text(docs)
        log("wrote docs/benchmarks.md")
    log(f"wrote {out}/bench.json, results.json, summary.md in {info['duration_s']} s")
    problems = analysis.check_counts(results)
    if args.smoke:
        print(report.smoke(results))
    for p in problems:
        log(f"COUNT CHECK FAILED: {p}")
    tmp.cleanup()
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
