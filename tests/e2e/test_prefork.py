"""Scenario 5: pre-fork servers set up as docs/prefork.md recommends, as one group of workers.

The servers are the examples as they are: gunicorn (``post_fork``), uWSGI
(``@postfork``), Celery's prefork pool (``worker_process_init``), uvicorn
``--workers`` (spawned, set up at the ASGI lifespan's startup) and a
``multiprocessing`` Pool (``initializer``). Each recipe gives every worker its
own MeterProvider, ``ProcessInstrumentor`` and a resource from the
``process_worker`` detector. Each server runs with 3 workers (uvicorn 2) that
it recycles during the run, once per server for the whole module
(``group``), and the tests then hold what VictoriaMetrics received to this:

- at most one identity per worker slot, however many workers came and went,
  and the same series whatever the number of recycles;
- each value is the worker's own; the master (or parent) never reports;
- the shared metrics (here ``system.memory.usage``) come from one worker at a
  time, and after a SIGKILL of that worker another one reports them within
  two export intervals;
- a counter that starts again under a reused identity is a reset to
  VictoriaMetrics (``increase()`` never negative, nothing lost).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from . import groups, recipes
from .checks import PROMETHEUS, check_process_values, dashboard_queries
from .servers import (
    OTLP_INTERVAL_MS,
    REPO,
    VENV_BIN,
    Child,
    Children,
    Uwsgi,
    VictoriaMetrics,
    free_port,
    need,
    otlp_env,
    uwsgi_binary,
    wait_until,
)

pytestmark = pytest.mark.e2e

CONF = recipes.GUNICORN_CONF
WORKERS = 2
"""Workers of the multiprocessing-pool example (its default)."""
SLOTS = recipes.WORKERS
INTERVAL_MS = OTLP_INTERVAL_MS
REQUESTS = 40
"""Requests (or tasks) sent: each worker is recycled after 4 of them."""


# --- one run per server: start, recycle its workers, kill the reporting one ---


@dataclass
class Run:
    """What one server did, and what the backend held at two moments of it."""

    name: str
    service: str
    child: Child
    start: float
    slots: int
    kill: bool
    workers: list[groups.Worker] = field(default_factory=list)
    series_early: int = 0
    """Series of the service once every slot has reported, before most recycles."""
    leader_series_early: int = 0
    """Of those, the series of the reporter of the shared metrics (its own and the shared)."""
    series_late: int = 0
    """The same at the end of the run, after every recycle."""
    shared_before_kill: list[tuple[int, str]] = field(default_factory=list)
    killed_at: float = 0.0
    next_shared_at: float = 0.0
    killed: str = ""
    successor: str = ""
    exit_code: int | None = None

    @property
    def exits(self) -> int:
        """Workers that went: those that announced themselves, minus one per slot still held.

        A multiprocessing pool ends on its own, within the run: its last workers go at
        its close too, and the role may pass between them as they do.
        """
        held = 0 if self.name == "multiprocessing" else self.slots
        return len(self.workers) - held


@dataclass(frozen=True)
class Server:
    """How to start one recipe and make its workers go round."""

    start: Callable[[Children, VictoriaMetrics, str, Path], Child]
    load: Callable[[Child], None]
    slots: int = SLOTS
    kill: bool = True


def _gunicorn(
    children: Children, vm: VictoriaMetrics, service: str, _tmp: Path, recycle: bool = True
) -> Child:
    return recipes.gunicorn(children, otlp_env(vm, service), recycle=recycle)


def _http_load(child: Child) -> None:
    recipes.http_load(child, REQUESTS)


def _uwsgi(children: Children, vm: VictoriaMetrics, service: str, _tmp: Path) -> Child:
    binary = need(*uwsgi_binary())
    ini = REPO / "examples" / "uwsgi" / "uwsgi.ini"
    # uWSGI 2.0.31 recycles no worker younger than min-worker-lifetime (10 s by default).
    options = ["--processes", str(SLOTS), "--max-requests", "4", "--min-worker-lifetime", "0"]
    server = Uwsgi(children, binary, ini, otlp_env(vm, service), options=options)
    server.child.port = server.port  # type: ignore[attr-defined]
    return server.child


def _celery(children: Children, vm: VictoriaMetrics, service: str, tmp: Path) -> Child:
    return recipes.celery(children, otlp_env(vm, service), tmp / "broker")


def _celery_load(child: Child) -> None:
    recipes.celery_load(child, REQUESTS)


UVICORN = REPO / "examples" / "uvicorn"


def _uvicorn(children: Children, vm: VictoriaMetrics, service: str, _tmp: Path) -> Child:
    pytest.importorskip("uvicorn")
    port = free_port()
    argv = [str(VENV_BIN / "uvicorn"), "app:app", "--workers", "2", "--port", str(port)]
    argv += ["--limit-max-requests", "4", "--no-access-log"]
    child = children.start("uvicorn", argv, otlp_env(vm, service), cwd=UVICORN)
    child.port = port  # type: ignore[attr-defined]
    return child


POOL = REPO / "examples" / "multiprocessing-pool" / "pool.py"


def _pool(children: Children, vm: VictoriaMetrics, service: str, _tmp: Path) -> Child:
    env = otlp_env(
        vm,
        service,
        EXAMPLE_WORKERS=str(SLOTS),
        EXAMPLE_TASKS="24",
        EXAMPLE_TASKS_PER_CHILD="3",
        EXAMPLE_SECONDS="6",
    )
    return children.start("pool", [sys.executable, str(POOL)], env)


def _pool_load(child: Child) -> None:
    assert child.wait(120) == 0, child.describe()


SERVERS = {
    "gunicorn": Server(_gunicorn, _http_load),
    "uwsgi": Server(_uwsgi, _http_load),
    "celery": Server(_celery, _celery_load),
    "uvicorn": Server(_uvicorn, _http_load, slots=2),
    # A pool's workers are not replaced at any time, only after their tasks: no kill.
    "multiprocessing": Server(_pool, _pool_load, kill=False),
}


def _scenario(name: str, vm: VictoriaMetrics, children: Children, tmp: Path, service: str) -> Run:
    spec = SERVERS[name]
    started = time.time()
    child = spec.start(children, vm, service, tmp)
    run = Run(name, service, child, started, spec.slots, spec.kill)

    def all_slots() -> list[groups.Worker]:
        assert child.alive() or name == "multiprocessing", child.describe()
        found = groups.announced(child.output())
        assert len({w.slot for w in found}) >= spec.slots, f"workers so far: {found}"
        return found

    wait_until(all_slots, 60, f"{spec.slots} workers of {name}")
    if name != "multiprocessing":
        # Every slot in the backend, then its series count before the recycles.
        def reported() -> int:
            assert len(groups.identities(vm, service, started)) == spec.slots
            return groups.series_count(vm, service, started)

        run.series_early = wait_until(reported, 30, "every slot in the backend")
        first = groups.leader(vm, service, started)
        run.leader_series_early = len(vm.series(f'{{service_instance_id="{first}"}}'))
    spec.load(child)
    time.sleep(3 * INTERVAL_MS / 1000)  # the replacements report
    run.series_late = groups.series_count(vm, service, started)
    run.workers = groups.announced(child.output())
    if spec.kill:

        def enough_shared() -> list[tuple[int, str]]:  # a loaded machine exports late
            found = groups.shared_samples(vm, service, started)
            assert len(found) >= 4, found
            return found

        run.shared_before_kill = wait_until(enough_shared, 30, "four shared points", interval=0.5)
        run.killed_at, run.next_shared_at, run.killed, run.successor = (
            groups.kill_the_leader_and_wait(vm, service, child.output, INTERVAL_MS / 1000, started)
        )
        wait_until(
            lambda: len(groups.announced(child.output())) > len(run.workers),
            30,
            "the killed worker's replacement",
        )
        time.sleep(2 * INTERVAL_MS / 1000)
        run.workers = groups.announced(child.output())
    if name != "multiprocessing":
        run.exit_code = child.stop(timeout=30)
    else:
        run.exit_code = child.proc.returncode
    return run


@pytest.fixture(scope="module", params=sorted(SERVERS))
def group(
    request: pytest.FixtureRequest,
    vm_prom: VictoriaMetrics,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Run]:
    name: str = request.param
    tmp = tmp_path_factory.mktemp(f"group-{name}")
    children = Children(tmp)
    service = f"e2e-group-{name}-{os.urandom(4).hex()}"
    try:
        yield _scenario(name, vm_prom, children, tmp, service)
    finally:
        children.stop_all()


def test_at_most_one_identity_per_slot_however_many_recycles(
    group: Run, vm_prom: VictoriaMetrics
) -> None:
    workers = group.workers
    assert group.exits >= 4, f"{group.name}: too few recycles to tell: {workers}"
    assert {w.slot for w in workers} == set(range(group.slots)), workers
    by_slot = {w.slot: {x.instance for x in workers if x.slot == w.slot} for w in workers}
    assert all(len(ids) == 1 for ids in by_slot.values()), f"a slot changed identity: {by_slot}"
    held = groups.identities(vm_prom, group.service, group.start)
    assert set(held) == {ids.pop() for ids in by_slot.values()}, held
    assert all(len(slots) == 1 for slots in held.values()), held
    # The same series, whatever the recycles: none per pid, none per incarnation. The
    # shared metrics carry their reporter's identity: at most one set per slot.
    if group.series_early:
        assert group.series_late <= group.slots * group.leader_series_early, group
    if group.name in {"gunicorn", "uvicorn", "multiprocessing"}:
        assert group.exit_code == 0, group.child.describe()


def test_the_parent_does_not_report(group: Run) -> None:
    assert group.child.pid not in {w.pid for w in group.workers}
    for worker in group.workers:
        try:
            process = psutil.Process(worker.pid)
            parent, service = process.ppid(), process.environ().get("OTEL_SERVICE_NAME")
        except psutil.NoSuchProcess:
            continue
        if service != group.service:  # the worker has exited, its pid taken by another
            continue
        assert parent == group.child.pid, f"{worker} is not a child of {group.child.pid}"


def test_shared_metrics_come_from_one_instance_at_a_time(
    group: Run, vm_prom: VictoriaMetrics
) -> None:
    samples = group.shared_before_kill or groups.shared_samples(vm_prom, group.service, group.start)
    groups.check_once_per_window(samples, INTERVAL_MS, group.exits)


@pytest.mark.parametrize("group", sorted(n for n, s in SERVERS.items() if s.kill), indirect=True)
def test_after_a_sigkill_of_the_reporter_another_reports_within_two_intervals(
    group: Run, vm_prom: VictoriaMetrics
) -> None:
    # Another worker takes the role at its next collection: its first or second
    # after the kill (one may have been under way). A count, not a time: a loaded
    # machine stretches the intervals, never the count.
    taken = groups.collections_of(
        vm_prom, group.service, group.successor, group.killed_at, group.next_shared_at
    )
    delay = group.next_shared_at - group.killed_at
    assert 1 <= taken <= 2, f"{group.name}: at the successor's collection {taken} ({delay:.2f} s)"
    # The killed worker reports nothing more; its slot's new holder reports as it did.
    after = groups.shared_samples(vm_prom, group.service, group.killed_at)
    assert after and after[0][1] == group.successor
    replaced = [w for w in group.workers if w.instance == group.killed]
    assert len(replaced) >= 2, f"the slot of {group.killed} was not taken again: {group.workers}"


def _victoria_increase(values: list[float]) -> float:
    """The increase VictoriaMetrics computes over ``values``, by its own rule for resets.

    A drop of less than 1/8 of the previous value is taken for jitter (the value
    is held), a larger one for a reset (counted from 0): ``removeCounterResets``
    in VictoriaMetrics' ``app/vmselect/promql/rollup.go``.
    """
    fixed, correction, previous = [], 0.0, values[0]
    for value in values:
        held = value
        if value < previous:
            if (previous - value) * 8 < previous:
                held = previous
            else:
                correction += previous
        previous = value
        fixed.append(held + correction)
    return fixed[-1] - fixed[0]


@pytest.mark.parametrize("group", ["gunicorn"], indirect=True)  # one server is enough
def test_a_counter_restarted_under_a_reused_identity_is_a_reset(
    group: Run, vm_prom: VictoriaMetrics
) -> None:
    """A new worker in a slot starts its CPU time again: a drop in the raw samples, which
    VictoriaMetrics takes for a reset: increase() is never negative and loses nothing
    but what its jitter rule holds back (a drop of less than 1/8)."""
    selector = f'process_cpu_time_seconds_total{{service_name="{group.service}", cpu_mode="user"}}'
    rows = vm_prom.export(selector, start=group.start)
    drops, expected, first = 0, {}, {}
    for row in rows:
        values = [float(v) for _, v in sorted(zip(row["timestamps"], row["values"], strict=True))]
        drops += sum(1 for a, b in itertools.pairwise(values) if b < a)
        instance = row["metric"]["service_instance_id"]
        expected[instance] = _victoria_increase(values)
        first[instance] = values[0]
    assert drops >= 2, f"no counter restarted under a reused identity: {rows}"
    end = time.time()
    span = int(end - group.start) + 2
    grow = vm_prom.query(f"increase({selector}[{span}s])", at=end)
    got = {s["metric"]["service_instance_id"]: float(s["value"][1]) for s in grow}
    for instance, want in expected.items():
        # Nothing lost but what the jitter rule holds back; VictoriaMetrics may also
        # count the series' first sample from 0, so at most that sample more.
        high = want + first[instance]
        assert want * 0.95 - 0.01 <= got[instance] <= high * 1.05 + 0.05, (instance, got, want)
    windows = vm_prom.query_range(f"increase({selector}[2s])", group.start, end, 0.5)
    lowest = min(float(v) for s in windows for _, v in s["values"])
    assert lowest >= 0, f"increase() went negative: {lowest}"


# --- each worker's values are its own --------------------------------------------


def test_gunicorn_workers_values_are_their_own(
    vm_prom: VictoriaMetrics, children: Children, service: str
) -> None:
    """Each worker's process values are its own (not the master's), and only one has host values."""
    # No recycling here: the workers found must still run when their values are compared.
    child = _gunicorn(children, vm_prom, service, Path(), recycle=False)
    found = wait_until(
        lambda: len(groups.announced(child.output())) >= SLOTS and groups.announced(child.output()),
        30,
        "three workers",
    )
    for _ in range(4):
        body = recipes.get(child.port)  # type: ignore[attr-defined]
        assert int(body.split()[-1]) in {w.pid for w in found}, body
    leader = groups.leader(vm_prom, service, time.time() - 30)
    for worker in found:
        selector = f'{{service_name="{service}", service_instance_id="{worker.instance}"}}'
        shared = worker.instance == leader
        check_process_values(vm_prom, PROMETHEUS, selector, worker.pid, writes=False, shared=shared)
    assert child.stop() == 0, child.describe()


def test_multiprocessing_pool_workers_last_export_has_their_cpu(
    vm_prom: VictoriaMetrics, children: Children, service: str
) -> None:
    """examples/multiprocessing-pool: each worker's last export, at its exit, carries
    the CPU time that worker burned (no periodic export in a life of about a second)."""
    env = otlp_env(vm_prom, service, EXAMPLE_SECONDS="2")
    env["OTEL_METRIC_EXPORT_INTERVAL"] = "60000"
    run = children.start("pool", [sys.executable, str(POOL)], env)
    assert run.wait(120) == 0, run.describe()
    out = run.output()
    workers = {w.pid: w for w in groups.announced(out)}
    assert len(workers) == WORKERS, out
    found = re.search(r"burned by each worker (\{.*\})", out)
    assert found, out
    burned = json.loads(found.group(1))
    for pid, seconds in burned.items():
        instance = workers[int(pid)].instance
        selector = f'{{service_name="{service}", service_instance_id="{instance}"}}'
        (sample,) = vm_prom.query(f"sum(process_cpu_time_seconds_total{selector})")
        cpu = float(sample["value"][1])
        assert seconds <= cpu < seconds + 2, f"worker {pid}: {cpu} s reported, {seconds} s burned"


def _dashboard_queries(service: str) -> list[tuple[str, str]]:
    found = dashboard_queries(variables={"service": service}, interval="2s")
    return [(q.source, q.expr) for q in found if q.row == SERVER_ROW]


SERVER_ROW = "Server (all workers of a service)"


def _source(queries: dict[str, str], title: str) -> str:
    (found,) = [s for s in queries if s.startswith(f"panel {title}")]
    return found


@pytest.mark.parametrize("group", ["gunicorn"], indirect=True)  # one server is enough
def test_the_dashboards_server_view_sums_over_workers_without_double_counting(
    group: Run, vm_prom: VictoriaMetrics
) -> None:
    """Process metrics summed by service count each worker once; the shared ones come once."""
    at = group.killed_at - 0.2  # every slot live, before the kill
    queries = dict(_dashboard_queries(group.service))
    assert len(queries) == 4, queries
    results = {source: vm_prom.query(expr, at=at) for source, expr in queries.items()}
    assert all(results.values()), {s: e for s, e in queries.items() if not results[s]}
    by_title = {source.split(" / ")[0].removeprefix("panel "): r for source, r in results.items()}
    (workers,) = by_title["Workers reporting"]
    assert float(workers["value"][1]) == group.slots
    # The sum is the sum of the slots' own values at that moment, each once.
    selector = f'process_memory_usage_bytes{{service_name="{group.service}"}}'
    each = vm_prom.query(selector, at=at)
    assert len(each) == group.slots, each
    (total,) = by_title["Server resident memory (sum over workers)"]
    assert float(total["value"][1]) == pytest.approx(sum(float(s["value"][1]) for s in each))
    # One value per memory state: the reporter's.
    host = by_title["Host memory (reported once per group)"]
    states = [s["metric"]["system_memory_state"] for s in host]
    assert len(states) == len(set(states)) and "used" in states, host
    # Right after the role passed, earlier reporters' series are still in the look-back
    # window: a sum would count the host several times, the panel's max once.
    after = group.next_shared_at + 0.05
    used = (
        f'system_memory_usage_bytes{{service_name="{group.service}", system_memory_state="used"}}'
    )
    both = [float(s["value"][1]) for s in vm_prom.query(used, at=after)]
    assert len(both) >= 2, both  # the new reporter's and earlier ones'
    (panel,) = [
        s
        for s in vm_prom.query(queries[_source(queries, "Host memory")], at=after)
        if s["metric"]["system_memory_state"] == "used"
    ]
    assert float(panel["value"][1]) == max(both)


def test_with_shared_metrics_every_the_one_reporter_check_fails(
    vm_prom: VictoriaMetrics, children: Children, service: str
) -> None:
    """The check above can fail: with the old behaviour every worker reports the shared metrics."""
    port = free_port()
    env = otlp_env(
        vm_prom,
        service,
        GUNICORN_BIND=f"127.0.0.1:{port}",
        GUNICORN_WORKERS=str(SLOTS),
        OTEL_PYTHON_PROCESS_METRICS_SHARED_METRICS="every",
    )
    start = time.time()
    every = children.start(
        "gunicorn-every", [str(VENV_BIN / "gunicorn"), "--config", str(CONF)], env
    )
    wait_until(lambda: len(groups.announced(every.output())) == SLOTS, 30, "three workers")
    time.sleep(6 * INTERVAL_MS / 1000)
    samples = groups.shared_samples(vm_prom, service, start)
    with pytest.raises(AssertionError, match="terms with 0 exits"):
        groups.check_once_per_window(samples, INTERVAL_MS, exits=0)
    assert len({who for _, who in samples}) == SLOTS, samples
    assert every.stop() == 0, every.describe()
