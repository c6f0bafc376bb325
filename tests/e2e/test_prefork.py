"""Scenario 5: a pre-fork server, gunicorn with 2 workers, set up as the docs recommend.

The server is ``examples/gunicorn`` as it is: its ``post_fork`` hook gives each
worker its own MeterProvider, resource and ``ProcessInstrumentor``. Every worker
must report its own process, as its own series; the master must not report.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.request

import psutil
import pytest

from .checks import PROMETHEUS, check_process_values
from .servers import REPO, VENV_BIN, Children, VictoriaMetrics, child_env, free_port, wait_until

pytestmark = pytest.mark.e2e

CONF = REPO / "examples" / "gunicorn" / "gunicorn.conf.py"
WORKERS = 2


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
