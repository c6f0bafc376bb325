"""What the package costs, in instructions: between collections, per collection, its probes.

Times on a shared 2-core machine move by a percent between rounds; instruction
counts do not. Each count is the instructions of a child process (cachegrind,
``--cache-sim=no``; or ``perf stat -e instructions:u`` where valgrind is missing
and there is a hardware counter) less the same process without the work: the SDK
with an in-memory reader, a mode (``sdk`` alone, ``defaults``, ``peer``, a probe's
option), then deterministic work with no collection inside it (four kinds; a
pyperformance subset at fixed loops through a stand-in for ``pyperf.Runner``; the
probes' work, less itself at 0 loops), or ``COLLECTIONS`` collections less the same
sleeps. ``PYTHONHASHSEED=0``, ``setarch -R``, network and PID namespaces, a runtime
directory of its own; the median of 3, kept by interpreter and machine in
``results/instructions.json``; the gate compares only on the same.

    python benchmarks/instructions.py                 # everything, 3 repeats, recorded
    python benchmarks/instructions.py --suite probes  # one table again, printed, not recorded
    python benchmarks/instructions.py --smoke         # what make test compares
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import math
import os
import platform
import re
import resource
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
# The gate: a count this share (at least FLOOR) outside the recorded runs fails. asyncio
TOLERANCE, FLOOR = 0.005, 10_000  # moves 0.2% with load; a collection 3,000 with the paths
REGENERATE = "python benchmarks/run.py --counts-only benchmarks/results/results.json"
WHAT = "instruction counts within the gate of the runs recorded for this interpreter"
COLLECTIONS = 20
GAP = 0.15
"""Seconds between two collections: above the package's 0.1 s utilisation window."""
IDLE_THREADS = 8
MODES = ("sdk", "defaults", "peer")
OPTIONS = {"gc_pause_histogram", "event_loop", "gil_wait"}
"""Modes that are the defaults with one option on."""


@dataclass(frozen=True)
class Work:
    run: Callable[[int], object]
    loops: int
    ops: int
    """Operations in ``loops``: what a cost per operation divides by."""
    op: str
    modes: tuple[str, ...] = MODES


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


def gc_collect0(loops: int) -> None:
    collect = gc.collect
    for _ in range(loops):
        collect(0)


def idle(loop: str) -> Callable[[int], None]:
    """A loop that only sleeps ``seconds``."""
    return lambda seconds: (
        importlib.import_module("uvloop").run if loop == "uvloop" else asyncio.run
    )(asyncio.sleep(seconds))


