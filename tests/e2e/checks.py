"""What the backend must hold for one instrumented process: names, labels and values.

The expected names come from the package's metric table. VictoriaMetrics keeps
them dotted (the semantic-convention names) by default, and translates them to
Prometheus names with ``-opentelemetry.usePrometheusNaming=true``; ``Naming``
says which, and :func:`prometheus_name` is that translation, written out.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psutil

from opentelemetry.instrumentation.process import ProcessMetricsOptions
from opentelemetry.instrumentation.process.catalog import attributes_of
from opentelemetry.instrumentation.process.facts import read_facts
from opentelemetry.instrumentation.process.metrics import Kind, Metric
from opentelemetry.instrumentation.process.selection import enabled_metrics

from ..conftest import HOST_MODES, events_metrics, on_by_default
from ..support import cgroups
from ..support.loading import load_file
from . import procfs
from .servers import REPO, VictoriaMetrics, wait_until

Labels = frozenset[tuple[str, str]]

# The Prometheus unit suffixes of the units in the metric table.
_UNIT_WORDS = {"s": "seconds", "By": "bytes", "1": "ratio", "Hz": "hertz"}
# Per-CPU breakdowns are off by default: these attributes are then left out.
_PER_CPU_ONLY = {"cpu.logical_number"}


def prometheus_name(metric: Metric) -> str:
    """The OTLP -> Prometheus name: dots to underscores, a unit suffix, ``_total`` for counters."""
    name = metric.name.replace(".", "_")
    unit = metric.unit
    if unit.startswith("{"):
        word = ""  # annotations such as {thread} carry no unit
    elif unit == "1":
        word = "ratio" if metric.kind is Kind.GAUGE else ""
    elif unit in _UNIT_WORDS:
        word = _UNIT_WORDS[unit]
    else:
        raise ValueError(f"{metric.name}: no Prometheus suffix known for unit {unit!r}")
    if word and not name.endswith(f"_{word}"):
        name += f"_{word}"
    return name + "_total" if metric.kind is Kind.COUNTER else name


@dataclass(frozen=True)
class Naming:
    """How a backend names what it received: dotted (as sent) or Prometheus-style."""

    prometheus: bool

    def name(self, metric: Metric) -> str:
        return prometheus_name(metric) if self.prometheus else metric.name

    def label(self, attribute: str) -> str:
        return attribute.replace(".", "_") if self.prometheus else attribute

    def selector(self, **attributes: str) -> str:
        """A series selector on resource attributes, e.g. ``service.instance.id``."""
        attrs = {k.replace("__", "."): v for k, v in attributes.items()}
        return "{" + ", ".join(f'{self.label(k)}="{v}"' for k, v in attrs.items()) + "}"


DOTTED = Naming(prometheus=False)
PROMETHEUS = Naming(prometheus=True)


def default_metrics() -> tuple[Metric, ...]:
    """The metrics the package reports by default on this host (the OS says which)."""
    on = on_by_default()
    found = tuple(m for m in enabled_metrics(ProcessMetricsOptions()) if m.name in on)
    if psutil.cpu_count(logical=False) is None:  # left out, never reported as 0
        found = tuple(m for m in found if m.name != "system.cpu.physical.count")
    return found


@dataclass
class Held:
    """The latest raw sample of every series of one process, as the backend holds it."""

    naming: Naming
    points: dict[str, dict[Labels, tuple[float, float]]] = field(default_factory=dict)
    """metric name -> metric attributes -> (timestamp in s, value)."""
    resource: dict[str, str] = field(default_factory=dict)
    """Labels on every series: the resource attributes."""
    earlier: dict[str, dict[Labels, tuple[float, float]]] = field(default_factory=dict)
    """The sample before the latest one, where there is one, keyed as ``points``."""

    def of(self, metric: str | Metric) -> dict[Labels, tuple[float, float]]:
        name = self.naming.name(metric) if isinstance(metric, Metric) else metric
        assert name in self.points, f"{name} not in the backend; it holds {sorted(self.points)}"
        return self.points[name]

    def value(self, metric: str | Metric, **attributes: str) -> float:
        return self.sample(metric, **attributes)[1]

    def sample(self, metric: str | Metric, **attributes: str) -> tuple[float, float]:
        key = frozenset((self.naming.label(k.replace("__", ".")), v) for k, v in attributes.items())
        points = self.of(metric)
        assert key in points, (
            f"no point {dict(key)} of {metric}; points: {sorted(str(dict(p)) for p in points)}"
        )
        return points[key]

    def previous(self, metric: str | Metric, **attributes: str) -> tuple[float, float]:
        """The sample before the latest one (timestamp, value)."""
        name = self.naming.name(metric) if isinstance(metric, Metric) else metric
        key = frozenset((self.naming.label(k.replace("__", ".")), v) for k, v in attributes.items())
        found = self.earlier.get(name, {}).get(key)
        assert found is not None, f"only one sample of {name} {dict(key)} so far"
        return found

    def by(self, metric: str | Metric, attribute: str) -> dict[str, float]:
        """Latest values keyed by one attribute's value."""
        label = self.naming.label(attribute)
        return {dict(k)[label]: v for k, (_, v) in self.of(metric).items()}


