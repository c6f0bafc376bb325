"""Supervisor mode end to end: one instrumented master reports every worker.

- uWSGI with its default fork (examples/uwsgi/supervisor.py): the master is
  instrumented with ``children=True`` and no worker runs OpenTelemetry; every
  worker is reported, and respawned workers serve (none hangs).
- gunicorn (examples/gunicorn/gunicorn_master.conf.py) pushing OTLP to
  VictoriaMetrics: the per-slot series and the tree metrics arrive, and the
  dashboard's per-worker panel finds them.
"""

from __future__ import annotations

import os
import signal
import sys
import urllib.request
from collections.abc import Callable
from typing import Any

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from .checks import dashboard_queries
from .servers import (
    REPO,
    VENV_BIN,
    Children,
    Uwsgi,
    VictoriaMetrics,
    child_env,
    free_port,
    need,
    otlp_env,
    uwsgi_binary,
    wait_until,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

SLOT = "process_metrics_worker_slot"
PAGE = os.sysconf("SC_PAGE_SIZE")


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError as exc:  # not serving yet: wait_until tries again
        raise AssertionError(f"no scrape yet: {exc}") from exc
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _slots(scrape: dict[str, list[tuple[dict[str, str], float]]]) -> dict[int, int]:
    """``pid -> slot`` of the per-child RSS samples."""
    return {
        int(labels["process_pid"]): int(labels[SLOT])
        for labels, _ in scrape.get("process_memory_usage_bytes", [])
        if labels.get(SLOT)
    }


def _uwsgi_supervisor(children: Children, ini: str) -> tuple[Uwsgi, int]:
    """uWSGI started from ``examples/uwsgi/<ini>``, scraped on the port returned with it."""
    metrics_port = free_port()
    env = child_env(
        OTEL_METRICS_EXPORTER="prometheus",
        OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
        OTEL_EXPORTER_PROMETHEUS_PORT=str(metrics_port),
        OTEL_PYTHON_PROCESS_METRICS_CHILD_PID="true",
    )
    binary = need(*uwsgi_binary())
    return Uwsgi(children, binary, REPO / "examples" / "uwsgi" / ini, env), metrics_port


def _kill_and_respawn(
    server: Uwsgi,
    first: dict[int, int],
    listed: Callable[[], dict[int, int]],
    rounds: int,
    interval: float = 0.05,
) -> None:
    """SIGKILL a worker ``rounds`` times: each time the newcomer must take the freed slot
    (``listed()`` gives ``pid -> slot``, checked as it goes) and every worker must serve."""
    for round_ in range(rounds):
        victim = min(first)
        os.kill(victim, signal.SIGKILL)

        def replaced(victim: int = victim) -> dict[int, int]:
            found = listed()
            assert victim not in found, "not replaced yet"
            return found

        after = wait_until(replaced, 30, f"respawn {round_}", interval=interval)
        (newcomer,) = set(after) - set(first)
        assert after[newcomer] == first[victim], "the new worker did not get the freed slot"
        # Every worker answers or waits for a connection in uWSGI's loop. A
        # worker stuck on the GIL would wait on a futex and never serve.
        served: set[int] = set()
        for _ in range(300):
            served.add(int(server.get().split()[-1]))
            if served == set(after):
                break
        for pid in set(after) - served:  # uWSGI's accept is not fair: look at it

            def waits(pid: int = pid) -> bool:
                # Woken for a connection another worker took, it may be on a CPU (or
                # waiting for one) for a moment: a stuck worker never gets back here.
                with open(f"/proc/{pid}/wchan") as f:
                    where = f.read()
                assert where == "do_epoll_wait", f"worker {pid} is stuck in {where!r}"
                return True

            wait_until(waits, 10, f"worker {pid} to wait for a connection", interval=0.01)
        first = after


def test_uwsgi_default_fork_master_reports_every_worker_and_none_hangs(
    children: Children,
) -> None:
    server, metrics_port = _uwsgi_supervisor(children, "supervisor.ini")
    master = psutil.Process(server.pid)

    def listed() -> dict[int, int]:
        assert server.child.alive(), server.child.describe()
        workers = {p.pid for p in master.children()}
        found = _slots(_scrape(metrics_port))
        assert len(workers) == 3 and set(found) == workers, (found, workers)
        return found

    server.get()
    first = wait_until(listed, 30, "every uWSGI worker in the master's scrape")
    assert sorted(first.values()) == [0, 1, 2]
    # No worker runs OpenTelemetry: none has a thread of its own beyond uWSGI's.
    for pid in first:
        assert psutil.Process(pid).num_threads() == 1, f"worker {pid} runs threads"

    # Respawns: uWSGI forks new workers from the instrumented master; each
    # must serve (a worker stuck on the GIL would not) and take a freed slot.
    _kill_and_respawn(server, first, listed, rounds=3)

    # uWSGI's C master reaps its workers: their ends are counted, their cause unknown
    # (or the status a worker showed as a zombie, when a collection caught one), once
    # a status had its time to come (child_exits.SETTLE).
    def counted() -> dict[str, list[tuple[dict[str, str], float]]]:
        tree = _scrape(metrics_port)
        assert sum(v for _, v in tree["process_metrics_tree_process_exits_total"]) >= 3, tree
        return tree

    tree = wait_until(counted, 30, "the workers' ends counted")
    assert tree["process_metrics_tree_process_restarts_total"][0][1] >= 3
    assert tree["process_metrics_tree_process_count"][0][1] == 4


def test_uwsgi_plain_default_fork_with_a_mule_reporting_never_hangs_a_worker(
    children: Children,
) -> None:
    """examples/uwsgi/mule.ini: no fork hooks, no Python thread in the master."""
    server, metrics_port = _uwsgi_supervisor(children, "mule.ini")
    master = psutil.Process(server.pid)

    def workers() -> set[int]:
        # uWSGI names its processes alike: the mule is the child with no slot.
        return {p.pid for p in master.children()}

    def listed() -> dict[int, int]:
        assert server.child.alive(), server.child.describe()
        found = _slots(_scrape(metrics_port))
        assert len(found) == 3 and set(found) < workers(), (found, workers())
        return found

    server.get()
    first = wait_until(listed, 30, "every uWSGI worker in the mule's scrape")
    assert sorted(first.values()) == [0, 1, 2]
    (mule,) = workers() - set(first)
    # Kill workers while scraping all the time: with the default fork, a
    # metrics thread in the master would hang a respawn now and then.
    _kill_and_respawn(server, first, listed, rounds=5, interval=0.005)
    tree = _scrape(metrics_port)
    assert tree["process_metrics_tree_process_restarts_total"][0][1] >= 5
    assert tree["process_metrics_tree_process_count"][0][1] == 5  # master, 3 workers, mule
    assert mule in workers()


def test_gunicorn_master_per_slot_and_tree_series_reach_victoriametrics(
    vm_prom: VictoriaMetrics, children: Children, service: str
) -> None:
    port = free_port()
    server = children.start(
        "gunicorn-master",
        [
            str(VENV_BIN / "gunicorn"),
            "--config",
            str(REPO / "examples" / "gunicorn" / "gunicorn_master.conf.py"),
            "--max-requests",
            "4",
        ],
        otlp_env(vm_prom, service, GUNICORN_BIND=f"127.0.0.1:{port}", GUNICORN_WORKERS="3"),
    )
    master = psutil.Process(server.pid)

    def served() -> str:
        assert server.alive(), server.describe()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                return str(response.read().decode())
        except OSError as exc:
            raise AssertionError(f"no answer yet: {exc}") from exc

    wait_until(served, 20, "gunicorn to answer")
    for _ in range(20):  # recycles every worker at least once
        wait_until(served, 10, "a response")

    def per_slot() -> list[dict[str, Any]]:
        found = vm_prom.query(f'process_memory_usage_bytes{{service_name="{service}", {SLOT}!=""}}')
        slots = {r["metric"][SLOT] for r in found}
        assert slots == {"0", "1", "2"}, slots
        return found

    rows = wait_until(per_slot, 30, "one series per slot in VictoriaMetrics")
    # The series carry the master's identity and no pid: recycling keeps them.
    assert {r["metric"].get("process_pid") for r in rows} == {str(master.pid)}
    assert len(rows) == 3

    def tree() -> dict[str, float]:
        served()  # keep the workers recycling while the backend catches up
        out = {}
        for name in (
            "process_metrics_tree_cpu_time_seconds_total",
            "process_metrics_tree_process_count",
            "process_metrics_tree_process_exits_total",
            "process_metrics_tree_process_restarts_total",
            "process_metrics_tree_memory_usage_bytes",
        ):
            found = vm_prom.query(f'sum({name}{{service_name="{service}"}})')
            assert found, name
            out[name] = float(found[0]["value"][1])
        assert out["process_metrics_tree_process_restarts_total"] >= 1, out
        assert out["process_metrics_tree_process_count"] == 4, out
        return out

    totals = wait_until(tree, 60, "the tree metrics in VictoriaMetrics", interval=0.5)
    assert totals["process_metrics_tree_memory_usage_bytes"] > 4 * 10 * 2**20

    # The dashboard's Workers row: every query finds data, the per-slot ones three slots.
    queries = dashboard_queries(variables={"service": service})
    row = [q for q in queries if q.row == "Workers (supervisor mode)"]
    assert len(row) == 4, row
    for q in row:

        def answered(expr: str = q.expr, source: str = q.source) -> list[dict[str, Any]]:
            found = vm_prom.query(expr)
            assert found, f"{source}: {expr}"
            if SLOT in expr:
                assert {r["metric"][SLOT] for r in found} == {"0", "1", "2"}, source
            return found

        wait_until(answered, 30, f"data for {q.source}")