def callbacks(loops: int) -> None:
    """One trivial callback per loop iteration, each scheduling the next."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        done, left = loop.create_future(), [loops]

        def step() -> None:
            left[0] -= 1
            if left[0] > 0:
                loop.call_soon(step)
            else:
                done.set_result(None)

        loop.call_soon(step)
        await done

    asyncio.run(main())


KINDS = {
    # Also with an empty gc callback: what CPython's calls of any callback cost there.
    "allocation": Work(allocation, 200, 600_000, "container allocated", (*MODES, "gc_callback")),
    "cycles": Work(cycles, 300_000, 300_000, "garbage cycle made and collected"),
    "json": Work(json_round_trips, 10_000, 10_000, "json round trip"),
    "asyncio": Work(asyncio_tasks, 15_000, 15_000, "asyncio task"),
}
PYPERFORMANCE = {  # benchmark: (its folder, its arguments, loops)
    "richards": ("richards", (), 2), "nbody": ("nbody", (), 1), "float": ("float", (), 1),
    "deltablue": ("deltablue", (), 20), "go": ("go", (), 1), "chaos": ("chaos", (), 1),
    "create_gc_cycles": ("gc_collect", (), 4), "gc_traversal": ("gc_traversal", (), 2),
    "coroutines": ("coroutines", (), 2), "generators": ("generators", (), 1),
    "deepcopy": ("deepcopy", (), 200), "json_loads": ("json_loads", (), 100),
}  # fmt: skip
PROBES = {
    "gc_collect0": Work(gc_collect0, 20_000, 20_000, "gc.collect(0)",
                        ("sdk", "gc_callback", "defaults", "gc_pause_histogram")),
    "idle_asyncio": Work(idle("asyncio"), 2, 2, "second", ("defaults", "event_loop", "gil_wait")),
    "idle_uvloop": Work(idle("uvloop"), 2, 2, "second", ("defaults", "event_loop")),
    "callbacks": Work(callbacks, 20_000, 20_000, "loop iteration", ("defaults", "event_loop")),
}  # fmt: skip
SUITES = {"kinds": tuple(KINDS), "pyperformance": tuple(PYPERFORMANCE), "probes": tuple(PROBES)}


class FixedLoops:
    """Stands in for ``pyperf.Runner`` in a pyperformance script: records its benchmarks."""

    found: ClassVar[dict[str, Callable[[int], object]]] = {}
    argv: ClassVar[Sequence[str]] = ()

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        self.argparser = argparse.ArgumentParser()
        self.metadata: dict[str, Any] = {}

    def parse_args(self, args: Sequence[str] | None = None) -> argparse.Namespace:
        return self.argparser.parse_args(FixedLoops.argv)

    def bench_func(self, name: str, func: Callable[..., Any], *args: Any, **_kw: Any) -> None:
        self.found[name] = lambda loops: [func(*args) for _ in range(loops)]

    def bench_time_func(self, name: str, func: Callable[..., Any], *args: Any, **_kw: Any) -> None:
        self.found[name] = lambda loops: func(loops, *args)


def works(suite: str) -> dict[str, Work]:
    """The suite's work; pyperformance's scripts loaded (their set-up run) at fixed loops."""
    if suite != "pyperformance":
        return KINDS if suite == "kinds" else PROBES
    import runpy

    import pyperf
    import pyperformance

    pyperf.Runner = FixedLoops  # type: ignore[misc,assignment]
    root = resources.files(pyperformance) / "data-files" / "benchmarks"
    found = {}
    for name, (folder, argv, loops) in PYPERFORMANCE.items():
        FixedLoops.argv = argv
        runpy.run_path(str(root / f"bm_{folder}" / "run_benchmark.py"), run_name="__main__")
        found[name] = Work(FixedLoops.found[name], loops, loops, "loop")
    return found


# --- the child: one counted process ---------------------------------------------------


def setup(mode: str) -> Any:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    # The SDK's default resource, as an application's: its modules are in the heap GC walks.
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    if mode == "defaults" or mode in OPTIONS:
        from opentelemetry.instrumentation.process import ProcessInstrumentor

        options = {mode: True} if mode in OPTIONS else {}
        ProcessInstrumentor().instrument(meter_provider=provider, **options)
    elif mode == "peer":
        from opentelemetry.instrumentation.system_metrics import SystemMetricsInstrumentor

        SystemMetricsInstrumentor().instrument(meter_provider=provider)
    elif mode == "gc_callback":
        gc.callbacks.append(lambda _phase, _info: None)
    reader.get_metrics_data()
    return provider


def between(mode: str, suite: str, work: str, loops: str = "") -> dict[str, Any]:
    """Set up ``mode``, load ``suite``, run ``work`` (``none``: nothing) with no collection."""
    provider = setup(mode)
    found = works(suite)
    gc.collect()  # the work starts from empty generations, whatever the set-up allocated
    before = [s["collections"] for s in gc.get_stats()]
    started, switches = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
    if work != "none":
        found[work].run(int(loops) if loops else found[work].loops)
    seconds = time.process_time() - started
    wakes = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - switches
    collected = [s["collections"] - b for s, b in zip(gc.get_stats(), before, strict=True)]
    provider.shutdown()
    return {"seconds": seconds, "wakes": wakes, "gc": collected, "mode": describe()}


def describe() -> dict[str, Any]:
    """What this process runs: whether ours, with which options (a test checks each mode)."""
    package = sys.modules.get("opentelemetry.instrumentation.process")  # not imported: not ours
    ours = package.ProcessInstrumentor() if package else None
    options = ours.options if ours and ours.is_instrumented_by_opentelemetry else None
    return {
        "ours": options is not None,
        "options": {k: getattr(options, k) for k in OPTIONS} if options else {},
        "gc_callbacks": len(gc.callbacks),
    }


def collections(name: str, n: int, collect: bool) -> dict[str, Any]:
    """Set up configuration ``name``, collect once, then ``n`` times (or sleep as long)."""
    import configs
    import crowds

    idle = crowds.IdleThreads()
    idle.resize(IDLE_THREADS)  # more threads than the per-thread cap of 10 series
    subject = configs.build_one(name)
    subject.warm_up()
    gc.collect()  # the collections start from empty generations, whatever the set-up allocated
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
    valgrind = shutil.which("valgrind")
    if valgrind:
        name = subprocess.run([valgrind, "--version"], capture_output=True, text=True).stdout
        return Counter(name.strip(), (valgrind, "--tool=cachegrind", "--cache-sim=no"), around)
    perf = ("perf", "stat", "-x,", "-e", "instructions:u")
    if shutil.which("perf") and _runs([*perf, "true"]):
        return Counter("perf instructions:u", perf, around)
    return Counter("", (), around)


def _runs(command: list[str]) -> bool:
    """Whether ``command`` runs, and counts where it is perf (no counter: "<not supported>")."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return done.returncode == 0 and "<not " not in done.stderr