def held(vm: VictoriaMetrics, naming: Naming, selector: str, window: float = 30) -> Held:
    """The latest sample of each series ``selector`` picks, from the raw samples."""
    rows = vm.export(selector, start=time.time() - window)
    out = Held(naming)
    if not rows:
        return out
    common = set.intersection(*(set(r["metric"]) for r in rows)) - {"__name__"}
    out.resource = {k: rows[0]["metric"][k] for k in common}
    for row in rows:
        labels = dict(row["metric"])
        name = labels.pop("__name__")
        attrs = frozenset((k, v) for k, v in labels.items() if k not in common)
        order = sorted(range(len(row["timestamps"])), key=lambda i: row["timestamps"][i])
        samples = [(row["timestamps"][i] / 1000, float(row["values"][i])) for i in order]
        out.points.setdefault(name, {})[attrs] = samples[-1]
        if len(samples) > 1:
            out.earlier.setdefault(name, {})[attrs] = samples[-2]
    return out


@dataclass(frozen=True)
class OsReading:
    """What the OS said at one moment: host CPU seconds by mode, the process's CPU seconds."""

    wall: float
    host: dict[str, float]
    process: float


# cpu.mode and the psutil fields it sums (guest time is already in user).
# How far a point's timestamp may be from the moment its value was read.
_SKEW = 0.05


