"""What the package costs a web application under load, and its idle workers.

Three real servers, each with its pre-fork recipe (``appcost/``): FastAPI on
``uvicorn --workers 2`` (metrics set up in the lifespan), and Flask on gunicorn
with 2 ``sync`` workers and with 2 ``gthread`` workers of 4 threads (metrics set
up in ``post_fork``). Modes (``appcost/appmode.py``, export every 10 s):
``baseline`` (the SDK and a periodic reader, no process metrics), ``defaults``,
``event_loop`` (uvicorn only: gunicorn's workers run no event loop),
``gil_wait`` (gunicorn ``gthread`` only: threads that share the GIL) and
``peer``.

Two loads, each mode in a fresh server, the modes of a round in a new random
order:

- a fixed rate below saturation (``fraction`` of the baseline's throughput at
  saturation, measured first), open loop (``loadgen.py``): latency from when
  each request was due, and the server's CPU time per request;
- saturation: wrk (Debian's, ``get-wrk.sh``), closed loop, ``connections``
  connections: throughput and wrk's latency percentiles.

Idle: uvicorn with ``idle_workers`` workers and no request, in every mode and
with each probe: the CPU time of all its processes per second. uvicorn runs on
uvloop where it is installed; ``defaults/asyncio`` and ``event_loop/asyncio``
run on asyncio's own loop (``--loop asyncio``), where the probe parks while the
loop sleeps (uvicorn's own tick wakes each worker's loop 10 times a second).

    python benchmarks/webapp.py            # full (about 30 minutes on 2 cores)
    python benchmarks/webapp.py --smoke    # uvicorn, 2 modes, 1 s loads (CI)
    python benchmarks/webapp.py --idle-only  # the idle phase again (about 10 minutes)
    python benchmarks/webapp.py --report-only benchmarks/results/webapp
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
SITE = HERE / "appcost"
RESULTS = HERE / "results" / "webapp"
PLOT = HERE.parent / "docs" / "_static" / "benchmarks" / "webapp_latency.png"
sys.path.insert(0, str(HERE))

import loadgen  # noqa: E402
from appcost.appmode import PROBES  # noqa: E402

INTERVAL_MS = 10_000
PATH = "/items"


ASYNCIO = "/asyncio"
"""A mode name's suffix: uvicorn on asyncio's own loop (``--loop asyncio``), not uvloop."""


def mode(name: str, interval_ms: int = INTERVAL_MS) -> dict[str, Any]:
    """``none``, ``baseline``, ``defaults``, a probe's name (defaults plus it), or ``peer``;
    any of them with ``/asyncio`` for uvicorn on asyncio's loop."""
    base, loop = name.removesuffix(ASYNCIO), {"loop": "asyncio"} if name.endswith(ASYNCIO) else {}
    if base in ("none", "baseline", "peer"):
        return {"name": name, "kind": base, "interval_ms": interval_ms, **loop}
    options = {} if base == "defaults" else {base: True}
    return {"name": name, "kind": "ours", "options": options, "interval_ms": interval_ms, **loop}


SERVERS: dict[str, tuple[str, ...]] = {
    "uvicorn": ("baseline", "defaults", "event_loop", "peer"),
    "gunicorn-sync": ("baseline", "defaults", "peer"),
    "gunicorn-gthread": ("baseline", "defaults", "gil_wait", "peer"),
}
# uvicorn runs on uvloop where it is installed (as uvicorn[standard] does), and the
# event-loop probe parks only on asyncio's loop: both are measured.
IDLE_MODES = (
    "none",
    "baseline",
    "defaults",
    *PROBES,
    f"defaults{ASYNCIO}",
    f"event_loop{ASYNCIO}",
    "peer",
)


@dataclass(frozen=True)
class Plan:
    rounds: int
    seconds: float
    """Of each measured load."""
    warmup: float
    connections: int
    """wrk's, at saturation."""
    fraction: float
    """The fixed rate, as a fraction of the baseline's throughput at saturation."""
    idle_workers: int
    idle_seconds: float
    idle_settle: float
    """Seconds between the server answering and the idle window (start-up CPU settles)."""
    servers: tuple[str, ...] = tuple(SERVERS)
    idle_modes: tuple[str, ...] = IDLE_MODES