def interpreter() -> str:
    """The interpreter's version and build: counts are compared only on the same one."""
    free = " free-threaded" if sysconfig.get_config_var("Py_GIL_DISABLED") else ""
    return f"{platform.python_implementation()} {sys.version.replace(chr(10), ' ')}{free}"


def child_env(src: str = "") -> dict[str, str]:
    """The same variables for every child: one more moved a collection 10,000 instructions."""
    # PYTHONPATH=<checkout>/src ahead counts that checkout's package instead.
    path = os.pathsep.join(filter(None, (str(HERE), src, os.environ.get("PYTHONPATH"))))
    env = {"PATH": os.defpath, "LC_ALL": "C.UTF-8"}  # another PATH moved one by 12,000
    return env | {"PYTHONHASHSEED": "0", "PYTHONPATH": path}


def padded(env: dict[str, str], argv: Sequence[str]) -> dict[str, str]:
    """``env`` padded: the strings a child starts with make 8 KiB, whatever the paths."""
    used = sum(len(os.fsencode(s)) + 1 for s in [*argv, *(f"{k}={v}" for k, v in env.items())])
    return env | {"INSTRUCTIONS_PAD": "x" * max(0, 8192 - used - len("INSTRUCTIONS_PAD=x"))}


def count(c: Counter, args: Sequence[str], env: dict[str, str]) -> tuple[int, Any]:
    """Instructions of one child (0 uncounted), and what it printed."""
    with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
        out, runtime = os.path.join(tmp, "out"), os.path.join(tmp, "runtime")
        os.mkdir(runtime, 0o700)  # elections of its own: no other child takes a role
        argv = [sys.executable, __file__, "child", *args]
        env = padded({**env, "OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR": runtime}, argv)
        command = c.command(argv, out)
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


def plan(smoke: bool, suite: str = "") -> Plan:
    """Everything; with ``suite`` (one of SUITES, or "collections"), that suite only."""
    import configs

    if smoke:  # what the gate compares; a median of 3, as a single run is 1% off at times
        return Plan(3, ("defaults",), ("kinds",), configs.instruction_configs(ours_only=True), 0)
    every = ("sdk", "defaults", "peer", "gc_callback", *sorted(OPTIONS))
    suites = tuple(s for s in SUITES if suite in ("", s))
    ours = configs.instruction_configs(ours_only=False) if suite in ("", "collections") else ()
    return Plan(3, every, suites, ours, 3)


