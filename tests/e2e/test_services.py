"""Services side by side in one real cgroup, as supervisord runs them: one reporter per service.

In one new cgroup, with one runtime directory, as in a container whose
entrypoint runs several programs:

- ``another-service``: an application instrumented in code
  (``apps/push_app.py``), started first, as a cron job or a sidecar would be;
- gunicorn, the example as it is (3 workers, each recycled after 4 requests);
- Celery, the example's prefork pool (3 processes, recycled after 4 tasks);

all exporting through a real Collector to VictoriaMetrics. Then the reporter
of gunicorn's shared metrics is killed. The tests hold each service to its
shared metrics once: from one of its own instances at a time, in at least 80%
of the export windows, a new reporter within two intervals of the kill, and
the others unaffected. Before the group was per service, the first process
took the role for the whole cgroup, and the servers reported none.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..support.cgroups import child_cgroup
from . import groups, recipes
from .launch import PUSH_APP, unique_name
from .servers import (
    OTLP_INTERVAL_MS,
    VENV_BIN,
    Child,
    Children,
    Collector,
    VictoriaMetrics,
    child_env,
    wait_until,
)

pytestmark = pytest.mark.e2e

INTERVAL_S = OTLP_INTERVAL_MS / 1000
LOAD = 40
"""Requests and tasks: each worker is recycled after 4 of them."""


@dataclass
class Service:
    """One program of the crowd: its name, its process, its group's samples and recycles."""

    name: str
    child: Child
    slots: int
    samples: list[tuple[int, str]]
    exits: int


@dataclass
class Crowd:
    services: dict[str, Service]
    killed_at: float
    next_shared_at: float
    killed: str
    successor: str
    end: float


def _everyone(collector: Collector) -> dict[str, str]:
    """One environment for all: one runtime directory, OTLP/HTTP to the collector."""
    return child_env(
        OTEL_METRICS_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=f"{collector.http_endpoint}/v1/metrics",
        OTEL_METRIC_EXPORT_INTERVAL=str(OTLP_INTERVAL_MS),
    )


def _workers(child: Child, count: int) -> list[groups.Worker]:
    def announced() -> list[groups.Worker]:
        assert child.alive(), child.describe()
        found = groups.announced(child.output())
        assert len({w.slot for w in found}) >= count, f"workers so far: {found}"
        return found

    return wait_until(announced, 60, f"{count} workers of {child.name}")


@pytest.fixture(scope="module")
def crowd(
    collector: Collector, vm_prom: VictoriaMetrics, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Crowd]:
    tmp = tmp_path_factory.mktemp("services")
    names = {k: unique_name(f"services-{k}") for k in ("other", "web", "worker")}
    base = _everyone(collector)
    env = {k: {**base, "OTEL_SERVICE_NAME": v} for k, v in names.items()}
    children = Children(tmp)
    with child_cgroup("unified") as cgroup:
        try:
            yield _run(children, cgroup.folder, env, names, vm_prom, tmp)
        finally:
            children.stop_all()


def _run(
    children: Children,
    folder: Path,
    env: dict[str, dict[str, str]],
    names: dict[str, str],
    vm: VictoriaMetrics,
    tmp: Path,
) -> Crowd:
    start = time.time()
    other = children.start(
        "another-service",
        [str(VENV_BIN / "python"), str(PUSH_APP), "http"],
        {**env["other"], "E2E_CGROUPS": str(folder)},
    )
    groups.leader(vm, names["other"], start)  # it reports the shared metrics first
    wrap = recipes.in_cgroup(folder)
    web = recipes.gunicorn(children, env["web"], wrap=wrap)
    worker = recipes.celery(children, env["worker"], tmp / "broker", wrap=wrap)
    for child in (web, worker):
        _workers(child, recipes.WORKERS)
    recipes.http_load(web, LOAD)
    recipes.celery_load(worker, LOAD)
    time.sleep(3 * INTERVAL_S)  # the replacements report
    services = {
        "other": Service(names["other"], other, 1, [], 0),
        "web": Service(names["web"], web, recipes.WORKERS, [], 0),
        "worker": Service(names["worker"], worker, recipes.WORKERS, [], 0),
    }
    for service in services.values():
        service.samples = groups.shared_samples(vm, service.name, start)
        service.exits = max(0, len(groups.announced(service.child.output())) - service.slots)
    killed_at, next_at, killed, successor = groups.kill_the_leader_and_wait(
        vm, names["web"], web.output, INTERVAL_S, start
    )
    time.sleep(3 * INTERVAL_S)  # the others keep reporting meanwhile
    return Crowd(services, killed_at, next_at, killed, successor, time.time())


@pytest.mark.parametrize("which", ["other", "web", "worker"])
def test_each_service_reports_its_shared_metrics_from_one_instance_at_a_time(
    crowd: Crowd, which: str
) -> None:
    service = crowd.services[which]
    groups.check_once_per_window(service.samples, OTLP_INTERVAL_MS, service.exits)
    instances = {who for _, who in service.samples}
    for worker in groups.announced(service.child.output()):
        instances.discard(worker.instance)
    if which != "other":  # every reporter is one of the service's own workers
        assert not instances, f"{which}: points from no worker of its own: {instances}"


WINDOW_MS = 1000
"""One-second windows, two export intervals: a reporter's timer drifts across the edges of
windows one interval long, and may put two points in one and none in the next."""


@pytest.mark.parametrize("which", ["other", "web", "worker"])
def test_each_service_has_its_shared_metrics_in_most_windows(crowd: Crowd, which: str) -> None:
    samples = crowd.services[which].samples
    assert samples, f"{which}: no shared point at all"
    first, last = samples[0][0], samples[-1][0]
    windows = range(first // WINDOW_MS, last // WINDOW_MS + 1)
    covered = {ts // WINDOW_MS for ts, _ in samples}
    share = len(covered) / len(windows)
    assert share >= 0.8, f"{which}: shared points in {share:.0%} of {len(windows)} windows"


def test_after_a_sigkill_of_the_web_reporter_another_web_worker_reports(
    crowd: Crowd, vm_prom: VictoriaMetrics
) -> None:
    web = crowd.services["web"]
    # At the successor's first or second collection after the kill: a count, not a time.
    taken = groups.collections_of(
        vm_prom, web.name, crowd.successor, crowd.killed_at, crowd.next_shared_at
    )
    assert 1 <= taken <= 2, f"at its collection {taken}"
    assert crowd.successor != crowd.killed
    assert crowd.successor in {w.instance for w in groups.announced(web.child.output())}
    # The others went on reporting their own, as before: three points since the kill, waited
    # for (they still run), since a loaded machine stretches their export intervals.
    for which in ("other", "worker"):
        service = crowd.services[which]

        def reporting(name: str = service.name, which: str = which) -> list[tuple[int, str]]:
            after = groups.shared_samples(vm_prom, name, crowd.killed_at)
            assert len(after) >= 3, f"{which} stopped reporting after the kill: {after}"
            return after

        wait_until(reporting, 20, f"{which}'s shared points after the kill")
