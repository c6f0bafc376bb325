"""Every example runs here, in a subprocess with a short interval, so that none rots.

Most run with the console exporter (or serve a scrape). The OTLP push, the
collector config and the dashboard need the real servers of
``scripts/get-servers.sh``: ``tests/e2e/test_examples_e2e.py`` runs them
against VictoriaMetrics and the collector on 127.0.0.1. A test fails when an
example file is run by no test.
"""

from __future__ import annotations

import ast
import importlib.metadata
import io
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from opentelemetry.instrumentation.process.catalog import PER_CHILD, supported
from opentelemetry.instrumentation.process.metrics import METRICS, METRICS_BY_NAME, Kind

from .conftest import events_metrics, on_by_default
from .support.examples import BIN, ROOT, Lines, clean_env, free_port, start
from .support.loading import load_file

EXAMPLES = ROOT / "examples"

# Example files run by the tests in this module.
RUN_HERE = {
    "console_demo.py",
    "instrument/app.py",
    "prometheus/app.py",
    "gunicorn/app.py",
    "gunicorn/gunicorn.conf.py",
    # Supervisor mode: run by tests/test_children_gunicorn.py.
    "gunicorn/gunicorn_master.conf.py",
    "frequency/cpu_frequency.py",
    "grafana/queries.py",
    "grafana/process-metrics-dashboard.json",
}
# Example files that need the real servers; tests/e2e/test_examples_e2e.py runs them.
# (tests/e2e also runs the gunicorn and opentelemetry-instrument examples
# against VictoriaMetrics.)
NEEDS_SERVERS = {
    "otlp/push.py": "otelcol + VictoriaMetrics",
    "otlp/otelcol-config.yaml": "otelcol + VictoriaMetrics",
    "grafana/process-metrics-dashboard.json": "VictoriaMetrics",
    # The pre-fork recipes of docs/prefork.md: tests/e2e/test_prefork.py.
    "uwsgi/app.py": "uWSGI + VictoriaMetrics",
    "uwsgi/uwsgi.ini": "uWSGI + VictoriaMetrics",
    "celery-worker/tasks.py": "Celery + VictoriaMetrics",
    "multiprocessing-pool/pool.py": "VictoriaMetrics",
    "uvicorn/app.py": "uvicorn + VictoriaMetrics",
    # Supervisor mode (docs/supervisor.md): tests/e2e/test_supervisor.py.
    "uwsgi/supervisor.py": "uWSGI",
    "uwsgi/supervisor.ini": "uWSGI",
    "uwsgi/mule.py": "uWSGI",
    "uwsgi/mule.ini": "uWSGI",
}
# The pre-fork examples that print without a collector (OTEL_METRICS_EXPORTER=console).
PREFORK_EXAMPLES = (
    "uvicorn/app.py",
    "celery-worker/tasks.py",
    "uwsgi/app.py",
    "multiprocessing-pool/pool.py",
)
RUN_HERE |= set(PREFORK_EXAMPLES) | {"uwsgi/uwsgi.ini"}
SERVERS = Path(os.environ.get("SERVERS_CACHE_DIR") or ROOT / ".cache" / "servers") / "bin"
NOT_CODE = {"README.md"}


