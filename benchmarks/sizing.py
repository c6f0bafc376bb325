"""Sizing: what a gunicorn server of N recycled workers costs a backend, before and after.

    python benchmarks/sizing.py [--workers 2 8 32] [--seconds 20] [--plot]
    python benchmarks/sizing.py --smoke        # 2 workers, a few seconds, no plot

For each N and each recipe (``sizing_gunicorn.conf.py``: ``before`` is the
old recipe, a random ``service.instance.id`` and the pid per worker and every
worker reporting the shared metrics; ``after`` is examples/gunicorn as it is),
a real gunicorn with N workers exports every ``INTERVAL_MS`` over OTLP/gRPC to
a real Collector (its own, for its CPU), which forwards to a real
VictoriaMetrics. Requests make gunicorn recycle each worker about
``RECYCLES`` times during the run (``--max-requests``). Then, from what
VictoriaMetrics holds and what the OS says:

- series: all series of the run, those active at its end, and the new ones per
  hour at this recycling rate (series created after the first round);
- points per export round of the whole server;
- the summed CPU time of the workers' collections
  (``process_metrics.refresh.cpu_time`` over every collection), per round, and
  a leader's and a non-leader's collection apart (the leader's collections are
  those that carry ``system.memory.usage``);
- the Collector's CPU time per second and per worker.

Goals: series independent of the recycles; the shared metrics from one worker
per round; summed collection CPU per round at most ``(N - 1)`` non-leader
collections plus one leader's. Results go to ``results/sizing.json``; with
``--plot``, ``docs/_static/benchmarks/sizing.png`` (series against N and
against recycles).
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
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from tests.e2e.servers import (  # noqa: E402 - the tests' real-server helpers
    Collector,
    VictoriaMetrics,
    collector_config,
    free_port,
    locate,
)

CONF = HERE / "sizing_gunicorn.conf.py"
INTERVAL_MS = 1000
RECYCLES = 3
"""Times each worker is recycled during a run, about."""
BIN = Path(sys.executable).parent


@dataclass
class Sizing:
    """One run: N workers, one recipe."""

    workers: int
    recipe: str
    seconds: float
    recycles: int
    """Workers that gunicorn started beyond the first N."""
    series_total: int
    series_active: int
    series_first_round: int
    new_series_per_hour: float
    points_per_round: float
    rounds: float
    max_shared_reporters_per_window: int
    windows_with_two_reporters: int
    refresh_cpu_per_round_ms: float
    leader_collection_ms: float
    non_leader_collection_ms: float
    budget_per_round_ms: float
    collector_cpu_ms_per_s_per_worker: float
    series_by_recycles: list[tuple[int, int]] = field(default_factory=list)


def _get(port: int) -> None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            r.read()
    except OSError:
        pass


def _series(vm: VictoriaMetrics, service: str, start: float) -> int:
    vm.flush()
    params = [("match[]", f'{{service_name="{service}"}}'), ("start", f"{start:.3f}")]
    return len(vm.api("/api/v1/series", [*params, ("end", f"{time.time() + 60:.3f}")]))


def _instances(vm: VictoriaMetrics, service: str) -> int:
    uptime = f'process_uptime_seconds{{service_name="{service}"}}'
    expr = f"count(count by (service_instance_id) ({uptime}))"
    found = vm.query(expr)
    return int(float(found[0]["value"][1])) if found else 0


def run_one(workers: int, recipe: str, seconds: float, folder: Path) -> Sizing:
    vm_bin, why = locate("VICTORIA_METRICS_BIN", "victoria-metrics")
    col_bin, why2 = locate("OTELCOL_BIN", "otelcol")
    if vm_bin is None or col_bin is None:
        raise SystemExit(f"sizing needs the real servers: {why or why2}")
    folder.mkdir(parents=True, exist_ok=True)
    vm = VictoriaMetrics(vm_bin, folder / "vm", folder / "vm.log", prometheus_naming=True)
    grpc, http = free_port(), free_port()
    config = folder / "otelcol.yaml"
    config.write_text(collector_config(grpc, http, [vm.otlp_url]))
    col = Collector(col_bin, config, folder / "otelcol.log", grpc, http)
    service = f"sizing-{recipe}-{workers}-{os.urandom(3).hex()}"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        OTEL_SERVICE_NAME=service,
        OTEL_METRICS_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=col.grpc_endpoint,
        OTEL_METRIC_EXPORT_INTERVAL=str(INTERVAL_MS),
        OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR=tempfile.mkdtemp(prefix="sizing-group-"),
        SIZING_RECIPE=recipe,
        GUNICORN_BIND=f"127.0.0.1:{port}",
        GUNICORN_WORKERS=str(workers),
    )
    # Each worker serves about this many requests before gunicorn replaces it.
    per_worker = 10
    argv = [str(BIN / "gunicorn"), "--config", str(CONF), "--max-requests", str(per_worker)]
    with vm.running(), col.running():
        collector = psutil.Process(col.child.pid)  # type: ignore[union-attr]
        log = (folder / "gunicorn.log").open("wb")
        server = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            master = psutil.Process(server.pid)
            while len(master.children()) < workers:
                time.sleep(0.1)
            started = time.time()
            seen = {p.pid for p in master.children()}
            # The first round: once every worker has exported.
            deadline = time.monotonic() + 60
            while _instances(vm, service) < workers and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(INTERVAL_MS / 1000)
            first_round = _series(vm, service, started - 60)
            cpu0 = sum(collector.cpu_times()[:2])
            t0 = time.monotonic()
            # Requests spread over the run: each worker recycled about RECYCLES times.
            total = workers * per_worker * RECYCLES
            pause = max(0.0, seconds / total - 0.002)
            curve: list[tuple[int, int]] = []
            stamps: list[float] = []
            for i in range(total):
                _get(port)
                time.sleep(pause)
                seen |= {p.pid for p in master.children()}
                if i % max(1, total // 6) == 0:
                    curve.append((len(seen) - workers, _series(vm, service, started - 60)))
                    stamps.append(time.monotonic())
            time.sleep(2 * INTERVAL_MS / 1000)
            elapsed = time.monotonic() - t0
            collector_cpu = sum(collector.cpu_times()[:2]) - cpu0
            seen |= {p.pid for p in master.children()}
            ended, t_end = time.time(), time.monotonic()
        finally:
            server.terminate()
            server.wait(60)
            log.close()
        time.sleep(0.5)
        total_series = _series(vm, service, started - 60)
        curve.append((len(seen) - workers, total_series))
        active = vm.query(f'count(last_over_time({{service_name="{service}"}}[5s]))', at=ended)
        span = f"{int(ended - started) + 5}s"
        points = vm.query(f'sum(count_over_time({{service_name="{service}"}}[{span}]))', at=ended)
        refresh = vm.export(
            f'process_metrics_refresh_cpu_time_seconds{{service_name="{service}"}}', start=started
        )
        shared = vm.export(
            f'system_memory_usage_bytes{{service_name="{service}", system_memory_state="used"}}',
            start=started,
        )
    led = {(r["metric"]["service_instance_id"], t) for r in shared for t in r["timestamps"]}
    leader_ms, other_ms = [], []
    for row in refresh:
        instance = row["metric"]["service_instance_id"]
        for t, v in zip(row["timestamps"], row["values"], strict=True):
            (leader_ms if (instance, t) in led else other_ms).append(float(v) * 1000)
    rounds = (ended - started) / (INTERVAL_MS / 1000)
    leader = statistics.median(leader_ms) if leader_ms else 0.0
    other = statistics.median(other_ms) if other_ms else leader
    per_round = (sum(leader_ms) + sum(other_ms)) / rounds
    windows: dict[int, set[str]] = {}
    for instance, t in led:
        windows.setdefault(t // INTERVAL_MS, set()).add(instance)
    # New series per hour, from the second half of the run: the rate they keep coming at.
    mid = len(curve) // 2
    late_series = total_series - curve[mid][1]
    late_seconds = t_end - stamps[mid] if stamps else elapsed
    return Sizing(
        workers=workers,
        recipe=recipe,
        seconds=round(elapsed, 1),
        recycles=len(seen) - workers,
        series_total=total_series,
        series_active=int(float(active[0]["value"][1])) if active else 0,
        series_first_round=first_round,
        new_series_per_hour=round(max(0, late_series) / late_seconds * 3600),
        points_per_round=round(float(points[0]["value"][1]) / rounds, 1) if points else 0.0,
        rounds=round(rounds, 1),
        max_shared_reporters_per_window=max((len(w) for w in windows.values()), default=0),
        windows_with_two_reporters=sum(1 for w in windows.values() if len(w) > 1),
        refresh_cpu_per_round_ms=round(per_round, 3),
        leader_collection_ms=round(leader, 3),
        non_leader_collection_ms=round(other, 3),
        budget_per_round_ms=round((workers - 1) * other + leader, 3),
        collector_cpu_ms_per_s_per_worker=round(collector_cpu / elapsed / workers * 1000, 3),
        series_by_recycles=curve,
    )


def markdown(results: list[Sizing]) -> str:
    head = (
        "| N | recipe | seconds | recycles | series (all / active / 1st round) "
        "| new series per hour "
        "| points per round | shared reporters per window (max; windows with 2+) "
        "| collection CPU per round "
        "(budget) | leader / non-leader collection | Collector CPU per worker |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = "".join(
        f"| {r.workers} | {r.recipe} | {r.seconds:.0f} | {r.recycles} | "
        f"{r.series_total} / {r.series_active} / "
        f"{r.series_first_round} | {r.new_series_per_hour:,.0f} | {r.points_per_round:,.0f} | "
        f"{r.max_shared_reporters_per_window}; {r.windows_with_two_reporters} | "
        f"{r.refresh_cpu_per_round_ms:.2f} ms "
        f"({r.budget_per_round_ms:.2f} ms) | {r.leader_collection_ms:.2f} / "
        f"{r.non_leader_collection_ms:.2f} ms | {r.collector_cpu_ms_per_s_per_worker:.2f} ms/s |\n"
        for r in results
    )
    return head + rows


def plot(results: list[Sizing], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (by_n, by_recycles) = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    sizes = sorted({r.workers for r in results})
    colour = {n: f"C{i}" for i, n in enumerate(sizes)}
    for recipe, style in (("before", "--s"), ("after", "-o")):
        mine = sorted((r for r in results if r.recipe == recipe), key=lambda r: r.workers)
        by_n.plot([r.workers for r in mine], [r.series_total for r in mine], style, label=recipe)
        for r in mine:
            xs, ys = zip(*r.series_by_recycles, strict=True)
            label = f"{recipe}, N={r.workers}"
            by_recycles.plot(xs, ys, style, color=colour[r.workers], label=label, markersize=3)
    by_n.set(xscale="log", yscale="log", xlabel="workers N", ylabel="series over the run")
    by_n.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    by_n.set_xticks(sizes, [str(n) for n in sizes])
    by_recycles.set(yscale="log", xlabel="workers recycled so far", ylabel="series so far")
    for ax in (by_n, by_recycles):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Series of a gunicorn server in VictoriaMetrics (via the Collector)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--plot", action="store_true")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "sizing.json")
    parser.add_argument("--plot-only", type=Path, help="draw the figure from a results file")
    args = parser.parse_args()
    if args.plot_only is not None:
        rows = json.loads(args.plot_only.read_text())
        for row in rows:
            row["series_by_recycles"] = [tuple(p) for p in row["series_by_recycles"]]
        found = [Sizing(**row) for row in rows]
        print(markdown(found))
        plot(found, REPO / "docs" / "_static" / "benchmarks" / "sizing.png")
        return
    sizes, seconds = ([2], 4.0) if args.smoke else (args.workers, args.seconds)
    results = []
    with tempfile.TemporaryDirectory(prefix="sizing-") as tmp:
        for n in sizes:
            for recipe in ("before", "after"):
                results.append(run_one(n, recipe, seconds, Path(tmp) / f"{recipe}-{n}"))
                print(markdown(results[-1:]).splitlines()[-1], flush=True)
    print(markdown(results))
    for r in results:
        if r.recipe == "after":
            first = r.series_first_round
            assert r.series_total <= first * 2, f"N={r.workers}: series grew with recycles: {r}"
            assert r.windows_with_two_reporters <= r.recycles, f"N={r.workers}: shared twice: {r}"
    if not args.smoke:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
        if args.plot:
            plot(results, REPO / "docs" / "_static" / "benchmarks" / "sizing.png")


if __name__ == "__main__":
    main()