def jobs(p: Plan) -> dict[str, tuple[tuple[str, ...], str]]:
    """Every child of ``p`` by its key: its arguments, and the key it is less (none: "")."""
    found: dict[str, tuple[tuple[str, ...], str]] = {}
    for suite in p.suites:
        for w in SUITES[suite]:
            modes = (KINDS | PROBES)[w].modes if suite != "pyperformance" else MODES
            none = (w, "0") if suite == "probes" else ("none",)
            for mode in (m for m in modes if m in p.modes):
                base = f"between/{mode}/{suite}/{'@'.join(none)}"
                found[f"between/{mode}/{suite}/{w}"] = (("between", mode, suite, w), base)
                found[base] = (("between", mode, suite, *none), "")
    for config in p.configs:
        base = f"collection/{config}/skip"
        found[base] = (("collection", config, "skip"), "")
        found[f"collection/{config}/collect"] = (("collection", config, "collect"), base)
    return found


def measure(p: Plan, log: Callable[[str], None] = print, src: str = "") -> dict[str, Any]:
    """Count every child of plan ``p`` (the package in ``src``, if given), one per CPU."""
    c = counter()
    if not c.tool:
        raise RuntimeError("no instruction counter: valgrind (apt-get install valgrind) or perf")
    env = child_env(src)
    todo = {k: args for k, (args, _) in jobs(p).items()}
    plain = Counter("", (), c.around)
    # A first run of each mode and configuration writes the bytecode the counted ones read.
    warm = {args[:3] if args[0] == "between" else args[:2]: args for args in todo.values()}
    # Uncounted: the SDK alone's work, for the time an instruction takes here; the probes'
    # work, for the wakes it costs (voluntary context switches: the OS's own count).
    native = [(k, a) for k, a in todo.items() if k.startswith("between/sdk/kinds/")] * p.native
    native += [(k, a) for k, a in todo.items() if "/probes/" in k and p.native]
    started = time.monotonic()
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(lambda args: count(plain, args, env), warm.values()))
        timed = list(pool.map(lambda j: (j[0], count(plain, j[1], env)[1]), native))
        log(f"instructions: {len(todo) * p.repeats} processes counted by {c.name}")
        counted = list(
            pool.map(lambda j: (j[0], count(c, j[1], env)), list(todo.items()) * p.repeats)
        )
    runs: dict[str, list[int]] = {}
    printed: dict[str, Any] = {}
    for k, (n, out) in counted:
        runs.setdefault(k, []).append(n)
        printed[k] = out
    natively: dict[str, list[dict[str, Any]]] = {}
    for k, out in timed:
        natively.setdefault(k, []).append(out)
    return reduce(p, runs, printed, natively) | {
        "counter": c.name,
        "isolation": " ".join(c.around) or "none",
        "minutes": round((time.monotonic() - started) / 60, 1),
    }


def _diffs(work: list[int], none: list[int], per: int = 1) -> dict[str, Any]:
    """Work less none, paired by repeat, over ``per``: the median and the spread."""
    values = [(w - b) / per for w, b in zip(work, none, strict=True)]
    mid = statistics.median(values)
    spread = (max(values) - min(values)) / abs(mid) if mid and len(values) > 1 else 0.0
    return {"median": mid, "runs": values, "spread": spread}