# The fixed rate is a quarter of wrk's saturation: the Python generator costs far more
# CPU per request than wrk, on the same 2 cores; at half, uvicorn and gunicorn-sync
# fell behind it (answers over a second late in the baseline too).
FULL = Plan(
    rounds=3,
    seconds=15,
    warmup=3,
    connections=32,
    fraction=0.25,
    idle_workers=32,
    idle_seconds=30,
    idle_settle=15,
)
SMOKE = Plan(
    rounds=1,
    seconds=1,
    warmup=0.3,
    connections=8,
    fraction=0.3,
    idle_workers=2,
    idle_seconds=1,
    idle_settle=1,
    servers=("uvicorn",),
    idle_modes=("baseline", "defaults"),
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- servers ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One server in one mode, on a free port, with its own runtime directory."""

    def __init__(self, kind: str, mode_: dict[str, Any], workers: int, runtime: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}{PATH}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env |= {
            "PYTHONPATH": str(SITE),
            "PROCESS_OVERHEAD_MODE": json.dumps(mode_),
            "OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR": runtime,
            "WEBAPP_BIND": f"127.0.0.1:{self.port}",
            "WEBAPP_WORKERS": str(workers),
            "WEBAPP_WORKER_CLASS": kind.removeprefix("gunicorn-"),
        }
        if kind == "uvicorn":
            command = [
                sys.executable,
                "-m",
                "uvicorn",
                "fastapi_app:app",
                "--workers",
                str(workers),
            ]
            command += ["--port", str(self.port), "--no-access-log", "--log-level", "warning"]
            command += ["--loop", mode_["loop"]] if "loop" in mode_ else []
        else:
            command = [sys.executable, "-m", "gunicorn", "-c", str(SITE / "gunicorn.conf.py")]
        self.proc = subprocess.Popen(command, cwd=SITE, env=env, stdout=subprocess.DEVNULL)
        self.workers = workers

    def wait_ready(self, timeout: float = 120) -> None:
        """Until every worker is up and one answers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}")
            if len(self.processes()) > self.workers:
                try:
                    with urllib.request.urlopen(self.url, timeout=2) as answer:
                        if answer.status == 200:
                            return
                except OSError:
                    pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.url} did not answer in {timeout} s")

    def processes(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu(self) -> float:
        """CPU seconds of the server's processes so far (user and system)."""
        total = 0.0
        for p in self.processes():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
        return total

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            for p in self.processes():
                p.kill()
            self.proc.wait()


# --- loads -----------------------------------------------------------------------

WRK_SCRIPT = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK {\\"requests\\": %d, \\"us\\": %d, \\"errors\\": %d, "
    .. "\\"p50\\": %d, \\"p99\\": %d, \\"p999\\": %d}\\n",
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
end
"""


def wrk(binary: str, url: str, connections: int, seconds: float, script: Path) -> dict[str, float]:
    """Closed loop at saturation: requests per second and latency percentiles (s)."""
    command = [binary, "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "-s", str(script)]
    out = subprocess.run([*command, url], capture_output=True, text=True, timeout=seconds + 60)
    line = next((x for x in out.stdout.splitlines() if x.startswith("WRK ")), None)
    if line is None:
        raise RuntimeError(f"wrk said: {out.stdout[-400:]} {out.stderr[-400:]}")
    found = json.loads(line[4:])
    return {
        "throughput": found["requests"] / (found["us"] / 1e6),
        "errors": found["errors"],
        **{k: found[k] / 1e6 for k in ("p50", "p99", "p999")},
    }


def fixed_rate(url: str, rate: float, seconds: float) -> dict[str, float]:
    """Open loop at ``rate``: achieved throughput and latency percentiles (s)."""
    found = loadgen.load(url, rate, seconds)
    return {
        "throughput": found.achieved,
        "errors": found.errors,
        "p50": found.percentile(50),
        "p99": found.percentile(99),
        "p999": found.percentile(99.9),
    }


def one_server(
    kind: str, name: str, plan: Plan, rate: float, tools: dict[str, Any]
) -> dict[str, Any]:
    """A fresh server in mode ``name``: warm-up, the fixed rate, then saturation."""
    server = Server(kind, mode(name), 2, tools["runtime"])
    try:
        server.wait_ready()
        loadgen.load(server.url, rate, plan.warmup)
        before = server.cpu()
        fixed = fixed_rate(server.url, rate, plan.seconds)
        fixed["cpu_per_request"] = (server.cpu() - before) / max(
            1, fixed["throughput"] * plan.seconds
        )
        found: dict[str, Any] = {"server": kind, "mode": name, "fixed": fixed}
        if tools["wrk"]:
            before = server.cpu()
            sat = wrk(tools["wrk"], server.url, plan.connections, plan.seconds, tools["script"])
            sat["cpu_per_request"] = (server.cpu() - before) / max(
                1, sat["throughput"] * plan.seconds
            )
            found["saturation"] = sat
        return found
    finally:
        server.stop()


def capacity(kind: str, plan: Plan, tools: dict[str, Any]) -> float:
    """The baseline's throughput at saturation (wrk; without it, a fast open loop)."""
    server = Server(kind, mode("baseline"), 2, tools["runtime"])
    try:
        server.wait_ready()
        if tools["wrk"]:
            found = wrk(tools["wrk"], server.url, plan.connections, plan.seconds, tools["script"])
            return float(found["throughput"])
        return loadgen.load(server.url, 5000, plan.seconds).achieved
    finally:
        server.stop()


def idle(name: str, plan: Plan, runtime: str) -> dict[str, Any]:
    """CPU per second of an idle uvicorn of ``idle_workers`` workers, in mode ``name``."""
    server = Server("uvicorn", mode(name), plan.idle_workers, runtime)
    try:
        server.wait_ready()
        time.sleep(plan.idle_settle)
        procs = server.processes()
        before, started = server.cpu(), time.monotonic()
        time.sleep(plan.idle_seconds)
        used, seconds = server.cpu() - before, time.monotonic() - started
        return {
            "mode": name,
            "workers": plan.idle_workers,
            "processes": len(procs),
            "cpu_per_s": used / seconds,
            "per_worker_us_per_s": used / seconds / plan.idle_workers * 1e6,
        }
    finally:
        server.stop()


def find_wrk() -> str:
    """wrk from WRK_BIN, PATH or get-wrk.sh; empty if none (CI: an error)."""
    given = os.environ.get("WRK_BIN") or shutil.which("wrk")
    if given:
        return given
    got = subprocess.run(["bash", str(HERE / "get-wrk.sh")], capture_output=True, text=True)
    if got.returncode == 0:
        return got.stdout.strip().splitlines()[-1]
    if os.environ.get("CI"):
        raise RuntimeError(f"wrk is needed under CI: {got.stderr[-400:]}")
    log(f"no wrk ({got.stderr.strip()[-200:]}): saturation is skipped")
    return ""


def run(plan: Plan, out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    kept: dict[str, Any] = {}
    last = json.loads((out / "webapp.json").read_text()) if (out / "webapp.json").exists() else {}
    if last and not plan.idle_modes:  # --no-idle keeps the last idle phase
        kept = {"idle": last.get("idle", []), "idle_plan": last.get("idle_plan", last["plan"])}
    if last and not plan.servers:  # --idle-only keeps the last loads
        kept = {k: last[k] for k in ("plan", "rates", "wrk", "loads") if k in last}
    started = time.monotonic()
    rng = random.Random(28)
    with tempfile.TemporaryDirectory(prefix="webapp-") as tmp:
        runtime = tempfile.mkdtemp(dir=tmp)
        os.chmod(runtime, 0o700)
        script = Path(tmp) / "percentiles.lua"
        script.write_text(WRK_SCRIPT)
        tools = {"wrk": find_wrk(), "script": script, "runtime": runtime}
        rates = {}
        for kind in plan.servers:
            cap = capacity(kind, plan, tools)
            rates[kind] = round(plan.fraction * cap)
            log(f"{kind}: baseline saturates at {cap:.0f}/s; fixed rate {rates[kind]}/s")
        loads = []
        for r in range(plan.rounds):
            for kind in plan.servers:
                order = list(SERVERS[kind])
                rng.shuffle(order)
                for name in order:
                    found = one_server(kind, name, plan, rates[kind], tools)
                    loads.append({"round": r, **found})
            log(f"round {r + 1}/{plan.rounds} done, {time.monotonic() - started:.0f} s")
        idles = []
        order = list(plan.idle_modes)
        rng.shuffle(order)
        for name in order:
            idles.append(idle(name, plan, runtime))
            log(f"idle {name}: {idles[-1]['cpu_per_s'] * 1e3:.1f} ms/s")
    record = {
        "plan": asdict(plan),
        "interval_ms": INTERVAL_MS,
        "rates": rates,
        "wrk": bool(tools["wrk"]),
        "uvloop": importlib.util.find_spec("uvloop") is not None,  # uvicorn's loop when present
        "loads": loads,
        "idle": idles,
        "idle_plan": asdict(plan),
        "duration_s": round(time.monotonic() - started),
    }
    record |= kept
    (out / "webapp.json").write_text(json.dumps(record, indent=1))
    return record


# --- report ------------------------------------------------------------------------

METRICS = ("throughput", "p50", "p99", "p999", "cpu_per_request")


def summarise(record: dict[str, Any]) -> list[dict[str, Any]]:
    """Per server, load and mode: the median over rounds of each figure, and its ratio to
    the baseline's median."""
    rows = []
    for kind in record["plan"]["servers"]:
        for load in ("fixed", "saturation"):
            base = _medians(record, kind, "baseline", load)
            if base is None:
                continue
            for name in SERVERS[kind]:
                mine = _medians(record, kind, name, load)
                if mine is None:
                    continue
                ratios = {k: mine[k] / base[k] if base[k] else float("nan") for k in METRICS}
                rows.append({"server": kind, "load": load, "mode": name, **mine, "ratio": ratios})
    return rows


def _medians(record: dict[str, Any], kind: str, name: str, load: str) -> dict[str, float] | None:
    found = [
        x[load] for x in record["loads"] if x["server"] == kind and x["mode"] == name and load in x
    ]
    if not found:
        return None
    out = {k: statistics.median(f[k] for f in found) for k in METRICS}
    # How far apart the rounds of one mode are: (max - min) / median, per figure.
    out["spread"] = {
        k: (max(f[k] for f in found) - min(f[k] for f in found)) / out[k] if out[k] else 0.0
        for k in METRICS
    }
    out["errors"] = sum(f["errors"] for f in found)
    out["rounds"] = len(found)
    return out


def markdown(record: dict[str, Any]) -> dict[str, str]:
    """Tables: ``fixed`` and ``saturation`` (a row per server and mode, changes against the
    baseline's), and ``idle``."""
    rows = summarise(record)
    head = (
        "| Server | Mode | req/s | Δ | p50 ms | p99 ms | Δ p99 | p99.9 ms | CPU µs/req | Δ CPU |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    tables = {}
    for load in ("fixed", "saturation"):
        lines = [head]
        for r in (r for r in rows if r["load"] == load):
            q = r["ratio"]
            server = r["server"]
            if load == "fixed":
                server += f" at {record['rates'][server]:,}/s"
            cells = [
                server,
                f"`{r['mode']}`",
                f"{r['throughput']:,.0f}",
                _pct(q["throughput"]),
                f"{r['p50'] * 1e3:.2f}",
                f"{r['p99'] * 1e3:.2f}",
                _pct(q["p99"]),
                f"{r['p999'] * 1e3:.2f}",
                f"{r['cpu_per_request'] * 1e6:.0f}",
                _pct(q["cpu_per_request"]),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        tables[load] = "\n".join(lines) if len(lines) > 1 else "(not run)"
    idle_lines = [
        "| Mode | Whole server, ms/s | Per worker, µs/s | Per worker beyond the baseline, µs/s |",
        "|---|---:|---:|---:|",
    ]
    base = next((i for i in record["idle"] if i["mode"] == "baseline"), None)
    for i in sorted(record["idle"], key=lambda i: IDLE_MODES.index(i["mode"])):
        extra = (
            ""
            if base is None
            else f"{i['per_worker_us_per_s'] - base['per_worker_us_per_s']:+,.0f}"
        )
        idle_lines.append(
            f"| `{i['mode']}` | {i['cpu_per_s'] * 1e3:.1f} "
            f"| {i['per_worker_us_per_s']:,.0f} | {extra} |"
        )
    tables["idle"] = "\n".join(idle_lines)
    return tables


def _pct(ratio: float) -> str:
    return "" if ratio != ratio else f"{(ratio - 1) * 100:+.1f}%"


def plot(record: dict[str, Any], path: Path) -> None:
    """Latency percentiles side by side: a panel per server (columns) and load (rows), a group of
    bars per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summarise(record)
    servers = record["plan"]["servers"]
    loads = [x for x in ("fixed", "saturation") if any(r["load"] == x for r in rows)]
    fig, axes = plt.subplots(
        len(loads),
        len(servers),
        figsize=(1.6 + 2.8 * len(servers), 0.6 + 2.9 * len(loads)),
        dpi=110,
        squeeze=False,
    )
    legend: dict[str, Any] = {}
    for (i, load), (j, kind) in ((a, b) for a in enumerate(loads) for b in enumerate(servers)):
        ax = axes[i][j]
        mine = [r for r in rows if r["server"] == kind and r["load"] == load]
        if not mine:
            ax.set_visible(False)
            continue
        width = 0.8 / len(mine)
        for k, r in enumerate(mine):
            ys = [r[p] * 1e3 for p in ("p50", "p99", "p999")]
            colour = f"C{SERVERS['uvicorn'].index(r['mode'])}"  # one colour per mode everywhere
            bars = ax.bar([x + k * width for x in range(3)], ys, width, color=colour)
            legend.setdefault(r["mode"], bars)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(3)], ["p50", "p99", "p99.9"])
        rate = f"{record['rates'][kind]}/s" if load == "fixed" else "saturation"
        ax.set_title(f"{kind}, {rate}", fontsize=9)
        ax.set_yscale("log")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    for row in axes:
        row[0].set_ylabel("latency (ms, log scale)")
    axes[0][-1].legend(
        list(legend.values()),
        list(legend),
        fontsize=7,
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        frameon=False,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def report(out: Path, *, draw: bool) -> dict[str, str]:
    record = json.loads((out / "webapp.json").read_text())
    tables = markdown(record)
    (out / "webapp.md").write_text("\n\n".join(tables.values()) + "\n")
    if draw:
        plot(record, PLOT)
    return tables


def smoke_check(record: dict[str, Any]) -> int:
    """Every server and mode answered every request; nothing about time."""
    bad = [x for x in record["loads"] if x["fixed"]["errors"] or not x["fixed"]["throughput"]]
    bad += [x for x in record["loads"] if "saturation" in x and not x["saturation"]["throughput"]]
    if bad or len(record["idle"]) != len(record["idle_plan"]["idle_modes"]):
        log(f"SMOKE FAILED: {bad[:2]} idle {record['idle']}")
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--servers", help="comma-separated (default: all)")
    parser.add_argument(
        "--no-idle",
        action="store_true",
        help="skip the idle phase (and keep the idle results already in the folder)",
    )
    parser.add_argument(
        "--idle-only",
        action="store_true",
        help="only the idle phase (and keep the loads' results already in the folder)",
    )
    parser.add_argument("--fraction", type=float, help="the fixed rate, of the saturation")
    parser.add_argument("--report-only", type=Path, metavar="DIR")
    args = parser.parse_args()
    if args.report_only:
        tables = report(args.report_only, draw=True)
        print("\n\n".join(tables.values()))
        return 0
    plan = SMOKE if args.smoke else FULL
    changes: dict[str, Any] = {
        k: getattr(args, k) for k in ("rounds", "seconds", "fraction") if getattr(args, k)
    }
    if args.servers:
        changes["servers"] = tuple(args.servers.split(","))
    if args.no_idle:
        changes["idle_modes"] = ()
    if args.idle_only:
        changes["servers"] = ()
    plan = replace(plan, **changes)
    with tempfile.TemporaryDirectory(prefix="webapp-smoke-") as tmp:
        out = args.out or (Path(tmp) if args.smoke else RESULTS)
        record = run(plan, out)
        tables = report(out, draw=not args.smoke)
    print("\n\n".join(tables.values()))
    log(f"done in {record['duration_s']} s")
    return smoke_check(record) if args.smoke else 0


if __name__ == "__main__":
    sys.exit(main())
