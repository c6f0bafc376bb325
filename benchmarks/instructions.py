"""What the package costs, in instructions: between collections, and per collection.

Times on a shared 2-core machine move by a percent between rounds; instruction
counts of the same work do not. Each count is the instructions of a whole
child process under Valgrind's cachegrind (``--cache-sim=no``), or under
``perf stat -e instructions:u`` where valgrind is missing and the machine has a
hardware counter, less the same process without the work:

- **between collections**: the SDK (a ``MeterProvider``, an in-memory reader,
  one collection), then ``sdk`` nothing more, ``defaults`` the package's
  ``ProcessInstrumentor().instrument()``, or ``peer``
  ``SystemMetricsInstrumentor().instrument()``; then deterministic work, with
  no collection inside it: four kinds of work of our own, and a subset of
  pyperformance's benchmarks at fixed loop counts (their scripts run with a
  stand-in for ``pyperf.Runner`` that calls each benchmark's function with the
  given loops: no calibration, no worker). Every process of a suite loads the
  whole suite first, so that a work's count holds nothing but its loops.
- **per collection**: each configuration of ``configs.counted()`` and the
  peer's, collected ``COLLECTIONS`` times 0.15 s apart, less the same process
  that sleeps as long without collecting.

Counts are made with ``PYTHONHASHSEED=0``, without address randomisation
(``setarch -R``), in a private network and PID namespace (``unshare``: the
host's sockets and processes, which connection counts walk, are not there), in
a runtime directory of its own; the median of ``repeats`` runs, with their
spread. They depend on the interpreter's version and build and on the machine,
so they are recorded under both in ``results/instructions.json``.

    python benchmarks/instructions.py             # everything, 3 repeats (about 15 minutes)
    python benchmarks/instructions.py --smoke     # what the gate counts (make test), once
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "instructions.json"
TOLERANCE = 0.005
"""The gate: a count that differs from the recorded one by more than this fails."""
COLLECTIONS = 10
GAP = 0.15
"""Seconds between two collections: above the package's 0.1 s utilisation window."""
IDLE_THREADS = 8
MODES = ("sdk", "defaults", "peer")


# --- the work: deterministic, each with its loops and what one operation is ----------


def allocation(loops: int) -> None:
    for _ in range(loops):
        [(i, [i], {"i": i}) for i in range(1000)]


def cycles(loops: int) -> None:
    for _ in range(loops):
        a: list[object] = []
        b = [a]
        a.append(b)


def json_round_trips(loops: int) -> None:
    doc = {"id": 12345, "tags": ["a", "b", "c"], "values": [1.5, 2.5, None, True], "n": {"x": 1}}
    for _ in range(loops):
        json.loads(json.dumps(doc))


