"""uWSGI with the application instrumented at import time, in the master.

uWSGI 2.0 forks its workers in C. By default it runs none of Python's at-fork
hooks in them (``os.register_at_fork``): the SDK does not restart its export
thread there, nor re-detect its resource. ``--py-call-osafterfork`` runs the
child's hooks in each worker; ``--py-call-uwsgi-fork-hooks`` runs all of them
around the fork, as ``os.fork()`` does.

The app (``apps/uwsgi_master_app.py``) has a periodic OTLP reader and a
Prometheus reader served at its own ``/metrics``: a scrape collects in the
worker that serves it. Every value a worker reports is held against that
worker's ``/proc`` read by the test before and after the collection
(``procfs.check_own``). The recipe (``@postfork``) is checked the same way in
``test_prefork.py``. What a user sees in each case is in docs/prefork.md.
"""

from __future__ import annotations

import sys
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from opentelemetry.instrumentation.process import SCOPE_NAME

from . import procfs
from .checks import pushed_around
from .groups import by_pid
from .launch import APPS
from .servers import Children, Uwsgi, VictoriaMetrics, need, otlp_env, uwsgi_binary, wait_until

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

INI = APPS / "uwsgi_master.ini"
WORKERS = 2
"""Workers of the server (``processes`` in the ini file)."""
MERCY = "3"
"""Seconds uWSGI gives a stopping worker before it kills it (its default is 60)."""
NO_MERCY = "is taking too much time to die...NO MERCY"
UNHOOKED = "process metrics: process {pid} was forked without Python's at-fork hooks"


def _start(children: Children, vm: VictoriaMetrics, service: str, *options: str) -> Uwsgi:
    env = otlp_env(vm, service, OTEL_EXPERIMENTAL_RESOURCE_DETECTORS="process")
    return Uwsgi(
        children,
        need(*uwsgi_binary()),
        INI,
        env,
        options=options,
    )


def _pulled(text: str) -> tuple[procfs.Reported, dict[str, str]]:
    """This package's values in a Prometheus scrape, and the resource (``target_info``)."""
    values: dict[str, float] = {}
    resource: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "target_info":
                resource = dict(sample.labels)
            elif sample.labels.get("otel_scope_name") == SCOPE_NAME:
                mode = sample.labels.get("cpu_mode")
                values[sample.name if mode is None else f"{sample.name}:{mode}"] = sample.value
    got = procfs.Reported(
        rss=values["process_memory_usage_bytes"],
        utilization=values["process_memory_utilization"],
        user=values["process_cpu_time_seconds_total:user"],
        system=values["process_cpu_time_seconds_total:system"],
        threads=values["process_thread_count"],
        fds=values["process_unix_file_descriptor_count"],
        uptime=values["process_uptime_seconds"],
    )
    return got, resource


def _scrape(
    server: Uwsgi, pid: int, tries: int = 300
) -> tuple[procfs.Reported, dict[str, str], procfs.Reading, procfs.Reading]:
    """Scrape ``/metrics`` until worker ``pid`` serves it; /proc/pid read around that scrape."""
    served = set()
    for _ in range(tries):
        before = procfs.read(pid)
        headers, body = server.request("/metrics")
        after = procfs.read(pid)
        served.add(headers["X-Worker-Pid"])
        if headers["X-Worker-Pid"] == str(pid):
            return (*_pulled(body), before, after)
    raise AssertionError(f"worker {pid} served none of {tries} scrapes (served by {served})")


def _scraped_own(server: Uwsgi, pid: int, master: int) -> tuple[procfs.Reported, dict[str, str]]:
    """Worker ``pid``'s scrape and resource, checked to be its own values and not the master's."""
    got, resource, before, after = _scrape(server, pid)
    # Its scrape connection and its own listing of /proc/self/fd.
    procfs.check_own(got, before, after, fds_open=2)
    procfs.differs(got, procfs.read(master), after)
    return got, resource


