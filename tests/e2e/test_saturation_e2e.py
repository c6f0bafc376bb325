"""The saturation group end to end: an app in real limited cgroups, pushing to VictoriaMetrics.

``apps/push_app.py`` moves itself into new cgroups (v1 cpu with a 0.2 CPU
quota, cpuacct, memory with a limit, and a v2 cgroup for its own pressure
stall files) before ``ProcessInstrumentor().instrument()`` with no option, so
the group turns itself on. It is busy for a few seconds (throttled), has a
grandchild OOM-killed, then idles, so that the throttling and OOM counters
hold still and can be compared with the cgroup's files exactly. One copy
pushes to a VictoriaMetrics keeping dotted names, one to one using Prometheus
naming; against the latter run the Saturation row of the Grafana dashboard.
Needs root; the cgroups are removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

import pytest

from opentelemetry.instrumentation.process.metrics import METRICS

from ..support import cgroups
from ..support.cgroups import Cgroup, child_cgroup, flat, number
from .checks import DOTTED, PROMETHEUS, Naming, dashboard_queries, held, wait_for_names
from .launch import App, push_app, unique_name
from .servers import REPO, Children, VictoriaMetrics, wait_until

pytestmark = pytest.mark.e2e

MIB = 1 << 20
HZ = 100
LIMIT_MIB = 256
SATURATION = [m for m in METRICS if m.option == "saturation"]
ROW = "Saturation"


@contextlib.contextmanager
def limited_app(
    children: Children, naming: str, backend: VictoriaMetrics
) -> Iterator[tuple[App, dict[str, Cgroup]]]:
    with contextlib.ExitStack() as stack:
        groups = {
            c: stack.enter_context(child_cgroup(c)) for c in ("cpu", "cpuacct", "memory", "unified")
        }
        groups["cpu"].write("cpu.cfs_period_us", "100000")
        groups["cpu"].write("cpu.cfs_quota_us", "20000")
        groups["memory"].write("memory.limit_in_bytes", str(LIMIT_MIB * MIB))
        app = push_app(
            children,
            f"limited-{naming}",
            "http",
            backend.otlp_url,
            unique_name(f"saturation-{naming}"),
            E2E_CGROUPS=os.pathsep.join(str(g.folder) for g in groups.values()),
            E2E_BALLAST_MB="32",
            E2E_BUSY_S="3",
            E2E_OOM_MB=str(2 * LIMIT_MIB),
        )
        stack.callback(app.child.stop)  # before the cgroups go
        yield app, groups


@pytest.fixture(scope="module")
def apps(
    vm: VictoriaMetrics, vm_prom: VictoriaMetrics, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, tuple[App, dict[str, Cgroup]]]]:
    children = Children(tmp_path_factory.mktemp("saturation"))
    with contextlib.ExitStack() as stack:
        found = {
            naming: stack.enter_context(limited_app(children, naming, backend))
            for naming, backend in (("dotted", vm), ("prometheus", vm_prom))
        }
        for app, groups in found.values():
            child = app.child
            wait_until(lambda c=child: "oom " in c.output(), 30, f"the OOM kill in {child.name}")
            assert "oom -9" in app.child.output(), app.child.describe()
            assert app.child.alive(), app.child.describe()
            assert groups["memory"].pids() == {app.child.pid}
        yield found


def _settled(vm: VictoriaMetrics, naming: Naming, app: App, groups: dict[str, Cgroup]) -> None:
    """Wait until the app is idle and the backend has its throttling as the cgroup counts it."""
    name = naming.name(_metric("process_metrics.cgroup.cpu.throttled_periods"))

    def same() -> bool:
        stat = flat(groups["cpu"].read("cpu.stat"))
        got = held(vm, naming, app.selector(naming), window=10).value(name)
        assert got == stat["nr_throttled"], (got, stat)
        return True

    wait_until(same, 30, "the throttled periods in the backend to match cpu.stat", interval=0.3)


def _metric(name: str):  # type: ignore[no-untyped-def]
    return next(m for m in SATURATION if m.name == name)


@pytest.mark.parametrize("naming", [DOTTED, PROMETHEUS], ids=["dotted", "prometheus"])
def test_every_saturation_metric_arrives_with_its_attributes(
    naming: Naming,
    vm: VictoriaMetrics,
    vm_prom: VictoriaMetrics,
    apps: dict[str, tuple[App, dict[str, Cgroup]]],
) -> None:
    app, _groups = apps["prometheus" if naming.prometheus else "dotted"]
    backend = vm_prom if naming.prometheus else vm
    selector = app.selector(naming)
    wait_for_names(backend, selector, {naming.name(m) for m in SATURATION})
    got = held(backend, naming, selector)
    label = naming.label
    assert set(got.by(_metric("container.cpu.time"), "cpu.mode")) == {"user", "kernel"}
    # cgroup v1 has two of the four events.
    events = got.by(
        _metric("process_metrics.cgroup.memory.events"), "process_metrics.cgroup.memory.event"
    )
    assert set(events) == {"max", "oom_kill"}
    for resource in ("cpu", "memory", "io"):
        points = got.of(_metric(f"process_metrics.{resource}.linux.pressure.stall_time"))
        kinds = {dict(k)[label("process_metrics.pressure.stall_type")] for k in points}
        assert kinds == {"some", "full"}, resource  # a cgroup has both, cpu included
        scopes = {dict(k)[label("process_metrics.pressure.scope")] for k in points}
        assert scopes == {"cgroup"}, resource  # the app's own v2 cgroup, not the host


def test_values_are_those_of_the_cgroup(
    vm: VictoriaMetrics, apps: dict[str, tuple[App, dict[str, Cgroup]]]
) -> None:
    app, groups = apps["dotted"]
    _settled(vm, DOTTED, app, groups)
    cpu, acct, mem, v2 = (groups[c] for c in ("cpu", "cpuacct", "memory", "unified"))

    def agree() -> bool:
        stat0, acct0 = flat(cpu.read("cpu.stat")), flat(acct.read("cpuacct.stat"))
        got = held(vm, DOTTED, app.selector(DOTTED), window=10)
        stat1, acct1 = flat(cpu.read("cpu.stat")), flat(acct.read("cpuacct.stat"))
        # Idle now: the throttling holds still; periods go on at each beat.
        assert (
            got.value("process_metrics.cgroup.cpu.throttled_periods") == stat1["nr_throttled"] > 10
        )
        assert got.value("process_metrics.cgroup.cpu.throttled_time") == pytest.approx(
            stat1["throttled_time"] / 1e9
        )
        periods = got.value("process_metrics.cgroup.cpu.periods")
        assert stat0["nr_periods"] - 40 <= periods <= stat1["nr_periods"], (periods, stat0)
        user = got.value("container.cpu.time", cpu__mode="user")
        assert acct0["user"] / HZ - 0.2 <= user <= acct1["user"] / HZ, (user, acct0)
        assert got.value("process_metrics.cpu.available") == 0.2
        # Memory: the limit exactly, the OOM kill exactly, usage as the app holds still.
        assert got.value("process_metrics.cgroup.memory.limit") == LIMIT_MIB * MIB
        assert got.value("process_metrics.memory.limit") == LIMIT_MIB * MIB
        kills = flat(mem.read("memory.oom_control"))["oom_kill"]
        event = "process_metrics.cgroup.memory.events"
        assert got.value(event, process_metrics__cgroup__memory__event="oom_kill") == kills == 1
        assert got.value(event, process_metrics__cgroup__memory__event="max") == number(
            mem.read("memory.failcnt")
        )
        usage = number(mem.read("memory.usage_in_bytes"))
        inactive = flat(mem.read("memory.stat"))["total_inactive_file"]
        assert abs(got.value("container.memory.usage") - usage) <= 8 * MIB, usage
        working_set = got.value("container.memory.working_set")
        assert abs(working_set - (usage - inactive)) <= 8 * MIB, (working_set, usage, inactive)
        peak = got.value("process_metrics.cgroup.memory.peak")
        assert peak == number(mem.read("memory.max_usage_in_bytes")) >= usage
        # Stalls of the app's own cgroup: it was throttled, so it waited for CPU.
        stall = got.value(
            "process_metrics.cpu.linux.pressure.stall_time",
            process_metrics__pressure__stall_type="some",
            process_metrics__pressure__scope="cgroup",
        )
        assert 0.3 <= stall <= cgroups.total(v2.read("cpu.pressure"), "some") / 1e6, stall
        return True

    wait_until(agree, 20, "the saturation values to match the cgroup's files", interval=0.3)


def test_the_dashboard_saturation_row_shows_the_limited_app(
    vm_prom: VictoriaMetrics, apps: dict[str, tuple[App, dict[str, Cgroup]]]
) -> None:
    app, groups = apps["prometheus"]
    _settled(vm_prom, PROMETHEUS, app, groups)
    row = [q for q in dashboard_queries(variables={"service": app.service}) if q.row == ROW]
    assert len(row) == 6, row  # throttling, working set, OOM kills, three stall rates
    by_panel: dict[str, list[float]] = {}
    for q in row:
        result = vm_prom.query(q.expr)
        assert result, f"{q.source} returned nothing: {q.expr}"
        for series in result:
            assert series["metric"]["service_name"] == app.service, series
            by_panel.setdefault(q.source.split(" / ")[0], []).append(float(series["value"][1]))
    # Sane values: what the app went through, as shares and counts.
    throttled = by_panel["panel CPU throttled (share of quota periods)"]
    assert len(throttled) == 1 and 0.05 <= throttled[0] <= 1, throttled
    working_set = by_panel["panel Memory working set (share of the limit)"]
    assert len(working_set) == 1 and 0.05 <= working_set[0] < 1, working_set
    assert by_panel["panel OOM kills"] == [pytest.approx(1)], by_panel["panel OOM kills"]
    stalls = by_panel["panel Stall time (share of time, pressure stall information)"]
    assert len(stalls) == 6 and all(0 <= s <= 1.05 for s in stalls), stalls
    assert max(stalls) > 0.01  # throttled within the last minute: the CPU stall shows


def _docs_queries() -> list[str]:
    """The PromQL of the "Is my service starved?" section of the containers page."""
    text = (REPO / "docs" / "containers.md").read_text()
    section = text.split("## Is my service starved?", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```promql\n(.*?)```", section, flags=re.DOTALL)


def test_the_queries_of_the_containers_page_work_on_the_limited_app(
    vm_prom: VictoriaMetrics, apps: dict[str, tuple[App, dict[str, Cgroup]]]
) -> None:
    app, groups = apps["prometheus"]
    _settled(vm_prom, PROMETHEUS, app, groups)
    # A supervisor's query (a worker's end by cause) needs a master: the limited app
    # has none; tests/test_children_exits_oom.py kills workers in a limited cgroup.
    found = [q for q in _docs_queries() if "process_metrics_tree_" not in q]
    assert len(found) == 4, found  # throttled share, working set / limit, OOM kills, stall rate
    for expr in found:
        assert 'service_name="checkout"' in expr, expr
        result = vm_prom.query(
            expr.replace('service_name="checkout"', f'service_name="{app.service}"')
        )
        assert len(result) >= 1, f"nothing from the docs' query: {expr}"
        for series in result:
            got = float(series["value"][1])
            if "oom_kill" in expr:
                assert got >= 1, expr  # the grandchild's kill, within 5 minutes
            else:
                assert 0 < got < 1.05, (expr, got)  # shares: of periods, of the limit, of time
