"""The application-cost benchmarks: their arithmetic, their load generator, their modes.

Never a time: ratios of made-up values, a real HTTP server on 127.0.0.1 that
must answer every request, and the modes set up for real in child processes.
"""

from __future__ import annotations

import http.server
import json
import math
import os
import statistics
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from .support.loading import load_file

# The benchmarks' own package: in the full environment, not in the version cells.
pyperf = pytest.importorskip("pyperf")

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def load(name: str) -> ModuleType:
    return load_file(BENCHMARKS / f"{name}.py", f"bench_{name}")


# --- loadgen.py: every request answered, latency from when it was due ---------------


class _Handler(http.server.BaseHTTPRequestHandler):
    body = b'{"ok": true}'

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(params=["HTTP/1.1", "HTTP/1.0"])
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    """keep-alive (1.1) and a connection per request (1.0, as gunicorn's sync workers)."""
    handler = type("Handler", (_Handler,), {"protocol_version": request.param})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/items?limit=3"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_loadgen_sends_every_request_and_times_each(server: str) -> None:
    loadgen = load("loadgen")
    found = loadgen.load(server, rate=200, seconds=0.5, connections=8)
    assert found.sent == 100
    assert (found.ok, found.errors) == (100, 0)
    assert found.latencies == sorted(found.latencies)
    assert all(x > 0 for x in found.latencies)
    assert found.percentile(100) == found.latencies[-1]
    assert found.percentile(50) == found.latencies[49]
    assert found.percentile(99.9) == found.latencies[99]


def test_loadgen_counts_a_refused_connection_as_an_error() -> None:
    import socket

    loadgen = load("loadgen")
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    found = loadgen.load(f"http://127.0.0.1:{port}/", rate=100, seconds=0.1)
    assert (found.ok, found.errors, found.sent) == (0, 10, 10)
    assert math.isnan(found.percentile(99))


# --- overhead.py: ratios, significance, geometric mean ----------------------------------


def _suite(path: Path, values: dict[str, list[list[float]]]) -> None:
    benches = []
    for name, runs in values.items():
        meta = {"name": name, "unit": "second", "loops": 1}
        benches.append(
            pyperf.Benchmark([pyperf.Run(r, metadata=meta, collect_metadata=False) for r in runs])
        )
    pyperf.BenchmarkSuite(benches).dump(str(path))


def test_overhead_ratios_and_geometric_mean(tmp_path: Path) -> None:
    overhead = load("overhead")
    base = {"a": [[1.0, 1.02], [0.98, 1.0], [1.0, 1.01]], "b": [[2.0, 2.01], [1.99, 2.0], [2, 2]]}
    mode = {
        "a": [[x * 1.1 for x in r] for r in base["a"]],
        "b": [[x * 1.21 for x in r] for r in base["b"]],
    }
    _suite(tmp_path / "baseline@1s.json", base)
    _suite(tmp_path / "defaults@1s.json", mode)
    (found,) = overhead.analyse(tmp_path)
    assert (found.mode, found.baseline, found.runs, found.unit) == (
        "defaults@1s",
        "baseline@1s",
        3,
        "runs",
    )
    ratios = {r.benchmark: r for r in found.ratios}
    assert ratios["a"].ratio == pytest.approx(1.1)
    assert ratios["b"].ratio == pytest.approx(1.21)
    assert ratios["a"].significant and ratios["b"].significant
    assert found.geomean == pytest.approx(math.sqrt(1.1 * 1.21))
    # Every run has the same ratio: the interval is the point.
    assert found.low == pytest.approx(found.geomean)
    assert found.high == pytest.approx(found.geomean)
    table = overhead.markdown([found], "1s")
    assert "| a | 1.100* |" in table and "**1.1537**" in table


def test_overhead_calls_the_same_values_not_significant(tmp_path: Path) -> None:
    overhead = load("overhead")
    base = {"a": [[1.0, 1.1], [0.9, 1.0]]}
    _suite(tmp_path / "baseline@60s.json", base)
    _suite(tmp_path / "defaults@60s.json", base)
    (found,) = overhead.analyse(tmp_path)
    assert found.ratios[0].ratio == pytest.approx(1.0)
    assert not found.ratios[0].significant


def test_overhead_interval_across_benchmarks_with_few_runs(tmp_path: Path) -> None:
    overhead = load("overhead")
    base = {n: [[1.0, 1.001]] for n in "abcd"}
    mode = {
        n: [[x * r for x in base[n][0]]]
        for n, r in zip("abcd", (1.02, 0.98, 1.02, 0.98), strict=True)
    }
    _suite(tmp_path / "baseline@1s.json", base)
    _suite(tmp_path / "defaults@1s.json", mode)
    (found,) = overhead.analyse(tmp_path)
    # One run each: the t-interval of the mean log ratio over the 4 benchmarks.
    logs = [math.log(x) for x in (1.02, 0.98, 1.02, 0.98)]
    half = 3.182 * statistics.stdev(logs) / 2  # Student's t, 3 degrees of freedom
    assert found.unit == "benchmarks"
    assert found.low == pytest.approx(found.geomean * math.exp(-half))
    assert found.high == pytest.approx(found.geomean * math.exp(half))