def reduce(
    p: Plan, runs: dict[str, list[int]], printed: dict[str, Any], natively: dict[str, list[Any]]
) -> dict[str, Any]:
    found: dict[str, Any] = {"collections": {}}
    for k, (args, base) in jobs(p).items():
        if not base:
            continue
        one = _diffs(runs[k], runs[base], COLLECTIONS if args[0] == "collection" else 1)
        if args[0] == "collection":
            found["collections"][args[1]] = one
            continue
        one |= {"gc": printed[k]["gc"], "suite": args[2]}
        if k in natively and args[2] != "probes":
            one["native_seconds"] = statistics.median(x["seconds"] for x in natively[k])
        elif k in natively:
            one["wakes"] = natively[k][0]["wakes"] - natively[base][0]["wakes"]
        found.setdefault("between", {}).setdefault(args[1], {})[args[3]] = one
    if "sdk" in p.modes and "kinds" in p.suites:  # the process without work, beyond sdk's
        sdk = runs["between/sdk/kinds/none"]
        none = {m: runs[f"between/{m}/kinds/none"] for m in MODES[1:] if m in p.modes}
        found["between"]["startup"] = {m: _diffs(n, sdk) for m, n in none.items()}
    return found


def key(info: dict[str, Any]) -> str:
    import machine

    return f"{interpreter()} on {machine.counted_on(info)}"


def load() -> dict[str, Any]:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def latest() -> dict[str, Any]:
    """The record made last, wherever it was counted: what the pages show."""
    return max(load().values(), key=lambda e: str(e["when"]), default={})


