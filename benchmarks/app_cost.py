"""What the package costs the application: overhead.py, webapp.py, heap.py; their goals; the page.

    python benchmarks/app_cost.py                    # both, full (hours), then the docs page
    python benchmarks/app_cost.py --smoke            # both smoke runs (CI, about a minute)
    python benchmarks/app_cost.py --overhead-rounds 1 --webapp-rounds 1   # a smaller full run
    python benchmarks/app_cost.py --render-only      # the page again from benchmarks/results/

Each benchmark runs in a child process and writes its own results folder
(``results/overhead``, ``results/webapp``); the page's prose is
``app_cost_template.md``. ``run.py`` calls this after its own phases.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PAGE = ROOT / "docs" / "application-cost.md"
sys.path.insert(0, str(HERE))

import heap  # noqa: E402
import instructions  # noqa: E402
import machine  # noqa: E402
import overhead  # noqa: E402
import webapp  # noqa: E402
from report import fill  # noqa: E402

ASYNCIO_PREFIXES = ("async", "coroutines")
"""pyperf names of pyperformance's asyncio group, for a run that did not record them."""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def measure(smoke: bool, overhead_args: list[str], webapp_args: list[str]) -> int:
    """Both benchmarks, each in a child process; the first non-zero exit status."""
    status = 0
    runs = (("overhead.py", overhead_args), ("webapp.py", webapp_args), ("heap.py", []))
    for script, extra in runs:
        command = [sys.executable, str(HERE / script), *(["--smoke"] if smoke else []), *extra]
        log(" ".join(["python", f"benchmarks/{script}", *command[2:]]))
        done = subprocess.run(command, stdout=subprocess.DEVNULL if smoke else None)
        status = status or done.returncode
    return status


# --- goals ----------------------------------------------------------------------


def _verdict(low: float, high: float, limit: float) -> str:
    if math.isnan(low):
        return "not resolved (one run)"
    if high <= limit:
        return "**met**"
    if low > limit:
        return "**missed**"
    return "not resolved (the 95% interval straddles the goal)"


def _rounds_for(c: dict[str, Any], target: float) -> str:
    """How many rounds would narrow the interval to +-``target``, if it is wider.

    Intervals narrow as one over the square root of the rounds; from one round
    (values resampled) this is a lower bound, since processes differ more than values.
    """
    half = (c["high"] - c["low"]) / 2
    if math.isnan(half) or half <= target:
        return ""
    rounds = max(1, c["runs"]) * (half / target) ** 2
    bound = "at least " if c.get("unit") == "values" else "about "
    return f"; ±{half:.2%} now, ±{target:.1%} needs {bound}{math.ceil(round(rounds, 6))} rounds"


def _geo(compared: list[dict[str, Any]], mode: str) -> dict[str, Any] | None:
    return next((c for c in compared if c["mode"] == mode), None)


def _asyncio_names(run: dict[str, Any]) -> set[str]:
    names, tags = run.get("names") or {}, run.get("tags") or {}
    if names:
        return {n for b, ns in names.items() if "asyncio" in tags.get(b, ()) for n in ns}
    return {n for ns in [run.get("benchmarks", [])] for n in ns if n.startswith(ASYNCIO_PREFIXES)}


