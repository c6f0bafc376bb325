"""Scenario 5: pre-fork servers set up as docs/prefork.md recommends, 2 workers each.

The servers are the examples as they are: gunicorn (``post_fork``), uWSGI
(``@postfork``), Celery's prefork pool (``worker_process_init``) and a
``multiprocessing`` Pool (``initializer``). Each gives every worker its own
MeterProvider, resource and ``ProcessInstrumentor``. Every worker must report
its own process, as its own series with its own ``process.pid`` and
``service.instance.id``; the master (or parent) must not report.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from . import procfs
from .checks import PROMETHEUS, check_process_values, pushed_around
from .servers import (
    IN_CI,
    REPO,
    VENV_BIN,
    Children,
    Uwsgi,
    VictoriaMetrics,
    child_env,
    free_port,
    uwsgi_binary,
    wait_until,
    worker_pids,
)

pytestmark = pytest.mark.e2e

CONF = REPO / "examples" / "gunicorn" / "gunicorn.conf.py"
WORKERS = 2
# Each worker's values are checked, host ones included: every worker reports them.
EVERY = {"OTEL_PYTHON_PROCESS_METRICS_SHARED_METRICS": "every"}


def _series(vm: VictoriaMetrics, service: str) -> dict[str, dict[str, str]]:
    """The ``process_uptime_seconds`` series of ``service``, by ``process_pid``."""
    found = vm.series(f'process_uptime_seconds{{service_name="{service}"}}')
    return {s.get("process_pid", "(no process_pid)"): s for s in found}


def test_each_worker_reports_its_own_process(
    vm_prom: VictoriaMetrics, children: Children, service: str
) -> None:
    if not CONF.is_file():
        pytest.skip(f"{CONF.relative_to(REPO)} is missing")
    port = free_port()
    server = children.start(
        "gunicorn",
        [str(VENV_BIN / "gunicorn"), "--config", str(CONF)],
        child_env(
            GUNICORN_BIND=f"127.0.0.1:{port}",
            GUNICORN_WORKERS=str(WORKERS),
            OTEL_SERVICE_NAME=service,
            OTEL_METRICS_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=vm_prom.otlp_url,
            OTEL_METRIC_EXPORT_INTERVAL="500",
            **EVERY,
        ),
    )
    master = psutil.Process(server.pid)

    def workers() -> set[int]:
        assert server.alive(), server.describe()
        pids = {p.pid for p in master.children()}
        assert len(pids) == WORKERS, f"workers: {pids}"
        return pids

    pids = wait_until(workers, 20, f"{WORKERS} gunicorn workers")

    # It serves, from its workers.
    def served() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
            return str(response.read().decode())

    for _ in range(4):
        body = wait_until(served, 10, "a response")
        assert int(body.split()[-1]) in pids, body

    # One series per worker, under the worker's own pid and instance id.
    def reported() -> dict[str, dict[str, str]]:
        found = _series(vm_prom, service)
        assert set(found) == {str(p) for p in pids}, f"pids in backend {set(found)}, workers {pids}"
        return found

    series = wait_until(reported, 20, "one series per worker")
    assert str(master.pid) not in series, "the master reports"
    instances = {s["service_instance_id"] for s in series.values()}
    assert len(instances) == WORKERS, f"workers share an identity: {instances}"
    # The values are each worker's own, not the master's (nor a copy of its state).
    for pid in pids:
        selector = f'{{service_name="{service}", process_pid="{pid}"}}'
        check_process_values(vm_prom, PROMETHEUS, selector, pid, writes=False)

    # A worker that dies is replaced by a new fork, which reports as itself.
    victim = min(pids)
    killed_at = time.time()
    os.kill(victim, signal.SIGKILL)

    def replaced() -> set[int]:
        now = workers()
        assert victim not in now, "not replaced yet"
        return now

    pids = wait_until(replaced, 20, "a new worker")
    (newcomer,) = {p for p in pids if str(p) not in series}

    def newcomer_reports() -> dict[str, dict[str, str]]:
        found = _series(vm_prom, service)
        assert str(newcomer) in found, f"pids in backend: {set(found)}"
        return found

    series_after = wait_until(newcomer_reports, 20, "the new worker's series")
    assert series_after[str(newcomer)]["service_instance_id"] not in instances
    selector = f'{{service_name="{service}", process_pid="{newcomer}"}}'
    check_process_values(vm_prom, PROMETHEUS, selector, newcomer, writes=False)
    uptime = vm_prom.query(f"process_uptime_seconds{selector}")
    assert float(uptime[0]["value"][1]) < time.time() - killed_at + 0.5
    assert str(master.pid) not in _series(vm_prom, service)
    # A graceful stop: every worker exports one last time and exits, and so does the master.
    assert server.stop() == 0, server.describe()


# --- uWSGI, Celery and multiprocessing: the other recipes of docs/prefork.md ------


def _reports_one_identity_per_worker(
    vm: VictoriaMetrics, service: str, pids: set[int], parent: int
) -> dict[str, dict[str, str]]:
    """One series per worker, under the worker's own pid and instance id; none for the parent."""

    def reported() -> dict[str, dict[str, str]]:
        found = _series(vm, service)
        assert set(found) == {str(p) for p in pids}, f"pids in backend {set(found)}, workers {pids}"
        return found

    series = wait_until(reported, 30, "one series per worker")
    assert str(parent) not in series, "the parent reports"
    instances = {s.get("service_instance_id") for s in series.values()}
    assert None not in instances and len(instances) == len(pids), f"shared identity: {instances}"
    return series