def record(found: dict[str, Any], info: dict[str, Any]) -> None:
    """``found`` under this interpreter and machine in results/instructions.json."""
    import machine

    entry = found | {
        "interpreter": interpreter(),
        "machine": machine.counted_on(info),
        "when": info["date"],
        "versions": info["versions"],
        "commit": machine.src_commit(),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(load() | {key(info): entry}, indent=1, sort_keys=True)
    RESULTS.write_text(text + "\n")


def gated_entries(found: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What the gate compares: the defaults' four kinds of work, our collections."""
    import configs

    kinds = found["between"].get("defaults", {})
    ours = {f"between {w}": kinds[w] for w in KINDS if w in kinds}
    ours |= {
        f"collection {c}": v for c, v in found["collections"].items() if c in configs.counted()
    }
    return ours


def caught(v: dict[str, Any], rise: float = 0.01) -> bool:
    # Whether ``rise`` more than the median of a record's runs fails the gate.
    return max(v["runs"]) + max(TOLERANCE * v["median"], FLOOR) < (1 + rise) * v["median"]


def check(found: dict[str, Any], info: dict[str, Any]) -> tuple[bool, str]:
    """This run's counts against the record for this interpreter and machine. Outside it, they
    are compared with the recorded commit's ``src/`` counted here: another machine of the same
    CPU and interpreter (its kernel's files, its string routines) counted 0.8% more."""
    recorded = load().get(key(info))
    if recorded is None:
        return True, f"not compared: no counts recorded for {key(info)}"
    differ, compared = _outside(found, recorded)
    if not differ:
        return True, f"{len(compared)} counts within the gate of the runs of {recorded['when']}"
    commit = str(recorded["commit"]).strip("`")
    here = beside(commit)
    again = _outside(found, here)[0] if here is not None else []
    if here is not None and not again:
        return True, (
            f"{len(compared)} counts within the gate of {commit}'s src/ counted beside them "
            f"(outside the record's runs of {recorded['when']}: {'; '.join(differ)})"
        )
    where = f"; {commit}'s src/ counted here: {'; '.join(again)}" if again else ""
    versions = {k: v for k, v in info["versions"].items() if recorded["versions"].get(k) != v}
    also = f" (versions differ from the record's: {versions})" if versions else ""
    return False, f"{'; '.join(differ)}{where}{also}. If intended, count again: {REGENERATE}"


def _outside(found: dict[str, Any], recorded: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The gated counts of ``found`` outside ``recorded``'s runs and slack, and all compared."""
    mine, theirs = gated_entries(found), gated_entries(recorded)
    differ = []
    for k, v in mine.items():
        was, runs = theirs.get(k, {}).get("median"), theirs.get(k, {}).get("runs", [])
        slack = max(TOLERANCE * abs(was or 0), FLOOR)
        if was is None or not min(runs) - slack <= v["median"] <= max(runs) + slack:
            change = f"{v['median'] / was - 1:+.2%}" if was else "new"
            differ.append(f"{k}: recorded {was or 0:,.0f}, now {v['median']:,.0f} ({change})")
    return differ, list(mine)


def beside(commit: str) -> dict[str, Any] | None:
    """The smoke counts of ``commit``'s ``src/`` on this machine (git archive); None where
    git has no such commit (a shallow clone, uncommitted changes) or it cannot be counted."""
    # From the repository's top: this copy may be an untracked one inside it (mutmut's).
    top = subprocess.run(
        ["git", "-C", str(HERE), "rev-parse", "--show-toplevel"], capture_output=True, text=True
    ).stdout.strip() or str(HERE.parent)
    archive = ["git", "-C", top, "archive", "--prefix=src/", f"{commit}:src"]
    tree = subprocess.run(archive, capture_output=True)
    if tree.returncode != 0:
        return None
    print(f"instructions: outside the record; counting {commit}'s src/ beside them", flush=True)
    with tempfile.TemporaryDirectory(prefix="instructions-src-") as tmp:
        subprocess.run(["tar", "-x", "-C", tmp], input=tree.stdout, check=True)
        try:
            return measure(plan(True), src=os.path.join(tmp, "src"))
        except RuntimeError as e:
            print(f"instructions: {commit}'s src/ not counted: {e}", flush=True)
            return None


def rate(entry: dict[str, Any]) -> float:
    """Instructions per second here: the SDK alone's work, counted, over its CPU time natively."""
    sdk = entry["between"].get("sdk", {})
    found = [v["median"] / v["native_seconds"] for v in sdk.values() if v.get("native_seconds")]
    return statistics.median(found) if found else math.nan


def duration(instructions: float, per_second: float) -> str:
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


def _per_op(entry: dict[str, Any], value: float, ops: int) -> str:
    return f"{value / ops:+,.0f} ({duration(value / ops, rate(entry))})"


def between_table(entry: dict[str, Any], suite: str) -> str:
    """Per work: what the SDK alone costs, and what defaults and peer add, per operation."""
    sdk = entry["between"]["sdk"]
    ops = {w: (k.ops, k.op) for w, k in KINDS.items()}
    ops |= {w: (loops, "loop") for w, (_, _, loops) in PYPERFORMANCE.items()}
    names = [w for w in SUITES[suite] if w in sdk]
    rows = []
    for w in names:
        n, op = ops[w]
        cells = [f"`{w}`", op, _per_op(entry, sdk[w]["median"], n).lstrip("+")]
        spread = [sdk[w]["spread"]]
        for mode in ("defaults", "peer"):
            found = entry["between"][mode][w]
            cells += [
                f"{ratio(entry, mode, w):.4f}",
                _per_op(entry, found["median"] - sdk[w]["median"], n),
            ]
            spread.append(found["spread"])
        gcs = " / ".join("-".join(map(str, entry["between"][m][w]["gc"])) for m in MODES)
        rows.append([*cells, gcs, f"{max(spread):.3%}"])
    if suite == "pyperformance" and names:
        geo = ["**geometric mean**", "", ""]
        for mode in ("defaults", "peer"):
            logs = [math.log(ratio(entry, mode, w) or 1.0) for w in names]
            geo += [f"**{math.exp(sum(logs) / len(logs)):.4f}**", ""]
        rows.append([*geo, "", ""])
    head = ["Work", "Operation", "SDK alone, per operation", "Defaults / SDK alone"]
    head += ["Defaults add per operation", "Peer / SDK alone", "Peer adds per operation"]
    return table([*head, "Garbage collections (SDK / defaults / peer)", "Spread"], rows)


def probes_table(entry: dict[str, Any]) -> str:
    """Per probe work and mode: instructions per operation, and beyond the work's first mode."""
    rows = []
    for w, work in PROBES.items():
        first = entry["between"].get(work.modes[0], {}).get(w, {}).get("median", 0.0)
        for mode in (m for m in work.modes if w in entry["between"].get(m, {})):
            found = entry["between"][mode][w]
            beyond = _per_op(entry, found["median"] - first, work.ops)
            cells = [_per_op(entry, found["median"], work.ops).lstrip("+"), beyond]
            cells += [f"{found['wakes'] / work.ops:.3g}" if "wakes" in found else ""]
            rows.append([f"`{w}`", work.op, f"`{mode}`", *cells, f"{found['spread']:.3%}"])
    head = ["Work", "Operation", "Mode", "Per operation", "Beyond the first mode"]
    return table([*head, "Wakes per operation", "Spread over repeats"], rows)


def startup_table(entry: dict[str, Any]) -> str:
    rows = []
    for m, v in entry["between"].get("startup", {}).items():
        time_here = duration(v["median"], rate(entry))
        rows.append([f"`{m}`", f"{v['median'] / 1e6:,.1f} M", time_here, f"{v['spread']:.3%}"])
    head = ["Mode", "Instructions beyond the SDK alone", "Time here", "Spread over repeats"]
    return table(head, rows)


def collections_table(entry: dict[str, Any]) -> str:
    per_s, found = rate(entry), entry["collections"]
    peer = found.get("peer_default", {}).get("median")
    rows = []
    for name, v in found.items():
        against = f"{peer / v['median']:.2f}x" if peer else ""
        cells = [f"{v['median']:,.0f}", duration(v["median"], per_s), f"{v['spread']:.3%}", against]
        rows.append([f"`{name}`", *cells])
    head = ["Configuration", "Instructions per collection", "Time here", "Spread over repeats"]
    return table([*head, "peer_default / it"], rows)


PLACEHOLDERS = [f"instructions_{n}" for n in ("when", "rate", "kinds", "pyperformance", "probes")]
PLACEHOLDERS += ["instructions_startup", "instructions_collections"]


def merged(found: dict[str, Any]) -> dict[str, Any]:
    """``found`` over a copy of the latest record (whose rate its times use)."""
    entry = json.loads(json.dumps(latest()))
    for mode, works in found.get("between", {}).items():
        entry["between"].setdefault(mode, {}).update(works)
    entry["collections"].update(found["collections"])
    return entry


def page(entry: dict[str, Any] | None = None) -> dict[str, str]:
    """The tables and figures the pages quote, from the latest record."""
    entry = entry or latest()
    if not entry:
        return dict.fromkeys(PLACEHOLDERS, "(not counted yet)")
    return {
        "instructions_when": f"{entry['when']}, {entry['interpreter']}, {entry['machine']}, "
        f"{entry['counter']}",
        "instructions_rate": f"{rate(entry) / 1e9:.1f}",
        "instructions_kinds": between_table(entry, "kinds"),
        "instructions_pyperformance": between_table(entry, "pyperformance"),
        "instructions_probes": probes_table(entry),
        "instructions_startup": startup_table(entry),
        "instructions_collections": collections_table(entry),
    }


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
    parser.add_argument("--smoke", action="store_true", help="what make test counts")
    parser.add_argument("--suite", choices=[*SUITES, "collections"], help="print, not record")
    args = parser.parse_args()
    import machine

    info = machine.describe()
    found = measure(plan(args.smoke, args.suite or ""))
    if args.smoke:
        ok, said = check(found, info)
        print(said)
        return 0 if ok else 1
    if args.suite:
        print(page(merged(found))[f"instructions_{args.suite}"])
        return 0
    record(found, info)
    print("\n\n".join(page().values()))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    sys.exit(main())