def asyncio_tasks(loops: int) -> None:
    async def tasks() -> None:
        for _ in range(loops // 100):
            await asyncio.gather(*(asyncio.sleep(0) for _ in range(100)))

    asyncio.run(tasks())


@dataclass(frozen=True)
class Work:
    run: Callable[[int], object]
    loops: int
    ops: int
    """Operations in ``loops``: what a cost per operation divides by."""
    op: str


KINDS = {
    "allocation": Work(allocation, 200, 600_000, "container allocated"),
    "cycles": Work(cycles, 300_000, 300_000, "garbage cycle made and collected"),
    "json": Work(json_round_trips, 10_000, 10_000, "json round trip"),
    "asyncio": Work(asyncio_tasks, 15_000, 15_000, "asyncio task"),
}
PYPERFORMANCE = {  # benchmark: (its folder, its arguments, loops)
    "richards": ("richards", (), 2),
    "nbody": ("nbody", (), 1),
    "float": ("float", (), 1),
    "deltablue": ("deltablue", (), 20),
    "go": ("go", (), 1),
    "chaos": ("chaos", (), 1),
    "create_gc_cycles": ("gc_collect", (), 4),
    "gc_traversal": ("gc_traversal", (), 2),
    "coroutines": ("coroutines", (), 2),
    "generators": ("generators", (), 1),
    "deepcopy": ("deepcopy", (), 200),
    "json_loads": ("json_loads", (), 100),
}
SUITES = {"kinds": tuple(KINDS), "pyperformance": tuple(PYPERFORMANCE)}


class FixedLoops:
    """Stands in for ``pyperf.Runner`` in a pyperformance script: records its benchmarks."""

    found: ClassVar[dict[str, Callable[[int], object]]] = {}

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        self.argparser = argparse.ArgumentParser()
        self.metadata: dict[str, Any] = {}

    def parse_args(self, args: Sequence[str] | None = None) -> argparse.Namespace:
        return self.argparser.parse_args(FixedLoops.argv)

    def bench_func(self, name: str, func: Callable[..., Any], *args: Any, **_kw: Any) -> None:
        self.found[name] = lambda loops: [func(*args) for _ in range(loops)]

    def bench_time_func(self, name: str, func: Callable[..., Any], *args: Any, **_kw: Any) -> None:
        self.found[name] = lambda loops: func(loops, *args)

    def bench_async_func(self, name: str, func: Callable[..., Any], *args: Any, **_kw: Any) -> None:
        async def many(loops: int) -> None:
            for _ in range(loops):
                await func(*args)

        self.found[name] = lambda loops: asyncio.run(many(loops))

    argv: ClassVar[Sequence[str]] = ()


def pyperformance_works() -> dict[str, Work]:
    """Every benchmark of the subset, loaded (its set-up run), at its fixed loops."""
    import runpy

    import pyperf

    pyperf.Runner = FixedLoops  # type: ignore[misc,assignment]
    root = resources.files("pyperformance") / "data-files" / "benchmarks"
    works = {}
    for name, (folder, argv, loops) in PYPERFORMANCE.items():
        FixedLoops.argv = argv
        runpy.run_path(str(root / f"bm_{folder}" / "run_benchmark.py"), run_name="__main__")
        works[name] = Work(FixedLoops.found[name], loops, loops, "loop")
    return works


# --- the child: one counted process ---------------------------------------------------


def setup(mode: str) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    if mode == "defaults":
        from opentelemetry.instrumentation.process import ProcessInstrumentor

        ProcessInstrumentor().instrument(meter_provider=provider)
    elif mode == "peer":
        from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor

        SystemMetricsInstrumentor().instrument(meter_provider=provider)
    reader.get_metrics_data()
    return provider


def between(mode: str, suite: str, work: str) -> dict[str, Any]:
    """Set up ``mode``, load ``suite``, run ``work`` (or none) with no collection inside."""
    provider = setup(mode)
    works = KINDS if suite == "kinds" else pyperformance_works()
    before = [s["collections"] for s in gc.get_stats()]
    started = time.process_time()
    if work != "none":
        works[work].run(works[work].loops)
    seconds = time.process_time() - started
    collected = [s["collections"] - b for s, b in zip(gc.get_stats(), before, strict=True)]
    provider.shutdown()
    return {"seconds": seconds, "gc": collected}


def collections(name: str, n: int, collect: bool) -> dict[str, Any]:
    """Set up configuration ``name``, collect once, then ``n`` times (or sleep as long)."""
    import configs
    import crowds

    idle = crowds.IdleThreads()
    idle.resize(IDLE_THREADS)  # more threads than the per-thread cap of 10 series
    subject = configs.build_one(name)
    subject.warm_up()
    started = time.process_time()
    for _ in range(n):
        time.sleep(GAP)
        if collect:
            subject.collect()
    seconds = time.process_time() - started
    subject.close()
    idle.resize(0)
    return {"seconds": seconds}


# --- the parent: counting children ------------------------------------------------------


@dataclass(frozen=True)
class Counter:
    """How a child is run and counted here."""

    name: str
    tool: tuple[str, ...]
    """The counter's command, before the child's; empty: run the child uncounted."""
    around: tuple[str, ...]
    """No address randomisation, a network and PID namespace of its own, where allowed."""

    def command(self, child: Sequence[str], out: str) -> list[str]:
        if not self.tool:
            return [*self.around, *child]
        if "--tool=cachegrind" in self.tool:
            return [*self.around, *self.tool, f"--cachegrind-out-file={out}", *child]
        return [*self.around, *self.tool, "-o", out, "--", *child]


def counter() -> Counter:
    """Cachegrind where valgrind is installed, else perf with a hardware counter, else none."""
    around = ("setarch", "-R") if shutil.which("setarch") else ()
    alone = ("unshare", "--net", "--pid", "--fork", "--mount-proc")
    if shutil.which("unshare") and _runs([*alone, "true"]):
        around = alone + around
    valgrind = shutil.which("valgrind") or _debians_valgrind()
    if valgrind:
        name = subprocess.run([valgrind, "--version"], capture_output=True, text=True).stdout
        return Counter(name.strip(), (valgrind, "--tool=cachegrind", "--cache-sim=no"), around)
    perf = ("perf", "stat", "-x,", "-e", "instructions:u")
    if shutil.which("perf") and _runs([*perf, "true"]):
        return Counter("perf instructions:u", perf, around)
    return Counter("", (), around)


def _debians_valgrind() -> str:
    """Debian's valgrind in a cache folder (get-valgrind.sh), where apt-get can fetch it."""
    if not shutil.which("apt-get"):
        return ""
    done = subprocess.run(["bash", str(HERE / "get-valgrind.sh")], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def _runs(command: list[str]) -> bool:
    """Whether ``command`` runs, and counts where it is perf (no counter: "<not supported>")."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return done.returncode == 0 and "<not " not in done.stderr


def interpreter() -> str:
    """The interpreter's version and build: counts are compared only on the same one."""
    free = " free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    return f"{platform.python_implementation()} {sys.version.replace(chr(10), ' ')}{free}"


def count(c: Counter, args: Sequence[str], env: dict[str, str]) -> tuple[int, Any]:
    """Instructions of one child (0 uncounted), and what it printed."""
    with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
        out, runtime = os.path.join(tmp, "out"), os.path.join(tmp, "runtime")
        os.mkdir(runtime, 0o700)  # elections of its own: no other child takes a role
        env = {**env, "OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR": runtime}
        command = c.command([sys.executable, __file__, "child", *args], out)
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr[-1500:]}")
        printed = json.loads(done.stdout.splitlines()[-1])
        if not c.tool:
            return 0, printed
        text = Path(out).read_text()
        found = re.search(r"^summary: (\d+)", text, re.M) or re.search(r"^(\d+),", text, re.M)
        if found is None:
            raise RuntimeError(f"no count in {text[-300:]!r}")
        return int(found.group(1)), printed


@dataclass(frozen=True)
class Plan:
    repeats: int
    modes: tuple[str, ...]
    suites: tuple[str, ...]
    configs: tuple[str, ...]
    native: int
    """Uncounted runs of the SDK alone's work: the time an instruction takes here."""


def plan(smoke: bool) -> Plan:
    import configs

    if smoke:  # what the gate compares
        return Plan(1, ("defaults",), ("kinds",), configs.instruction_configs(ours_only=True), 0)
    return Plan(3, MODES, tuple(SUITES), configs.instruction_configs(ours_only=False), 3)


def measure(p: Plan, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Count every child of plan ``p``, two at a time: medians and spreads."""
    c = counter()
    if not c.tool:
        raise RuntimeError("no instruction counter: valgrind (benchmarks/get-valgrind.sh) or perf")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"PYTHONHASHSEED": "0", "PYTHONPATH": str(HERE)}
    jobs = [
        (f"between/{mode}/{suite}/{w}", ("between", mode, suite, w))
        for suite in p.suites
        for mode in p.modes
        for w in ("none", *SUITES[suite])
    ]
    jobs += [
        (f"collection/{config}/{what}", ("collection", config, what))
        for config in p.configs
        for what in ("skip", "collect")
    ]
    plain = Counter("", (), c.around)
    # A first run of each mode and configuration writes the bytecode the counted ones read.
    warm = {args[:3] if args[0] == "between" else args[:2]: args for _, args in jobs}
    native = [(k, args) for k, args in jobs if "/sdk/kinds/" in k] * p.native
    started = time.monotonic()
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(lambda args: count(plain, args, env), warm.values()))
        timed = list(pool.map(lambda j: (j[0], count(plain, j[1], env)[1]), native))
        log(f"instructions: {len(jobs) * p.repeats} processes counted by {c.name}")
        counted = list(pool.map(lambda j: (j[0], count(c, j[1], env)), jobs * p.repeats))
    runs: dict[str, list[int]] = {}
    printed: dict[str, Any] = {}
    for k, (n, out) in counted:
        runs.setdefault(k, []).append(n)
        printed[k] = out
    seconds: dict[str, list[float]] = {}
    for k, out in timed:
        seconds.setdefault(k, []).append(out["seconds"])
    return reduce(p, runs, printed, seconds) | {
        "counter": c.name,
        "isolation": " ".join(c.around) or "none",
        "minutes": round((time.monotonic() - started) / 60, 1),
    }


def _diffs(work: list[int], none: list[int], per: int = 1) -> dict[str, Any]:
    """Work less none, paired by repeat, over ``per``: the median and the spread."""
    values = [(w - b) / per for w, b in zip(work, none, strict=True)]
    mid = statistics.median(values)
    spread = (max(values) - min(values)) / mid if mid and len(values) > 1 else 0.0
    return {"median": mid, "runs": values, "spread": spread}


def reduce(
    p: Plan, runs: dict[str, list[int]], printed: dict[str, Any], seconds: dict[str, list[float]]
) -> dict[str, Any]:
    between_: dict[str, Any] = {}
    for suite in p.suites:
        for mode in p.modes:
            none = runs[f"between/{mode}/{suite}/none"]
            for w in SUITES[suite]:
                key = f"between/{mode}/{suite}/{w}"
                found = _diffs(runs[key], none) | {"gc": printed[key]["gc"], "suite": suite}
                if key in seconds:
                    found["native_seconds"] = statistics.median(seconds[key])
                between_.setdefault(mode, {})[w] = found
            if suite == "kinds" and "sdk" in p.modes:
                sdk = runs[f"between/sdk/{suite}/none"]
                between_.setdefault("startup", {})[mode] = _diffs(none, sdk)
    per = {
        c: _diffs(runs[f"collection/{c}/collect"], runs[f"collection/{c}/skip"], COLLECTIONS)
        for c in p.configs
    }
    return {"between": between_, "collections": per}


# --- the record and the gate ---------------------------------------------------------


def key(info: dict[str, Any]) -> str:
    import machine

    return f"{interpreter()} on {machine.counted_on(info)}"


def load() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def record(found: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
    """``found`` under this interpreter and machine in results/instructions.json."""
    import machine

    entry = found | {
        "interpreter": interpreter(),
        "when": info["date"],
        "versions": info["versions"],
        "commit": machine.src_commit(),
    }
    kept = load() | {key(info): entry}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
    return entry


def gated(found: dict[str, Any]) -> dict[str, float]:
    """The counts that the gate compares: the defaults' work, and each of our collections."""
    import configs

    ours = {f"between {w}": v["median"] for w, v in found["between"].get("defaults", {}).items()}
    ours |= {
        f"collection {c}": v["median"]
        for c, v in found["collections"].items()
        if c in configs.counted()
    }
    return ours


REGENERATE = "python benchmarks/run.py --counts-only benchmarks/results/results.json"
WHAT = f"instruction counts within {TOLERANCE:.1%} of those recorded for this interpreter"


def check(found: dict[str, Any], info: dict[str, Any]) -> tuple[bool, str]:
    """This run's counts against the record for this interpreter and machine."""
    recorded = load().get(key(info))
    if recorded is None:
        return True, f"not compared: no counts recorded for {key(info)}"
    mine, theirs = gated(found), gated(recorded)
    differ = [
        f"{k}: recorded {theirs[k]:,.0f}, now {v:,.0f} ({v / theirs[k] - 1:+.2%})"
        for k, v in mine.items()
        if k not in theirs or abs(v / theirs[k] - 1) > TOLERANCE
    ]
    if not differ:
        return True, f"{len(mine)} counts within {TOLERANCE:.1%} of those of {recorded['when']}"
    versions = {k: v for k, v in info["versions"].items() if recorded["versions"].get(k) != v}
    also = f" (versions differ from the record's: {versions})" if versions else ""
    return False, f"{'; '.join(differ)}{also}. If intended, count again: {REGENERATE}"


# --- Markdown ------------------------------------------------------------------------


def rate(entry: dict[str, Any]) -> float:
    """Instructions per second here: the SDK alone's work, counted, over its CPU time natively."""
    sdk = entry["between"].get("sdk", {})
    found = [v["median"] / v["native_seconds"] for v in sdk.values() if v.get("native_seconds")]
    return statistics.median(found) if found else math.nan


def _t(instructions: float, per_second: float) -> str:
    """The time ``instructions`` take here, in the unit that suits."""
    seconds = instructions / per_second
    for unit, scale in (("ms", 1e3), ("µs", 1e6), ("ns", 1e9)):
        if abs(seconds) * scale >= 1 or unit == "ns":
            value = seconds * scale
            return f"{value:,.0f} {unit}" if abs(value) >= 100 else f"{value:,.2g} {unit}"
    return ""


def ratio(entry: dict[str, Any], mode: str, work: str) -> float | None:
    found = entry["between"].get(mode, {}).get(work)
    return found["median"] / entry["between"]["sdk"][work]["median"] if found else None


def between_table(entry: dict[str, Any], suite: str) -> str:
    """Per work: what the SDK alone costs, and what defaults and peer add, per operation."""
    per_s, sdk = rate(entry), entry["between"]["sdk"]
    ops = {w: (k.ops, k.op) for w, k in KINDS.items()}
    ops |= {w: (loops, "loop") for w, (_, _, loops) in PYPERFORMANCE.items()}
    names = [w for w in SUITES[suite] if w in sdk]
    rows = []
    for w in names:
        n, op = ops[w]
        cells = [f"`{w}`", op, f"{sdk[w]['median'] / n:,.0f} ({_t(sdk[w]['median'] / n, per_s)})"]
        spread = [sdk[w]["spread"]]
        for mode in ("defaults", "peer"):
            found = entry["between"][mode][w]
            added = (found["median"] - sdk[w]["median"]) / n
            cells += [f"{ratio(entry, mode, w):.4f}", f"{added:+,.0f} ({_t(added, per_s)})"]
            spread.append(found["spread"])
        rows.append([*cells, f"{max(spread):.3%}"])
    if suite == "pyperformance" and names:
        geo = ["**geometric mean**", "", ""]
        for mode in ("defaults", "peer"):
            logs = [math.log(ratio(entry, mode, w) or 1.0) for w in names]
            geo += [f"**{math.exp(sum(logs) / len(logs)):.4f}**", ""]
        rows.append([*geo, ""])
    head = ["Work", "Operation", "SDK alone, per operation", "Defaults / SDK alone"]
    head += ["Defaults add per operation", "Peer / SDK alone", "Peer adds per operation"]
    return table([*head, "Spread over repeats"], rows)


def startup_table(entry: dict[str, Any]) -> str:
    per_s = rate(entry)
    rows = [
        [f"`{mode}`", f"{v['median'] / 1e6:,.1f} M", _t(v["median"], per_s), f"{v['spread']:.3%}"]
        for mode, v in entry["between"].get("startup", {}).items()
        if mode != "sdk"
    ]
    head = ["Mode", "Instructions beyond the SDK alone", "Time here", "Spread over repeats"]
    return table(head, rows)


def collections_table(entry: dict[str, Any]) -> str:
    per_s = rate(entry)
    found = entry["collections"]
    peer = found.get("peer_default", {}).get("median")
    rows = []
    for name, v in found.items():
        against = f"{peer / v['median']:.2f}x" if peer and v["median"] else ""
        cells = [f"{v['median']:,.0f}", _t(v["median"], per_s), f"{v['spread']:.3%}", against]
        rows.append([f"`{name}`", *cells])
    head = ["Configuration", "Instructions per collection", "Time here", "Spread over repeats"]
    return table([*head, "peer_default / it"], rows)


def page() -> dict[str, str]:
    """The placeholders of the latest record, wherever it was counted (none: say so)."""
    entries = sorted(load().values(), key=lambda e: str(e["when"]))
    if not entries:
        return dict.fromkeys(PLACEHOLDERS, "(not counted yet)")
    return placeholders(entries[-1])


def placeholders(entry: dict[str, Any]) -> dict[str, str]:
    """The tables and figures the pages quote, from one record."""
    return {
        "instructions_when": f"{entry['when']} with {entry['counter']}, {entry['interpreter']}",
        "instructions_rate": f"{rate(entry) / 1e9:.1f}",
        "instructions_kinds": between_table(entry, "kinds"),
        "instructions_pyperformance": between_table(entry, "pyperformance"),
        "instructions_startup": startup_table(entry),
        "instructions_collections": collections_table(entry),
    }


PLACEHOLDERS = ("instructions_when", "instructions_rate", "instructions_kinds")
PLACEHOLDERS += ("instructions_pyperformance", "instructions_startup", "instructions_collections")


def table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def main() -> int:
    if sys.argv[1:2] == ["child"]:
        kind, *args = sys.argv[2:]
        if kind == "between":
            result = between(*args)
        else:
            result = collections(args[0], COLLECTIONS, args[1] == "collect")
        print(json.dumps(result))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="what the gate counts, once")
    args = parser.parse_args()
    import machine

    info = machine.describe()
    found = measure(plan(args.smoke))
    print(json.dumps(found, indent=1))
    if args.smoke:
        ok, said = check(found, info)
        print(said)
        return 0 if ok else 1
    record(found, info)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
