"""Shared fixtures: a real SDK MeterProvider with an InMemoryMetricReader."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric, MetricsData

from opentelemetry.instrumentation.process import SCOPE_NAME, ProcessInstrumentor

Points = dict[frozenset[tuple[str, Any]], Any]


def collect(reader: InMemoryMetricReader) -> dict[str, Metric]:
    """One collection: this package's metrics by name."""
    return ours(reader.get_metrics_data())


def ours(data: MetricsData | None) -> dict[str, Metric]:
    """This package's metrics in ``data`` by name; each name at most once."""
    found: dict[str, Metric] = {}
    if data is None:
        return found
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            if sm.scope.name == SCOPE_NAME:
                for m in sm.metrics:
                    assert m.name not in found, f"{m.name} reported twice"
                    found[m.name] = m
    return found


HOST_MODES = {
    "user": ("user",),
    "nice": ("nice",),
    "system": ("system",),
    "idle": ("idle",),
    "iowait": ("iowait",),
    "interrupt": ("irq", "softirq"),
    "steal": ("steal",),
}
"""Each ``cpu.mode`` of ``system.cpu.*`` and the psutil fields it sums (guest is in user)."""


def cgroup_limited_here() -> bool:
    """Whether a cgroup CPU quota or memory limit applies to this process (read here, v1/v2)."""
    try:
        lines = open("/proc/self/cgroup").read().splitlines()  # noqa: SIM115
    except OSError:
        return False
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for base, names in (
            ("/sys/fs/cgroup", ("cpu.max", "memory.max")),
            ("/sys/fs/cgroup/cpu", ("cpu.cfs_quota_us",)),
            ("/sys/fs/cgroup/memory", ("memory.limit_in_bytes",)),
        ):
            v2 = controllers == "" and base == "/sys/fs/cgroup"
            v1 = base.rsplit("/", 1)[-1] in controllers.split(",")
            if not (v1 or v2):
                continue
            parts = [p for p in path.split("/") if p]
            for depth in range(len(parts) + 1):
                folder = "/".join([base, *parts[:depth]])
                for name in names:
                    try:
                        text = open(f"{folder}/{name}").read().split()[0]  # noqa: SIM115
                    except (OSError, IndexError):
                        continue
                    if text not in ("max", "-1") and int(text) < 1 << 60:
                        return True
    return False


def on_by_default() -> set[str]:
    """The metrics a default ``instrument()`` reports on this host, from the OS's own files.

    The default rows, plus the automatic saturation group: pressure stalls
    where ``/proc/pressure`` has them; the cgroup metrics only in a limited
    cgroup, where the exact set depends on its files (tests skip then).
    """
    from opentelemetry.instrumentation.process.metrics import METRICS

    if cgroup_limited_here():
        pytest.skip("this process is in a limited cgroup: the default set depends on its files")
    names = {m.name for m in METRICS if m.default and m.supported()}
    return names | {
        m.name
        for m in METRICS
        if m.source == "pressure" and m.supported() and os.path.exists(f"/proc/pressure/{m.field}")
    }


def points(metric: Metric) -> Points:
    """Data points of ``metric`` keyed by their attribute set."""
    out: Points = {}
    for p in metric.data.data_points:
        key = frozenset(p.attributes.items())
        assert key not in out, f"duplicate point {dict(key)} in {metric.name}"
        out[key] = p.value
    return out


def value(metric: Metric, **attributes: Any) -> Any:
    return points(metric)[frozenset(attributes.items())]


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    yield InMemoryMetricReader()


@pytest.fixture
def provider(reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    mp = MeterProvider(metric_readers=[reader])
    yield mp
    mp.shutdown()


@pytest.fixture
def instrument(provider: MeterProvider) -> Iterator[Callable[..., ProcessInstrumentor]]:
    """Instrument with the given options on the test's provider; undone after the test."""

    def _instrument(**options: Any) -> ProcessInstrumentor:
        inst = ProcessInstrumentor()
        inst.instrument(meter_provider=provider, **options)
        return inst

    yield _instrument
    ProcessInstrumentor().uninstrument()


DIRECT_READS_VAR = "OTEL_PYTHON_PROCESS_METRICS_DIRECT_READS"
"""Kept from the shell: ``=false`` runs the whole suite on psutil's portable path."""


RUNTIME_DIR_VAR = "OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"


@pytest.fixture(scope="session")
def session_runtime_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A runtime directory of this test session alone: its processes are one group.

    Other test runs on the machine (same user, same cgroup) would otherwise hold
    the election, and this run's processes would report no shared metrics.
    """
    folder = tmp_path_factory.mktemp("runtime")
    folder.chmod(0o700)
    return str(folder)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, session_runtime_dir: str) -> None:
    """No test inherits OTEL_PYTHON_PROCESS_METRICS_* from the shell, but DIRECT_READS."""
    import os

    for name in list(os.environ):
        if name.startswith("OTEL_PYTHON_PROCESS_METRICS_") and name != DIRECT_READS_VAR:
            monkeypatch.delenv(name)
    monkeypatch.setenv(RUNTIME_DIR_VAR, session_runtime_dir)


class OpenRecorder:
    """Records files opened and folders listed while active (an audit hook)."""

    def __init__(self) -> None:
        self.active = False
        self.paths: list[str] = []
        self._lock = threading.Lock()

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.active and event in ("open", "os.listdir", "os.scandir") and args:
            path = args[0]
            if isinstance(path, (str, bytes)):
                with self._lock:
                    self.paths.append(path.decode() if isinstance(path, bytes) else path)

    @contextmanager
    def recording(self) -> Iterator[list[str]]:
        self.paths = []
        self.active = True
        try:
            yield self.paths
        finally:
            self.active = False


_recorder = OpenRecorder()
sys.addaudithook(_recorder.hook)


@pytest.fixture
def opens() -> OpenRecorder:
    return _recorder


# Under mutation testing, a test that spins forever on a mutant fails after
# this much CPU time of its own, instead of running into mutmut's time limit:
# the hang is what the test caught. The slowest test uses about 3 s.
MUTANT_CPU_SECONDS = 15.0


class Hung(Exception):
    """The test used more than ``MUTANT_CPU_SECONDS`` of CPU under a mutant."""


@pytest.fixture(autouse=True)
def _a_hang_fails_under_mutation_testing() -> Iterator[None]:
    mutant = os.environ.get("MUTANT_UNDER_TEST")
    if mutant is None or mutant == "stats" or not hasattr(signal, "ITIMER_VIRTUAL"):
        yield
        return

    def hung(_signum: int, _frame: object) -> None:
        raise Hung(f"over {MUTANT_CPU_SECONDS} s of CPU time under {mutant or 'no mutant'}")

    previous = signal.signal(signal.SIGVTALRM, hung)
    signal.setitimer(signal.ITIMER_VIRTUAL, MUTANT_CPU_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)