def test_overhead_flags_a_worker_that_did_not_run_its_mode() -> None:
    overhead = load("overhead")
    chosen = overhead.modes((1,), "cpu")
    marks = [
        {"name": "defaults@1s", "kind": "ours", "ours": True, "options": {}, "peer": None},
        {"name": "event_loop@1s", "kind": "ours", "ours": True, "options": {"event_loop": False}},
        {"name": "peer@1s", "kind": "peer", "ours": False, "options": False, "peer": True},
        {"name": "baseline@1s", "kind": "baseline", "ours": True, "options": {}, "peer": None},
    ]
    found = overhead.workers(marks, chosen, 1)
    assert found["defaults@1s"]["wrong"] == [] and found["peer@1s"]["wrong"] == []
    assert found["event_loop@1s"]["wrong"] and found["baseline@1s"]["wrong"]
    assert found["children@1s"]["workers"] == 0


# --- webapp.py and app_cost.py: medians, ratios, verdicts ----------------------------


def _load(throughput: float, p99: float) -> dict[str, float]:
    return {"throughput": throughput, "errors": 0, "p50": p99 / 10, "p99": p99, "p999": p99 * 2}


def test_webapp_summary_is_the_median_of_rounds_against_the_baseline() -> None:
    webapp = load("webapp")
    record = {
        "plan": {"servers": ["gunicorn-sync"]},
        "rates": {"gunicorn-sync": 100},
        "loads": [
            {
                "server": "gunicorn-sync",
                "mode": mode,
                "round": r,
                "fixed": {**_load(100, p99), "cpu_per_request": cpu},
                "saturation": {**_load(t, p99), "cpu_per_request": cpu},
            }
            for r, (mode, t, p99, cpu) in enumerate(
                [
                    ("baseline", 1000, 0.010, 1e-4),
                    ("baseline", 1004, 0.0101, 1e-4),
                    ("baseline", 998, 0.01005, 1e-4),
                    ("defaults", 990, 0.0113, 1.02e-4),
                    ("defaults", 980, 0.01133, 1.02e-4),
                    ("defaults", 1200, 0.0114, 1.02e-4),
                ]
            )
        ],
        "idle": [],
    }
    rows = {(r["load"], r["mode"]): r for r in webapp.summarise(record)}
    sat = rows[("saturation", "defaults")]
    assert sat["throughput"] == 990 and sat["rounds"] == 3
    assert sat["ratio"]["throughput"] == pytest.approx(0.99)
    assert sat["ratio"]["p99"] == pytest.approx(0.01133 / 0.01005)
    assert rows[("fixed", "defaults")]["ratio"]["cpu_per_request"] == pytest.approx(1.02)
    assert ("saturation", "peer") not in rows  # not run: not reported
    goals = {g[0]: g for g in load("app_cost").webapp_goals(record)}
    assert goals["Defaults, gunicorn-sync, saturation: throughput"][2] == "-1.0%"
    assert "met" in goals["Defaults, gunicorn-sync, saturation: throughput"][3]
    assert goals["Defaults, gunicorn-sync, saturation: p99 latency"][2] == "+12.7%"
    assert "missed" in goals["Defaults, gunicorn-sync, saturation: p99 latency"][3]
    # A baseline whose rounds differ by more than the goal decides nothing.
    record["loads"][1]["saturation"]["throughput"] = 1100
    goals = {g[0]: g for g in load("app_cost").webapp_goals(record)}
    verdict = goals["Defaults, gunicorn-sync, saturation: throughput"][3]
    assert verdict == "not resolved (the baseline's rounds differ by 10%)"


def test_verdict_needs_the_whole_interval_on_one_side() -> None:
    app_cost = load("app_cost")
    assert app_cost._verdict(0.99, 1.004, 1.005) == "**met**"
    assert app_cost._verdict(1.006, 1.02, 1.005) == "**missed**"
    assert app_cost._verdict(0.99, 1.02, 1.005).startswith("not resolved")
    assert app_cost._verdict(math.nan, math.nan, 1.005).startswith("not resolved")
    # An interval of +-2% from 3 rounds: +-0.5% takes (2 / 0.5)^2 = 16 times as many.
    wide = {"low": 0.99, "high": 1.03, "runs": 3, "unit": "runs"}
    assert app_cost._rounds_for(wide, 0.005).endswith("needs about 48 rounds")
    assert app_cost._rounds_for({**wide, "high": 0.999}, 0.005) == ""


# --- appcost/appmode.py: each mode, set up for real in its own process -----------------


@pytest.mark.parametrize(
    ("mode", "ours", "peer"),
    [
        ({"kind": "baseline"}, False, None),
        ({"kind": "ours", "options": {}}, True, None),
        ({"kind": "ours", "options": {"event_loop": True}}, True, None),
        ({"kind": "peer"}, False, True),
    ],
)
def test_appmode_sets_up_what_it_says(
    mode: dict[str, object], ours: bool, peer: object, tmp_path: Path
) -> None:
    mode = {"name": "m", "interval_ms": 60_000, **mode}
    code = (
        "import json, appmode; m = json.loads(__import__('os').environ['M']);"
        "p = appmode.setup(m); print(json.dumps(appmode.describe(m))); p.shutdown()"
    )
    env = {**os.environ, "PYTHONPATH": str(BENCHMARKS / "appcost"), "M": json.dumps(mode)}
    env = {k: v for k, v in env.items() if not k.startswith("OTEL_PYTHON_PROCESS")}
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env["OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"] = str(runtime)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert (found["ours"], found["peer"]) == (ours, peer)
    if mode.get("options"):
        assert found["options"] == {"event_loop": True}