def overhead_goals(data: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows = []
    compared = data["compared"]
    for interval, limit in (("60s", 1.005), ("1s", 1.01)):
        c = _geo(compared, f"defaults@{interval}")
        if c is None:
            continue
        rows.append(
            (
                f"Defaults at a {interval[:-1]} s interval, geometric mean over "
                f"{len(c['ratios'])} benchmarks (CPU time)",
                f"<= {limit:.3f}x",
                f"{c['geomean']:.4f}x [{c['low']:.4f}, {c['high']:.4f}]",
                _verdict(c["low"], c["high"], limit) + _rounds_for(c, limit - 1),
            )
        )
    aa = data.get("a_a")
    if aa:
        rows.append(
            (
                "Noise floor (not a goal): the baseline at 60 s against the baseline at 1 s, "
                "where only an empty export a second differs",
                "1.000x",
                f"{aa['geomean']:.4f}x [{aa['low']:.4f}, {aa['high']:.4f}]",
                "what this run can resolve",
            )
        )
    c = _geo(compared, "event_loop@1s")
    wanted = _asyncio_names(data["run"])
    if c is not None and wanted:
        ratios = [r["ratio"] for r in c["ratios"] if r["benchmark"] in wanted]
        base = _geo(compared, "defaults@1s")
        if ratios:
            geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
            also = ""
            if base is not None:
                br = [r["ratio"] for r in base["ratios"] if r["benchmark"] in wanted]
                also = f" (defaults alone: {math.exp(sum(map(math.log, br)) / len(br)):.3f}x)"
            rows.append(
                (
                    f"`event_loop=True` on the {len(ratios)} asyncio benchmarks, 1 s",
                    "<= 1.02x",
                    f"{geo:.3f}x{also}",
                    "**met**" if geo <= 1.02 else "**missed** (point estimate)",
                )
            )
    return rows


def webapp_goals(record: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows = []
    summary = webapp.summarise(record)
    base = {(r["server"], r["load"]): r["spread"] for r in summary if r["mode"] == "baseline"}

    def verdict(met: bool, server: str, load: str, figure: str, limit: float) -> str:
        spread = base.get((server, load), {}).get(figure, 0.0) * 100
        if spread > abs(limit):  # the baseline's own rounds differ by more than the goal
            return f"not resolved (the baseline's rounds differ by {spread:.0f}%)"
        return _ok(met)

    for r in summary:
        if r["mode"] not in ("defaults", "event_loop"):
            continue
        q = r["ratio"]
        where = f"{r['server']}, {'fixed rate' if r['load'] == 'fixed' else 'saturation'}"
        if r["mode"] == "event_loop":
            if r["load"] == "saturation":
                t = round((q["throughput"] - 1) * 100, 1)
                rows.append(
                    (
                        f"`event_loop=True`, {where}: throughput",
                        ">= -2%",
                        f"{t:+.1f}%",
                        verdict(t >= -2, r["server"], r["load"], "throughput", 2),
                    )
                )
            continue
        if r["load"] == "saturation":
            t = round((q["throughput"] - 1) * 100, 1)
            met = verdict(t >= -1, r["server"], r["load"], "throughput", 1)
            rows.append((f"Defaults, {where}: throughput", ">= -1%", f"{t:+.1f}%", met))
        p = round((q["p99"] - 1) * 100, 1)
        met = verdict(p <= 2, r["server"], r["load"], "p99", 2)
        rows.append((f"Defaults, {where}: p99 latency", "<= +2%", f"{p:+.1f}%", met))
    idle = {i["mode"]: i["per_worker_us_per_s"] for i in record.get("idle", [])}
    default_loop = "uvloop" if record.get("uvloop", True) else "asyncio's loop"
    pairs = (
        ("event_loop", "defaults", default_loop),
        ("event_loop/asyncio", "defaults/asyncio", "asyncio's loop"),
    )
    for probe, base, loop in pairs:
        if probe in idle and base in idle:
            extra = idle[probe] - idle[base]
            rows.append(
                (
                    f"An idle worker on {loop}, `event_loop=True` (CPU beyond the defaults')",
                    "<= 500 µs/s",
                    f"{extra:,.0f} µs/s",
                    "**met**" if extra <= 500 else "**missed** (one idle window per mode)",
                )
            )
    return rows


def _ok(met: bool) -> str:
    return "**met** (medians of the rounds)" if met else "**missed** (medians of the rounds)"


def heap_goals() -> list[tuple[str, str, str, str]]:
    """The goal on the objects a full collection walks, from ``results/heap.json``."""
    if not heap.RESULT.exists():
        return []
    found = {h["mode"]: h for h in json.loads(heap.RESULT.read_text())}
    ours, peer = found["defaults"], found["peer"]
    return [
        (
            "GC-tracked objects that instrumenting adds beyond the base instrumentor, defaults",
            f"<= {heap.GOAL:,} (the peer: {peer['objects']:,})",
            f"{ours['objects']:,} ({ours['modules']} modules; the peer's {peer['modules']})",
            "**met**" if ours["objects"] <= heap.GOAL else "**missed**",
        )
    ]


def goals_table(rows: list[tuple[str, str, str, str]]) -> str:
    lines = ["| Goal | Required | Measured | Verdict |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


# --- the page -------------------------------------------------------------------


def values() -> dict[str, str]:
    """The page's placeholders, from the results folders."""
    ov = json.loads((overhead.RESULTS / "overhead.json").read_text())
    web = json.loads((webapp.RESULTS / "webapp.json").read_text())
    meta = json.loads((webapp.RESULTS.parent / "app_cost.json").read_text())
    run, plan = ov["run"], ov["run"]["plan"]
    done = run.get("rounds_done", plan["rounds"])
    rounds = f"{done} round{'s' if done > 1 else ''}" if done else "part of one round"
    tables = webapp.markdown(web)
    idle = {i["mode"]: i for i in web["idle"]}
    total = ""
    if "defaults" in idle and "baseline" in idle:
        d, b, ip = idle["defaults"], idle["baseline"], web.get("idle_plan", web["plan"])
        total = (
            f"An idle uvicorn of {d['workers']} workers (and its supervisor) used "
            f"{d['cpu_per_s'] * 1e3:.1f} ms of CPU per second with the defaults, against "
            f"{b['cpu_per_s'] * 1e3:.1f} ms with the SDK alone: "
            f"{(d['cpu_per_s'] - b['cpu_per_s']) * 100:.2f}% of one core for the package, "
            f"measured on a real {d['workers']}-worker server, over "
            f"{ip['idle_seconds']:g} s after {ip['idle_settle']:g} s of settling, exports every "
            f"{web['interval_ms'] / 1000:g} s."
        )
    return {
        "when": meta["when"],
        "commit": meta["commit"],
        "note": meta.get("note", ""),
        "machine": meta["machine"],
        "goals": goals_table(overhead_goals(ov) + webapp_goals(web) + heap_goals()),
        "overhead_plan": (
            f"{_done(ov)} of the subset's {len(run['benchmarks'])} benchmarks, {rounds} of "
            f"{plan['processes']} worker process per benchmark and mode, {plan['values']} values "
            f"of at least {plan['min_time']} s after {plan['warmups']} warm-up, clock: "
            f"{plan['clock']}; {run['duration_s'] / 3600:.1f} hours for {len(run['modes'])} modes"
            + (f"; {run['stopped']}" if run.get("stopped") else "")
        ),
        "overhead_1s": ov["tables"].get("1s", "(not run)"),
        "overhead_60s": ov["tables"].get("60s", "(not run)"),
        "webapp_plan": (
            f"{web['plan']['rounds']} rounds of {web['plan']['seconds']:g} s per load; fixed "
            f"rates {', '.join(f'{k} {v}/s' for k, v in web['rates'].items())} "
            f"({web['plan']['fraction']:.0%} of each baseline's throughput at saturation); wrk "
            f"with {web['plan']['connections']} connections; {web['duration_s'] / 60:.0f} minutes"
        ),
        "webapp_fixed": tables["fixed"],
        "webapp_saturation": tables["saturation"],
        "webapp_idle": tables["idle"],
        "idle_total": total,
        "heap": heap.markdown([heap.Heap(**h) for h in json.loads(heap.RESULT.read_text())])
        if heap.RESULT.exists()
        else "(not run)",
        "subset_rule": _rule(),
    } | instructions.page()


def _done(ov: dict[str, Any]) -> int:
    """The subset's benchmarks that ran in every mode (their pyperf names all compared)."""
    compared = {r["benchmark"] for c in ov["compared"][:1] for r in c["ratios"]}
    names = ov["run"].get("names") or {}
    return sum(1 for b in ov["run"]["benchmarks"] if set(names.get(b, [b])) & compared)


def _rule() -> str:
    """The subset's rule, from the docstring of ``overhead.subset``, as Markdown."""
    text = " ".join(line.strip() for line in overhead.subset.__doc__.split("\n\n")[1].splitlines())
    text = text.removeprefix("Rule: ").replace("``", "`")
    return text.replace(" (`NAMED`)", "")


def render() -> None:
    template = (HERE / "app_cost_template.md").read_text()
    PAGE.write_text(fill(template, values()))
    log(f"wrote {PAGE.relative_to(ROOT)}")


def record_meta(note: str = "") -> None:
    """When, on what and on which commit the figures were measured; ``note`` goes on the page."""
    info = machine.describe()
    meta = {
        "note": note,
        "when": info["date"],
        "commit": machine.src_commit(),
        "machine": f"{machine.cpu(info)}, {info['logical_cpus']} CPUs, {info['python']}, "
        f"{info['os']}; load average at the start {info['loadavg_start'][0]:.1f}",
    }
    webapp.RESULTS.parent.mkdir(parents=True, exist_ok=True)
    (webapp.RESULTS.parent / "app_cost.json").write_text(json.dumps(meta, indent=1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--render-only", action="store_true")
    parser.add_argument("--overhead-rounds", type=int)
    parser.add_argument("--webapp-rounds", type=int)
    parser.add_argument("--note", default="", help="a paragraph for the top of the page")
    parser.add_argument("--meta-only", action="store_true", help="record when and on what, only")
    args = parser.parse_args()
    if args.meta_only:
        record_meta(args.note)
        return 0
    if args.render_only:
        render()
        return 0
    ov = ["--rounds", str(args.overhead_rounds)] if args.overhead_rounds else []
    web = ["--rounds", str(args.webapp_rounds)] if args.webapp_rounds else []
    if not args.smoke:
        record_meta(args.note)
    status = measure(args.smoke, ov, web)
    if status == 0 and not args.smoke:
        render()
    return status


if __name__ == "__main__":
    sys.exit(main())