def test_no_fork_hooks_each_worker_reports_itself_but_exports_nothing(
    vm_prom: VictoriaMetrics, children: Children, service: str
) -> None:
    """uWSGI's default: a worker's collection reports the worker, and only the master pushes."""
    server = _start(children, vm_prom, service, "--worker-reload-mercy", MERCY)
    workers = server.workers(WORKERS)
    master = server.pid
    for pid in workers:
        got, resource = _scraped_own(server, pid, master)
        # No export thread: it ran in the master and was never started here.
        assert got.threads == 1, got
        # The resource is the one the master detected.
        assert resource["process_pid"] == str(master), resource
        # Said once, at its first collection.
        _scrape(server, pid)
        assert server.child.output().count(UNHOOKED.format(pid=pid)) == 1, server.child.describe()

    # The backend has one pushing process: the master (it alone has the export thread).
    def pushing() -> set[str]:
        found = set(by_pid(vm_prom, service))
        assert found == {str(master)}, f"pids in the backend: {found}"
        return found

    wait_until(pushing, 20, "the master's series")
    selector = f'{{service_name="{service}", process_pid="{master}"}}'
    got, before, after = pushed_around(vm_prom, selector, master)
    procfs.check_own(got, before, after, fds_open=1)
    # Every point pushed so far has the master's thread count (a worker has 1 thread).
    rows = vm_prom.export(f"process_thread_count{selector}", start=time.time() - 60)
    pushed = {value for row in rows for value in row["values"]}
    assert pushed == {before.threads} == {after.threads} and before.threads > 1, pushed

    # At exit a worker runs the SDK's shutdown, which waits (30 s by default) for
    # the export thread that is not there: uWSGI kills it after its mercy.
    stopped = time.time()
    assert server.child.stop(timeout=20) == 0, server.child.describe()
    assert server.child.output().count(NO_MERCY) == WORKERS, server.child.describe()
    late = vm_prom.export(f'process_uptime_seconds{{service_name="{service}"}}', start=stopped)
    assert {row["metric"]["process_pid"] for row in late} <= {str(master)}, late


@pytest.mark.parametrize("hooks", ["--py-call-osafterfork", "--py-call-uwsgi-fork-hooks"])
def test_fork_hooks_each_worker_reports_and_exports_itself(
    vm_prom: VictoriaMetrics, children: Children, service: str, hooks: str
) -> None:
    """With Python's at-fork hooks run in the workers: their own values, thread and identity."""
    server = _start(children, vm_prom, service, hooks)
    workers = server.workers(WORKERS)
    master = server.pid

    # Each worker pushes under its own pid and instance id; the master too (it is instrumented).
    def pushing() -> dict[str, dict[str, str]]:
        found = by_pid(vm_prom, service)
        assert set(found) == {str(p) for p in {*workers, master}}, f"pids: {set(found)}"
        return found

    series = wait_until(pushing, 20, "a series per process")
    assert len({s["service_instance_id"] for s in series.values()}) == WORKERS + 1, series
    for pid in workers:
        selector = f'{{service_name="{service}", process_pid="{pid}"}}'
        got, before, after = pushed_around(vm_prom, selector, pid)
        procfs.check_own(got, before, after, fds_open=1)
        procfs.differs(got, procfs.read(master), after)
        # Main thread and the export thread the SDK restarted in the worker.
        assert got.threads == 2, got

    # Scraped once the workers have pushed: past their at-fork hooks, whose
    # resource detection runs (and ends) a thread of its own.
    for pid in workers:
        got, resource = _scraped_own(server, pid, master)
        assert got.threads == 2, got
        assert resource["process_pid"] == str(pid), resource
        assert UNHOOKED.format(pid=pid) not in server.child.output()

    # At exit each worker's export thread makes one last collection and export.
    server.wait_idle()
    stopped = time.time()
    assert server.child.stop(timeout=20) == 0, server.child.describe()
    last = vm_prom.export(f'process_uptime_seconds{{service_name="{service}"}}', start=stopped)
    exported = {row["metric"]["process_pid"] for row in last}
    assert {str(p) for p in workers} <= exported, f"{exported}: {server.child.describe()}"