def run(args: list[str], timeout: float = 30, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args,
        env=clean_env(**env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done


def stop(proc: subprocess.Popen[Any], timeout: float = 15) -> int:
    """SIGTERM ``proc`` and wait; kill it if it does not go in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        raise


def json_documents(text: str) -> Iterator[Any]:
    """The JSON documents written one after another by the console exporter."""
    decoder = json.JSONDecoder()
    i = 0
    while True:
        start = text.find("{", i)
        if start < 0:
            return
        doc, i = decoder.raw_decode(text, start)
        yield doc


def test_every_example_is_run_somewhere() -> None:
    files = {
        p.relative_to(EXAMPLES).as_posix()
        for p in EXAMPLES.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    untested = files - RUN_HERE - set(NEEDS_SERVERS) - NOT_CODE
    assert not untested, f"examples that no test runs: {sorted(untested)}"
    assert (RUN_HERE | set(NEEDS_SERVERS)) <= files, "a listed example does not exist"


def test_console_demo() -> None:
    out = run(
        [sys.executable, "examples/console_demo.py"], DEMO_SECONDS="1.5", DEMO_INTERVAL_MS="500"
    ).stdout
    assert out.startswith("Process metrics of this demo, 3 exports, one every 0.5 s.\n"), out
    exports = re.split(r"^== export \d of 3, at [\d.]+ s ==$", out, flags=re.MULTILINE)[1:]
    assert len(exports) == 3, out  # exactly the announced number, none at shutdown
    first = exports[0]
    names = set(re.findall(r"^([a-z][\w.]+) ", first, re.MULTILINE))
    assert names - events_metrics() == on_by_default()
    assert len(first.strip().splitlines()) == len(names)  # one line per metric
    # The values start in one column, the long pressure-stall names included.
    starts = {len(line) - len(line.split(None, 1)[1]) for line in first.strip().splitlines()}
    assert len(starts) == 1, first
    # The note on the two disk metrics, once, under the last table.
    assert out.count("Note: process.disk.operations counts read and write calls") == 1
    assert "Note: process.disk.operations" in exports[-1]
    rss = re.search(r"^process\.memory\.usage +([\d,.]+) MiB$", first, re.MULTILINE)
    assert rss is not None and float(rss.group(1).replace(",", "")) > 1
    assert re.search(r"^process\.cpu\.time +user=[\d.,]+ m?s  system=", first, re.MULTILINE)
    assert re.search(r"^cpython\.gc\.collections +generation 0=\d+", first, re.MULTILINE)
    # Values are rounded for reading: no float printed to 17 digits.
    assert not re.search(r"\d\.\d{5,}", out), out


def test_instrument_configured_by_environment() -> None:
    done = run(
        [str(BIN / "opentelemetry-instrument"), "python", "examples/instrument/app.py"],
        OTEL_SERVICE_NAME="instrument-example",
        OTEL_METRICS_EXPORTER="console",
        OTEL_TRACES_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_METRIC_EXPORT_INTERVAL="400",
        OTEL_PYTHON_PROCESS_METRICS_EXCLUDE="cpython.gc.*",
        OTEL_PYTHON_PROCESS_METRICS_INCLUDE="process_metrics.unix.file_descriptor.limit",
        # The peer is installed in the test environment: keep it out.
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="system_metrics",
        EXAMPLE_SECONDS="1.2",
    )
    assert "handled" in done.stdout
    scopes: dict[str, set[str]] = {}
    services = set()
    for doc in json_documents(done.stdout):
        for rm in doc["resource_metrics"]:
            services.add(rm["resource"]["attributes"]["service.name"])
            for sm in rm["scope_metrics"]:
                names = scopes.setdefault(sm["scope"]["name"], set())
                names.update(m["name"] for m in sm["metrics"])
    assert services == {"instrument-example"}
    assert set(scopes) == {"opentelemetry.instrumentation.process"}, "the peer was not disabled"
    names = scopes["opentelemetry.instrumentation.process"]
    assert {"process.cpu.time", "process.memory.usage", "system.cpu.time"} <= names
    # The example's 'cpython.gc.*' leaves no GC metric on, this package's own pauses included.
    assert not {n for n in names if "cpython.gc." in n}, "EXCLUDE was ignored"
    if supported(METRICS_BY_NAME["process_metrics.unix.file_descriptor.limit"]):
        assert "process_metrics.unix.file_descriptor.limit" in names, "INCLUDE was ignored"


PEER = "opentelemetry-instrumentation-system-metrics"
PEER_SCOPE = "opentelemetry.instrumentation.system_metrics"
KEEP_PEER_OUT = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=system_metrics"
AUTO_COMMAND = re.compile(r"opentelemetry-instrument\s+(python|gunicorn|uvicorn|celery)\b")


def test_every_auto_instrumented_example_keeps_the_peer_out_of_the_venv_it_recommends() -> None:
    """examples/README.md: the project's venv (``make setup``) holds the peer instrumentor
    too, which ``opentelemetry-instrument`` would turn on beside this package: each command
    of the examples run under it says how to keep the peer out, as the tests do."""
    readme = (EXAMPLES / "README.md").read_text()
    assert "(`make setup && . .venv/bin/activate`)" in readme
    test_extra = [
        r
        for r in importlib.metadata.requires("opentelemetry-instrumentation-process") or []
        if r.startswith(PEER) and "extra == 'test'" in r
    ]
    assert test_extra, "make setup no longer installs the peer: the variable is not needed"
    group = "opentelemetry_instrumentor"
    peer = importlib.metadata.entry_points(group=group, name="system_metrics")
    if not peer:
        pytest.skip("the peer instrumentor is not installed in this venv (a matrix cell's)")
    found = 0
    for path in sorted(p for p in EXAMPLES.rglob("*") if p.suffix in {".md", ".py"}):
        # A paragraph, or a block of a docstring: the command and what it is run with.
        for block in re.split(r"\n[ \t]*\n", path.read_text()):
            if AUTO_COMMAND.search(block):
                found += 1
                assert KEEP_PEER_OUT in block, f"{path.relative_to(ROOT)}:\n{block}"
    assert found >= 3  # the README's gunicorn, the instrument example, gunicorn.conf.py


def _readme_auto_gunicorn() -> tuple[Path, dict[str, str], list[str]]:
    """The README's auto-instrumented gunicorn command: its folder, variables and arguments."""
    readme = (EXAMPLES / "README.md").read_text().replace("\\\n", " ")
    found = re.search(r"cd (\S+) && ([^`()\n]*opentelemetry-instrument gunicorn [^`()\n]*)", readme)
    assert found is not None, (
        "examples/README.md has no cd ... && opentelemetry-instrument gunicorn"
    )
    words = shlex.split(found[2])
    env = dict(w.split("=", 1) for w in itertools.takewhile(lambda w: "=" in w, words))
    return ROOT / found[1], env, words[len(env) :]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="gunicorn needs fork")
def test_the_readmes_auto_instrumented_gunicorn_prints_this_package_alone() -> None:
    """Run as examples/README.md writes it, in this venv, where the peer is installed: each
    worker reports itself, and no provider prints the peer's metrics."""
    cwd, env, args = _readme_auto_gunicorn()
    proc = start(
        [str(BIN / args[0]), *args[1:]],
        cwd=cwd,
        stderr=subprocess.DEVNULL,
        GUNICORN_BIND=f"127.0.0.1:{free_port()}",
        **CONSOLE,
        **env,
    )
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        by_pid = _reports(lines, 2, time.monotonic() + 60)
        # The master's and the workers' own providers collect at the same interval: two more
        # intervals of output before the end.
        end = time.monotonic() + 1.0
        while lines.next(end) is not None:
            pass
        workers = {c.pid for c in psutil.Process(proc.pid).children()}
    finally:
        code = stop(proc)
    assert code == 0
    _each_worker_reports_itself(by_pid, workers, "gunicorn-example")
    printed = "".join(lines.seen)
    assert PEER_SCOPE not in printed, "the peer's metrics are printed beside this package's"


def _catches_sigterm(pid: int) -> bool:
    """Whether ``pid`` has a SIGTERM handler (SigCgt of /proc/<pid>/status); True where unknown."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    found = re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.M)
    return found is None or bool(int(found[1], 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.skipif(
    sys.platform == "win32", reason="stops the example with SIGTERM, which Windows cannot send"
)
def test_instrument_with_the_prometheus_exporter() -> None:
    """``OTEL_METRICS_EXPORTER=prometheus``: the no-code way to a pull endpoint."""
    port = free_port()
    proc = start(
        [str(BIN / "opentelemetry-instrument"), "python", "examples/instrument/app.py"],
        OTEL_METRICS_EXPORTER="prometheus",
        OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
        OTEL_EXPORTER_PROMETHEUS_PORT=str(port),
        OTEL_TRACES_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="system_metrics",
        EXAMPLE_SECONDS="30",
    )
    try:
        # The endpoint may answer before the instrumentors have run: poll. The
        # other instrumentors may still be loading then (FastAPI's imports FastAPI):
        # SIGTERM only once the app has its handler.
        deadline = time.monotonic() + 20
        body = ""
        while time.monotonic() < deadline and not (
            "process_uptime_seconds" in body and _catches_sigterm(proc.pid)
        ):
            body = _http_get(f"http://127.0.0.1:{port}/metrics", deadline)
            time.sleep(0.1)
    finally:
        code = stop(proc)
        output = proc.stdout.read() if proc.stdout else ""
    assert code == 0, output
    assert "handled" in output
    assert re.search(r'^process_cpu_time_seconds_total\{cpu_mode="user"', body, re.MULTILINE)
    # Older exporters add no otel_scope_* labels: a series without attributes has none.
    assert re.search(r"^process_uptime_seconds(\{.*\})? [0-9.e+-]+$", body, re.MULTILINE)


@pytest.mark.skipif(
    sys.platform == "win32", reason="stops the example with SIGTERM, which Windows cannot send"
)
def test_prometheus_pull_endpoint() -> None:
    proc = start(
        [sys.executable, "examples/prometheus/app.py"],
        OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
        OTEL_EXPORTER_PROMETHEUS_PORT="0",  # the example prints the port it got
        EXAMPLE_SECONDS="30",
    )
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        line = lines.next(time.monotonic() + 20)
        assert line is not None and "serving metrics on" in line, lines.seen
        url = line.split()[-1]
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
    finally:
        code = stop(proc)
    assert code == 0
    assert re.search(r'^process_cpu_time_seconds_total\{cpu_mode="user"', body, re.MULTILINE)
    assert re.search(r"^process_memory_usage_bytes(\{.*\})? [0-9.e+-]+$", body, re.MULTILINE)
    assert re.search(r"^process_thread_count(\{.*\})? [0-9.e+]+$", body, re.MULTILINE)
    # prometheus_client's own process collector was unregistered: no duplicates.
    assert "process_cpu_seconds_total" not in body
    assert "python_gc_objects_collected_total" not in body


def _http_get(url: str, deadline: float) -> str:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _reports(
    lines: Lines, workers: int, deadline: float, each: int = 2
) -> dict[int, list[dict[str, Any]]]:
    """The console reports read from ``lines``, by pid, once ``workers`` pids have ``each``.

    A report is the one JSON line per export of the examples' console switch,
    alone on its line or after a log prefix.
    """
    by_pid: dict[int, list[dict[str, Any]]] = {}
    while not (len(by_pid) >= workers and all(len(v) >= each for v in by_pid.values())):
        line = lines.next(deadline)
        if line is None:
            break
        found = line.find('{"pid": ')
        if found >= 0:
            report = json.loads(line[found:])
            by_pid.setdefault(report["pid"], []).append(report)
    return by_pid


def _each_worker_reports_itself(
    by_pid: dict[int, list[dict[str, Any]]], workers: set[int], service: str
) -> None:
    """Each worker, and only they, report, each under one identity of its own, by slot."""
    assert set(by_pid) == workers, "each worker, and only the workers, report"
    instance_ids = {}
    for pid, reports in by_pid.items():
        ids = {(r["service.instance.id"], r["process_metrics.worker.slot"]) for r in reports}
        assert len(ids) == 1, f"worker {pid} changed identity: {ids}"
        instance_ids[pid] = ids.pop()
        assert all(r["metrics"]["process.memory.usage"][0] > 0 for r in reports)
        assert all(r["service.name"] == service for r in reports)
    assert len(set(instance_ids.values())) == len(workers), "workers share a service.instance.id"
    assert {slot for _, slot in instance_ids.values()} == set(range(len(workers))), instance_ids
    # The host's memory comes from one of them (the shared metrics are reported once).
    sharing = {
        p for p, reports in by_pid.items() for r in reports if "system.memory.usage" in r["shared"]
    }
    assert len(sharing) == 1, {pid: [r["shared"] for r in rs] for pid, rs in by_pid.items()}


CONSOLE = {"OTEL_METRICS_EXPORTER": "console", "OTEL_METRIC_EXPORT_INTERVAL": "300"}
"""The console switch of the pre-fork examples (examples/README.md): no collector needed."""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="gunicorn needs fork")
def test_gunicorn_workers_report_their_own_identity() -> None:
    port = free_port()
    proc = start(
        [
            *(str(BIN / "gunicorn"), "-c", "examples/gunicorn/gunicorn.conf.py"),
            *("--bind", f"127.0.0.1:{port}", "--workers", "2"),
        ],
        stderr=subprocess.DEVNULL,
        **CONSOLE,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        body = _http_get(f"http://127.0.0.1:{port}/", deadline)
        by_pid = _reports(Lines(proc.stdout), 2, deadline)
        workers = {c.pid for c in psutil.Process(proc.pid).children()}
    finally:
        code = stop(proc)
    assert code == 0
    assert re.fullmatch(r"served by worker pid (\d+)\n", body)
    assert int(body.split()[-1]) in workers
    assert len(workers) == 2 and proc.pid not in by_pid
    _each_worker_reports_itself(by_pid, workers, "gunicorn-example")


@pytest.mark.skipif(
    sys.platform == "win32", reason="stops the example with SIGTERM, which Windows cannot send"
)
def test_uvicorn_workers_print_without_a_collector() -> None:
    pytest.importorskip("uvicorn")
    port = free_port()
    proc = start(
        [str(BIN / "uvicorn"), "app:app", "--workers", "2", "--port", str(port)],
        stderr=subprocess.DEVNULL,
        cwd=EXAMPLES / "uvicorn",
        **CONSOLE,
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        body = _http_get(f"http://127.0.0.1:{port}/", deadline)
        by_pid = _reports(Lines(proc.stdout), 2, deadline)
        # Spawned by the supervisor (multiprocessing's resource tracker aside).
        workers = {c.pid for c in psutil.Process(proc.pid).children() if c.pid in by_pid}
    finally:
        code = stop(proc, timeout=30)
    assert code == 0
    assert re.fullmatch(r"served by uvicorn worker (\d+)\n", body)
    assert int(body.split()[-1]) in workers and len(workers) == 2
    _each_worker_reports_itself(by_pid, workers, "uvicorn-example")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_celery_pool_processes_print_without_a_collector(tmp_path: Path) -> None:
    celery = BIN / "celery"
    if not celery.is_file():
        pytest.skip("celery is not installed (pip install celery)")
    proc = start(
        [
            *(str(celery), "--app=tasks", "worker", "--pool=prefork", "--concurrency=2"),
            *("--without-gossip", "--without-mingle", "--without-heartbeat", "--loglevel=WARNING"),
        ],
        stderr=subprocess.DEVNULL,
        cwd=EXAMPLES / "celery-worker",
        CELERY_BROKER_FOLDER=str(tmp_path / "broker"),  # no broker server
        **CONSOLE,
    )
    try:
        assert proc.stdout is not None
        by_pid = _reports(Lines(proc.stdout), 2, time.monotonic() + 60)
        pool = {c.pid for c in psutil.Process(proc.pid).children()}
    finally:
        code = stop(proc, timeout=60)  # a warm shutdown: the pool exports one last time
    assert code == 0
    assert len(pool) == 2 and proc.pid not in by_pid
    _each_worker_reports_itself(by_pid, pool, "celery-example")


def test_uwsgi_workers_print_without_a_collector() -> None:
    binary = next(
        (Path(p) for p in (BIN / "uwsgi", shutil.which("uwsgi")) if p and os.access(p, os.X_OK)),
        None,
    )
    if binary is None:
        pytest.skip("uwsgi not found: `pip install uwsgi` (it builds from source, 1-3 minutes)")
    port = free_port()
    proc = start(
        [str(binary), "--ini", "examples/uwsgi/uwsgi.ini", "--http-socket", f"127.0.0.1:{port}"],
        **CONSOLE,  # uWSGI sends the workers' stdout to its log, on stderr: both are read
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        body = _http_get(f"http://127.0.0.1:{port}/", deadline)
        by_pid = _reports(Lines(proc.stdout), 2, deadline)
        workers = {c.pid for c in psutil.Process(proc.pid).children()}
    finally:
        code = stop(proc, timeout=30)
    assert code == 0
    assert re.fullmatch(r"hello from uWSGI worker (\d+)\n", body)
    assert len(workers) == 2 and proc.pid not in by_pid
    _each_worker_reports_itself(by_pid, workers, "uwsgi-example")


def test_multiprocessing_pool_workers_print_without_a_collector() -> None:
    done = run(
        [sys.executable, "examples/multiprocessing-pool/pool.py"],
        timeout=60,
        EXAMPLE_SECONDS="1.5",
        **CONSOLE,
    )
    burned = re.search(r"CPU seconds burned by each worker (\{.*\})$", done.stdout, re.MULTILINE)
    assert burned is not None, done.stdout
    workers = {int(pid) for pid in json.loads(burned.group(1))}
    lines = Lines(io.StringIO(done.stdout))
    by_pid = _reports(lines, len(workers), time.monotonic() + 5, each=1)
    # What each worker said, if one did not report (once, on a loaded 3.13t, none did).
    said = [line for line in done.stdout.splitlines() if not line.lstrip().startswith("{")]
    assert set(by_pid) == workers, (sorted(by_pid), said, done.stderr[-2000:])
    _each_worker_reports_itself(by_pid, workers, "multiprocessing-example")


def test_the_console_switch_is_written_once_and_copied_alike() -> None:
    """Each pre-fork example prints with the same ``_console_line`` as the gunicorn one."""

    def source(path: Path) -> str:
        tree = ast.parse(path.read_text())
        [found] = [
            n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_console_line"
        ]
        return ast.unparse(found)

    model = source(EXAMPLES / "gunicorn" / "gunicorn.conf.py")
    for path in PREFORK_EXAMPLES:
        assert source(EXAMPLES / path) == model, path
        text = (EXAMPLES / path).read_text()
        assert "OTEL_METRICS_EXPORTER=console" in text, path  # its docstring says how
    # examples/README.md says how to run each that way, as the tests above do.
    readme = (EXAMPLES / "README.md").read_text()
    section = readme[readme.index("## Pre-fork servers, without a collector") :]
    block = section[section.index("```sh") : section.index("```", section.index("```sh") + 3)]
    assert "export OTEL_METRICS_EXPORTER=console" in block
    for path in (*PREFORK_EXAMPLES, "gunicorn/gunicorn.conf.py"):
        assert path.split("/")[0] in block, path


def test_cpu_frequency_opt_in() -> None:
    out = run(
        [sys.executable, "examples/frequency/cpu_frequency.py"],
        EXAMPLE_SECONDS="1",
        EXAMPLE_INTERVAL_MS="400",
    ).stdout
    assert out.count("--- export ---") >= 2
    try:
        per_cpu = psutil.cpu_freq(percpu=True) or []
        overall = psutil.cpu_freq()
    except (AttributeError, NotImplementedError, OSError):
        per_cpu, overall = [], None
    # What this host exposes decides what must be there, and what must not.
    for n, f in enumerate(per_cpu):
        line = f"system.cpu.frequency{{cpu.logical_number={n}}} = "
        assert (line in out) == bool(f.current), out
    assert ("process_metrics.cpu.frequency.min{}" in out) == bool(overall and overall.min), out
    assert ("process_metrics.cpu.frequency.max{}" in out) == bool(overall and overall.max), out
    assert (" 0 Hz" in out) is False, "an unknown frequency was reported as 0"


# Rows whose panels are empty unless an option or the host turns their metrics on.
ROW_GROUPS = {"Saturation": "saturation", "Workers (supervisor mode)": "tree"}
STALLS_ROW = "Where the time went (stalls)"
"""The causes of docs/stalls.md, side by side: defaults, automatic and opt-in metrics."""


def test_dashboard_queries_use_only_default_metrics() -> None:
    """Outside the rows of ROW_GROUPS: those run against an app that has their metrics."""
    queries = load_file(EXAMPLES / "grafana" / "queries.py", "example_queries")
    found = queries.queries()
    dashboard = queries.load()
    targets = [t for p in dashboard["panels"] for t in p.get("targets", []) if t.get("expr")]
    assert len(found) == len(targets) + 2  # + the two query variables
    defaults = {m.name.replace(".", "_") for m in METRICS if m.default}
    # The event-loop panels need event_loop=True, which their description says;
    # the end-to-end tests feed them from a server that turns it on.
    opt_in = {m.name.replace(".", "_"): m.option for m in METRICS if m.option == "event_loop"}
    descriptions = {
        p["title"]: p.get("description", "") for p in queries.panels(dashboard["panels"])
    }
    used: set[str] = set()
    for q in (q for q in found if q.row not in ROW_GROUPS and q.row != STALLS_ROW):
        assert "$" not in q.expr, q
        assert q.expr.count("(") == q.expr.count(")"), q
        for name in re.findall(r"\b([a-z][a-z0-9_]*)\{", q.expr):
            used.add(name)
            option = next((o for n, o in opt_in.items() if name.startswith(n + "_")), None)
            if option is not None:
                title = q.source.removeprefix("panel ").rsplit(" / ", 1)[0]
                assert f"{option}=True" in descriptions[title], q.source
                continue
            # Prometheus naming appends unit and _total suffixes to the dotted name.
            assert any(name == d or name.startswith(d + "_") for d in defaults), (
                f"{q.source}: {name} is not a default metric, so the panel may be empty"
            )
    assert {"process_cpu_time_seconds_total", "process_memory_usage_bytes"} <= used
    with pytest.raises(ValueError, match=r"\$nope"):
        queries.expand('up{job="$nope"}', {})


@pytest.mark.parametrize(("row", "group"), sorted(ROW_GROUPS.items()))
def test_dashboard_rows_of_a_group_use_only_its_metrics(row: str, group: str) -> None:
    queries = load_file(EXAMPLES / "grafana" / "queries.py", "example_queries")
    found = [q for q in queries.queries() if q.row == row]
    assert found, f"no panel in row {row!r}"
    dashboard = queries.load()
    titles = [p["title"] for p in dashboard["panels"]]
    assert titles.index(row) > titles.index("Collection")  # appended after the others
    names = {m.name.replace(".", "_") for m in METRICS if m.group == group}
    if group == "tree":  # with the per-child points of the process metrics
        names |= {n.replace(".", "_") for n in PER_CHILD}
    for q in found:
        used = re.findall(r"\b([a-z][a-z0-9_]*)\{", q.expr)
        assert used, q
        for name in used:
            assert any(name == n or name.startswith(n + "_") for n in names), (q.source, name)


def test_the_stalls_row_shows_the_causes_of_the_stalls_page() -> None:
    """Every metric the table of docs/stalls.md names is in the row, and nothing else."""
    queries = load_file(EXAMPLES / "grafana" / "queries.py", "example_queries")
    found = [q for q in queries.queries() if q.row == STALLS_ROW]
    assert found, f"no panel in row {STALLS_ROW!r}"
    page = (ROOT / "docs" / "stalls.md").read_text()
    table = page.split("| Cause |", 1)[1].split("\n\n", 1)[0]
    named = {
        name
        for cell in (line.split("|")[2] for line in table.splitlines()[2:])
        for name in re.findall(r"`([a-z_.]+?)(?:\.\*)?`", cell)
    }
    prefixes = {n.replace(".", "_") for n in named}
    used = {name for q in found for name in re.findall(r"\b([a-z][a-z0-9_]*)\{", q.expr)}
    for name in used:
        assert any(name.startswith(p) for p in prefixes), (name, sorted(prefixes))
    for prefix in prefixes:
        assert any(name.startswith(prefix) for name in used), (prefix, sorted(used))
    names = {m.name for m in METRICS}
    assert all(n in names or any(m.startswith(n + ".") for m in names) for n in named), named


def test_the_readme_names_the_dashboard_and_each_of_its_rows() -> None:
    dashboard = json.loads((EXAMPLES / "grafana" / "process-metrics-dashboard.json").read_text())
    rows = [p["title"] for p in dashboard["panels"] if p.get("type") == "row"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    start = readme.index("**A Grafana dashboard**")
    line = readme[start : readme.index("**What a collection costs**", start)]
    assert "examples/grafana/process-metrics-dashboard.json" in line
    for title in rows:
        word = title.split()[0]
        assert (word if word == "CPython" else word.lower()) in line, title


def test_the_panels_with_exemplars_select_the_buckets_and_link_to_the_traces() -> None:
    """Exemplars are kept on a histogram's _bucket series (Prometheus, remote write and
    OTLP alike): a target that shows them must select those of a histogram of events,
    and the exemplar's trace_id must link to the data source of the ``traces`` variable."""
    queries = load_file(EXAMPLES / "grafana" / "queries.py", "example_queries")
    dashboard = queries.load()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["traces"]["type"] == "datasource"
    events = {m.name.replace(".", "_") for m in METRICS if m.kind is Kind.HISTOGRAM}
    assert events >= {
        "process_metrics_eventloop_stall_duration",
        "process_metrics_cpython_gc_stall_duration",
    }
    shown: set[str] = set()
    for panel in queries.panels(dashboard["panels"]):
        targets = [t for t in panel.get("targets", []) if t.get("exemplar")]
        if not targets:
            continue
        for target in targets:
            names = re.findall(r"\b([a-z][a-z0-9_]*)\{", target["expr"])
            assert names and all(n.endswith("_bucket") for n in names), target["expr"]
            for name in names:
                found = [e for e in events if name.startswith(e + "_")]
                assert found, f"{panel['title']}: {name} is not a histogram of events"
                shown.update(found)
        links = [
            link
            for override in panel["fieldConfig"]["overrides"]
            if override["matcher"] == {"id": "byName", "options": "trace_id"}
            for prop in override["properties"]
            if prop["id"] == "links"
            for link in prop["value"]
        ]
        assert links and all("${traces}" in link["url"] for link in links), panel["title"]
        assert all("${__value.raw}" in link["url"] for link in links), panel["title"]
    assert shown == events, shown  # every histogram of events is on a panel, with its traces