def _need(binary: Path | None, why: str) -> Path:
    if binary is None:
        if IN_CI:
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why)
    return binary


def _otlp_env(vm: VictoriaMetrics, service: str, **extra: str) -> dict[str, str]:
    return child_env(
        OTEL_SERVICE_NAME=service,
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=vm.otlp_url,
        OTEL_METRIC_EXPORT_INTERVAL="500",
        **{**EVERY, **extra},
    )


def test_uwsgi_workers_report_as_themselves(
    vm_prom: VictoriaMetrics, children: Children, service: str
) -> None:
    """examples/uwsgi: the postfork hook gives each worker its own identity."""
    binary = _need(*uwsgi_binary())
    ini = REPO / "examples" / "uwsgi" / "uwsgi.ini"
    server = Uwsgi(children, binary, ini, _otlp_env(vm_prom, service))
    pids = server.workers(WORKERS)
    for _ in range(4):
        body = server.get()
        assert int(body.split()[-1]) in pids, body
    _reports_one_identity_per_worker(vm_prom, service, pids, server.pid)
    for pid in pids:
        selector = f'{{service_name="{service}", process_pid="{pid}"}}'
        check_process_values(vm_prom, PROMETHEUS, selector, pid, writes=False)
        # Its own /proc, read by this test around one of its collections.
        got, before, after = pushed_around(vm_prom, selector, pid)
        procfs.check_own(got, before, after, fds_open=1)
        procfs.differs(got, procfs.read(server.pid), after)
        assert got.threads == 2, got  # main thread and its provider's export thread
    assert server.child.stop() == 0, server.child.describe()


def test_celery_pool_processes_report_as_themselves(
    vm_prom: VictoriaMetrics, children: Children, service: str, tmp_path: Path
) -> None:
    """examples/celery-worker: worker_process_init gives each pool process its own identity."""
    celery = VENV_BIN / "celery"
    _need(celery if celery.is_file() else None, "celery is not installed (pip install celery)")
    folder = REPO / "examples" / "celery-worker"
    env = _otlp_env(vm_prom, service, CELERY_BROKER_FOLDER=str(tmp_path / "broker"))
    worker = children.start(
        "celery",
        [
            str(celery),
            "--app=tasks",
            "worker",
            "--pool=prefork",
            f"--concurrency={WORKERS}",
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        env,
        cwd=folder,
    )
    pids = worker_pids(worker, WORKERS)
    # A task sent through the broker runs in a pool process.
    send = "import tasks; tasks.pid.delay()"
    sender = children.start("send", [sys.executable, "-c", send], env, cwd=folder)
    assert sender.wait(60) == 0, sender.describe()

    def ran() -> int:
        found = re.search(r"Task tasks\.pid\[[^]]+\] succeeded in [^:]+: (\d+)", worker.output())
        assert found, "the task has not run yet"
        return int(found.group(1))

    assert wait_until(ran, 30, "the task to run") in pids
    _reports_one_identity_per_worker(vm_prom, service, pids, worker.pid)
    for pid in pids:
        selector = f'{{service_name="{service}", process_pid="{pid}"}}'
        check_process_values(vm_prom, PROMETHEUS, selector, pid, writes=False)
    # Warm shutdown: each pool process exports one last time, then exits.
    assert worker.stop(timeout=30) == 0, worker.describe()


def test_multiprocessing_pool_workers_report_as_themselves(
    vm_prom: VictoriaMetrics, children: Children, service: str
) -> None:
    """examples/multiprocessing-pool: the Pool initializer gives each worker its own identity,
    and its last export, at exit, carries the CPU time that worker burned."""
    script = REPO / "examples" / "multiprocessing-pool" / "pool.py"
    # No periodic export in a worker's life of about a second: what reaches the
    # backend is the last export, at the worker's exit.
    env = _otlp_env(vm_prom, service, EXAMPLE_SECONDS="2")
    env["OTEL_METRIC_EXPORT_INTERVAL"] = "60000"
    run = children.start("pool", [sys.executable, str(script)], env)
    assert run.wait(120) == 0, run.describe()
    out = run.output()
    (parent,) = {int(m) for m in re.findall(r"^parent (\d+):", out, re.MULTILINE)}
    # Not anchored: two workers' lines may interleave on the shared stdout.
    ready = {int(m) for m in re.findall(r"worker (\d+): process metrics on", out)}
    assert len(ready) == WORKERS, out
    burned = json.loads(re.search(r"burned by each worker (\{.*\})", out).group(1))  # type: ignore[union-attr]
    _reports_one_identity_per_worker(vm_prom, service, ready, parent)
    for pid, seconds in burned.items():
        selector = f'{{service_name="{service}", process_pid="{pid}"}}'
        (sample,) = vm_prom.query(f"sum(process_cpu_time_seconds_total{selector})")
        cpu = float(sample["value"][1])
        # The worker's own CPU time (not the parent's): at least what it burned for its tasks.
        assert seconds <= cpu < seconds + 2, f"worker {pid}: {cpu} s reported, {seconds} s burned"