def process_cpu_seconds(proc: psutil.Process) -> float:
    """CPU seconds of ``proc``'s live threads, to the nanosecond where Linux says.

    /proc/<pid>/task/*/schedstat counts each thread's time on a CPU in ns, the
    total that getrusage(2) splits into user and system; psutil's cpu_times()
    counts in clock ticks. Threads that exited are not counted: the apps
    checked here keep theirs.
    """
    folder = f"/proc/{proc.pid}/task"
    if not os.path.isdir(folder):
        cpu = proc.cpu_times()
        return cpu.user + cpu.system
    total = 0
    for tid in os.listdir(folder):
        try:
            with open(f"{folder}/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            continue  # the thread has just exited
    return total / 1e9


_S = TypeVar("_S", bound="Sampler")


class Sampler:
    """A thread that runs :meth:`_run` from the start of a ``with`` block until its end."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


class OsSampler(Sampler):
    """Reads the OS every few ms in a thread, so that a point can be bracketed in time."""

    def __init__(self, proc: psutil.Process, every: float = 0.01) -> None:
        self._proc = proc
        self._every = every
        self._readings: list[OsReading] = []
        super().__init__("os-sampler")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cpu = process_cpu_seconds(self._proc)
            except (OSError, psutil.Error):
                return
            times = psutil.cpu_times()._asdict()
            host = {m: sum(times.get(f, 0.0) for f in fs) for m, fs in HOST_MODES.items()}
            self._readings.append(OsReading(time.time(), host, cpu))
            self._stop.wait(self._every)

    def around(self, ts: float) -> tuple[OsReading, OsReading]:
        """The last reading before ``ts`` and the first after it, allowing for skew."""
        readings = list(self._readings)
        before = [r for r in readings if r.wall <= ts - _SKEW]
        after = [r for r in readings if r.wall >= ts + _SKEW]
        assert before and after, f"no OS readings around {ts} yet"
        return before[-1], after[0]


def wait_for_names(
    vm: VictoriaMetrics, selector: str, names: Iterable[str], timeout: float = 20
) -> set[str]:
    """Poll until every one of ``names`` has a series under ``selector``; the names present,
    less the series of the histograms of stalls, which a busy machine may or may not make."""
    want = set(names)
    events = {
        f"{name}{sep}{part}"
        for name in events_metrics()
        for sep in ("_", ".")
        for part in ("bucket", "sum", "count")
    }

    def arrived() -> set[str]:
        present = vm.names(selector) - events
        missing = want - present
        assert not missing, f"missing {sorted(missing)}"
        return present

    return wait_until(arrived, timeout, f"{sorted(want)[:3]}... under {selector} in {vm.url}")


def check_names(vm: VictoriaMetrics, naming: Naming, selector: str) -> None:
    """Every default metric is there under its name, with its attributes, and nothing else."""
    metrics = default_metrics()
    want = {naming.name(m) for m in metrics}
    present = wait_for_names(vm, selector, want)
    assert present == want, f"unexpected metrics: {sorted(present - want)}"
    got = held(vm, naming, selector)
    for m in metrics:
        labels = {k for attrs in got.of(m) for k, _ in attrs}
        expected = {naming.label(a) for a in attributes_of(m) if a not in _PER_CPU_ONLY}
        assert labels == expected, f"{naming.name(m)}: labels {labels}, expected {expected}"


def _uptime_at(pid: int, wall: float) -> float:
    """Seconds process ``pid`` had lived at wall-clock time ``wall``."""
    if hasattr(time, "CLOCK_BOOTTIME"):
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        start = int(stat[stat.rfind(b")") + 2 :].split()[19]) / os.sysconf("SC_CLK_TCK")
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start - (time.time() - wall)
    return wall - psutil.Process(pid).create_time()


def _close(got: float, want: float, tolerance: float, what: str) -> None:
    assert abs(got - want) <= tolerance, (
        f"{what}: backend has {got}, expected {want} +- {tolerance}"
    )


def check_process_values(
    vm: VictoriaMetrics,
    naming: Naming,
    selector: str,
    pid: int,
    *,
    min_cpu: float = 0.0,
    writes: bool = True,
    shared: bool = True,
) -> None:
    """The values are those of process ``pid``: compared with what the OS says about it now.

    Retried until they agree (the process exports every few hundred ms), so a
    value read between two exports is not a failure. ``min_cpu``: CPU seconds
    it is known to have used; ``writes``: whether it is known to call write(2);
    ``shared``: whether it reports the host metrics (in a group of workers, one does).
    """
    proc = psutil.Process(pid)
    with OsSampler(proc) as os_readings:
        _check_process_values(vm, naming, selector, proc, os_readings, min_cpu, writes, shared)


def _check_process_values(
    vm: VictoriaMetrics,
    naming: Naming,
    selector: str,
    proc: psutil.Process,
    os_readings: OsSampler,
    min_cpu: float,
    writes: bool,
    shared: bool,
) -> None:
    pid = proc.pid

    def agree() -> bool:
        assert proc.is_running(), f"process {pid} is gone"
        got = held(vm, naming, selector, window=10)
        by = {m.name: m for m in default_metrics()}
        # Memory: the RSS of the child, as read from outside.
        mem = proc.memory_info()
        rss = got.value(by["process.memory.usage"])
        _close(rss, mem.rss, max(2 << 20, 0.03 * mem.rss), "process.memory.usage vs RSS")
        vms = got.value(by["process.memory.virtual"])
        _close(vms, mem.vms, 0.05 * mem.vms, "process.memory.virtual vs VMS")
        limit = read_facts(psutil.Process(), cpu_frequency=False).memory_limit
        util = got.value(by["process.memory.utilization"])
        _close(util, rss / limit, 0.02 * rss / limit, "process.memory.utilization vs RSS/limit")
        # CPU: never more than the child has used by now, at least what it burned.
        cpu = proc.cpu_times()
        user = got.value(by["process.cpu.time"], cpu__mode="user")
        system = got.value(by["process.cpu.time"], cpu__mode="system")
        assert min_cpu <= user <= cpu.user + 0.02, f"user CPU {user}, OS says {cpu.user}"
        assert 0 <= system <= cpu.system + 0.02, f"system CPU {system}, OS says {cpu.system}"
        _check_process_utilization(got, by["process.cpu.utilization"], os_readings)
        # Counts: equal to what the OS lists now (the child is idle).
        threads = got.value(by["process.thread.count"])
        assert threads == proc.num_threads(), f"threads {threads} vs {proc.num_threads()}"
        if "process.unix.file_descriptor.count" in by:
            fds = got.value(by["process.unix.file_descriptor.count"])
            _close(fds, proc.num_fds(), 1, "process.unix.file_descriptor.count")
        # Uptime: how long the child had lived when the point was taken.
        ts, uptime = got.sample(by["process.uptime"])
        _close(uptime, _uptime_at(pid, ts), 0.3, "process.uptime at its timestamp")
        # Counters of the child's activity.
        switches = got.by(by["process.context_switches"], "process.context_switch.type")
        assert set(switches) == {"voluntary", "involuntary"} and switches["voluntary"] > 0
        if "process.paging.faults" in by:
            faults = got.by(by["process.paging.faults"], "system.paging.fault.type")
            assert set(faults) == {"major", "minor"} and faults["minor"] > 1000, faults
        ops = got.by(by["process.disk.operations"], "disk.io.direction")
        assert ops["read"] > 0 and (ops["write"] > 0 or not writes), ops
        assert set(got.by(by["process.disk.io"], "disk.io.direction")) == {"read", "write"}
        for gc_metric in ("cpython.gc.collections", "cpython.gc.collected_objects"):
            gens = got.by(by[gc_metric], "cpython.gc.generation")
            assert set(gens) == {"0", "1", "2"} and min(gens.values()) >= 0, gens
        assert got.by(by["cpython.gc.collections"], "cpython.gc.generation")["0"] > 0
        duration = got.value(by["process_metrics.refresh.duration"])
        assert 0 < duration < 0.5, f"refresh duration {duration}"
        if not shared:
            # Another worker of its group reports the host's time and memory.
            host = {n for n in got.points if n.startswith(("system_", "system."))}
            assert not host, f"host metrics from a process that does not report them: {host}"
            return True
        # Host metrics: the host this test runs on.
        assert got.value(by["system.cpu.logical.count"]) == psutil.cpu_count()
        if "system.cpu.physical.count" in by:
            assert got.value(by["system.cpu.physical.count"]) == psutil.cpu_count(logical=False)
        host = psutil.virtual_memory()
        assert got.value(by["system.memory.limit"]) == host.total
        used = got.value(by["system.memory.usage"], system__memory__state="used")
        _close(used, host.total - host.available, 0.05 * host.total, "system.memory.usage used")
        shares = got.by(by["system.memory.utilization"], "system.memory.state")
        _close(shares["used"], used / host.total, 0.01, "system.memory.utilization used")
        modes = got.by(by["system.cpu.utilization"], "cpu.mode")
        assert {"user", "system", "idle"} <= set(modes), modes
        _close(sum(modes.values()), 1.0, 0.02, "system.cpu.utilization summed over modes")
        ts, host_user = got.sample(by["system.cpu.time"], cpu__mode="user")
        before, after = os_readings.around(ts)
        assert before.host["user"] <= host_user <= after.host["user"], (
            f"system.cpu.time user {host_user} at {ts}: the host said "
            f"{before.host['user']} at {before.wall} and {after.host['user']} at {after.wall}"
        )
        _check_host_user_share(got, by["system.cpu.utilization"], os_readings)
        return True

    wait_until(agree, 15, f"the values in {vm.url} to match process {pid}", interval=0.2)


def _check_process_utilization(got: Held, metric: Metric, os_readings: OsSampler) -> None:
    """The utilisation over the last two points is the process's CPU seconds the OS counted
    between them, per second and per CPU available (affinity, capped by a quota)."""
    (t0, _), (t1, _) = got.previous(metric, cpu__mode="user"), got.sample(metric, cpu__mode="user")
    util = sum(got.by(metric, "cpu.mode").values())
    b0, a0 = os_readings.around(t0)
    b1, a1 = os_readings.around(t1)
    cpus = cgroups.available_cpus()  # the child runs in the test's cgroups and affinity
    lo = max(0.0, b1.process - a0.process) / (t1 - t0 + 2 * _SKEW) / cpus
    hi = (a1.process - b0.process) / (t1 - t0 - 2 * _SKEW) / cpus
    assert lo <= util <= hi, f"process.cpu.utilization {util}, the OS says {lo}..{hi}"


def _check_host_user_share(got: Held, metric: Metric, os_readings: OsSampler) -> None:
    """The user share over the last two points is the host's, as the OS counted it."""
    (t0, _), (t1, share) = (
        got.previous(metric, cpu__mode="user"),
        got.sample(metric, cpu__mode="user"),
    )
    b0, a0 = os_readings.around(t0)
    b1, a1 = os_readings.around(t1)
    shortest = sum(b1.host.values()) - sum(a0.host.values())
    longest = sum(a1.host.values()) - sum(b0.host.values())
    assert shortest > 0, "the window is too short for the readings around it"
    lo = max(0.0, b1.host["user"] - a0.host["user"]) / longest
    hi = (a1.host["user"] - b0.host["user"]) / shortest
    assert lo - 1e-9 <= share <= hi + 1e-9, f"system.cpu.utilization user {share}: OS {lo}..{hi}"


def check_prometheus_examples(vm: VictoriaMetrics, selector: str) -> None:
    """A few translated names spelled out, as users and dashboards query them."""
    inner = selector[1:-1]
    for expr in (
        f'process_cpu_time_seconds_total{{{inner}, cpu_mode="user"}}',
        f'process_cpu_time_seconds_total{{{inner}, cpu_mode="system"}}',
        f"process_memory_usage_bytes{{{inner}}}",
        f"process_cpu_utilization_ratio{{{inner}}}",
        f"process_thread_count{{{inner}}}",
        f"process_uptime_seconds{{{inner}}}",
        f'cpython_gc_collections_total{{{inner}, cpython_gc_generation="0"}}',
        f'system_memory_usage_bytes{{{inner}, system_memory_state="used"}}',
    ):
        result = vm.query(expr)
        assert len(result) >= 1, f"{expr} returned nothing"
        if "cpu_mode=" in expr or "generation=" in expr:
            assert len(result) == 1, f"{expr} returned {len(result)} series"


# The values procfs.check_own holds against /proc, by their Prometheus names.
_OWN_VALUES = {
    "rss": "process_memory_usage_bytes",
    "utilization": "process_memory_utilization_ratio",
    "threads": "process_thread_count",
    "fds": "process_unix_file_descriptor_count",
    "uptime": "process_uptime_seconds",
}


def pushed_around(
    vm: VictoriaMetrics, selector: str, pid: int, *, after: float = 0.3, timeout: float = 15
) -> tuple[procfs.Reported, procfs.Reading, procfs.Reading]:
    """A collection that process ``pid`` pushed under ``selector``, and /proc read around it.

    The first reading is taken now; the collection is one whose points are
    stamped at least ``after`` seconds later (a collection takes
    milliseconds), so it ran after that reading. The second reading is taken
    once the points are in the backend, so after the collection.
    """
    before = procfs.read(pid)

    def arrived() -> dict[str, float]:
        got = held(vm, PROMETHEUS, selector, window=10)
        found: dict[str, float] = {}
        stamps = []
        for key, name in _OWN_VALUES.items():
            (stamp, found[key]), *_ = got.of(name).values()
            stamps.append(stamp)
        for mode in ("user", "system"):
            stamp, found[mode] = got.sample("process_cpu_time_seconds_total", cpu__mode=mode)
            stamps.append(stamp)
        assert min(stamps) >= before.wall + after, f"no collection after {before.wall} yet"
        return found

    values = wait_until(arrived, timeout, f"a collection of {pid} under {selector}", interval=0.1)
    return procfs.Reported(**values), before, procfs.read(pid)


DASHBOARD_QUERIES = REPO / "examples" / "grafana" / "queries.py"


def dashboard_queries(**how: Any) -> list[Any]:
    """The dashboard's queries as ``examples/grafana/queries.py`` extracts them, given ``how``."""
    queries: list[Any] = load_file(DASHBOARD_QUERIES, "dashboard_queries").queries(**how)
    return queries
