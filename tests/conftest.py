"""Shared fixtures: a real SDK MeterProvider with an InMemoryMetricReader."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Metric, MetricsData

from opentelemetry.instrumentation.process import (
    SCOPE_NAME,
    ProcessInstrumentor,
    ProcessMetrics,
    ProcessMetricsOptions,
)
from opentelemetry.instrumentation.process.catalog import supported

from .support import expected_skips
from .support.groupkids import Kid
from .support.points import value_of
from .support.threadjobs import Job

# Under mutmut (MUTANT_UNDER_TEST set, its copy of src/ imported here), the tests'
# subprocesses import that copy too, and so run with the same mutant on: code that
# runs at import, or only in a child, is then tested as the rest is.
if "MUTANT_UNDER_TEST" in os.environ:
    import opentelemetry.instrumentation.process as _package

    _src = str(Path(_package.__file__).resolve().parents[3])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_src, os.environ.get("PYTHONPATH")) if p)
    if os.environ["MUTANT_UNDER_TEST"] == "stats":
        # The stats pass runs here, and mutmut keeps the name in this process too. Spawned
        # children then run the original code: recording a hit there opens the
        # pyproject.toml of their cwd (none in a tmp_path; a descriptor test sees it).
        # Forked children record, and their hits are gathered after each test.
        del os.environ["MUTANT_UNDER_TEST"]
        from .support import mutmut_children

        mutmut_children.install(os.path.dirname(_package.__file__))  # as code objects name it
        _import_time_tests: list[str] = []

        @pytest.hookimpl(tryfirst=True)  # before mutmut's own, which takes the test's hits
        def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
            mutmut_children.gather()
            if item.get_closest_marker("import_time"):
                _import_time_tests.append(item.nodeid.removeprefix("mutants/"))
            # A module imported after those tests ran gives them its calls as it comes.
            mutmut_children.give_import_time_hits(_import_time_tests)


Points = dict[frozenset[tuple[str, Any]], Any]


def collect(reader: InMemoryMetricReader) -> dict[str, Metric]:
    """One collection: this package's metrics by name."""
    return ours(reader.get_metrics_data())


def collect_after_close(reader: InMemoryMetricReader) -> dict[str, Metric]:
    """One collection after uninstrument(): this package's metrics but the histograms of
    events, which the SDK exports again, unchanged, once they recorded one (docs/design.md)."""
    events = events_metrics()
    return {name: m for name, m in collect(reader).items() if name not in events}


def reported(found: dict[str, Metric]) -> set[str]:
    """The names in a collection but the histograms of events: a loaded machine can make
    a stall, and so their point, in any collection."""
    return set(found) - events_metrics()


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


def events_metrics() -> set[str]:
    """The histograms of events (stalls): points once an event happened, none before.

    A test that compares the metrics a collection reports with a set leaves
    them out of both sides; tests/test_stalls.py makes their events.
    """
    from opentelemetry.instrumentation.process.metrics import METRICS, Kind

    return {m.name for m in METRICS if m.kind is Kind.HISTOGRAM}


def on_by_default() -> set[str]:
    """The metrics a default ``instrument()`` reports on this host, from the OS's own files.

    The default rows, plus the automatic saturation group: pressure stalls
    where ``/proc/pressure`` has them; the cgroup metrics only in a limited
    cgroup, where the exact set depends on its files (tests skip then). Not
    the histograms of events (:func:`events_metrics`).
    """
    from opentelemetry.instrumentation.process.metrics import METRICS
    from opentelemetry.instrumentation.process.sources import SOURCES

    if cgroup_limited_here():
        pytest.skip("this process is in a limited cgroup: the default set depends on its files")
    return {
        m.name
        for m in METRICS
        if supported(m) and (m.default or (SOURCES[m.source].auto and automatic_here(m)))
    } - events_metrics()


def automatic_here(metric: Any) -> bool:
    """Whether ``metric``, of a source that is on by itself (``Source.auto``), has anything to
    read on this host, by the kernel's own files: the test's truth, not the package's."""
    if metric.source == "pressure":
        return os.path.exists(f"/proc/pressure/{metric.field}")
    return cgroup_limited_here()  # the cgroup sources


def points(metric: Metric) -> Points:
    """Data points of ``metric`` keyed by their attribute set."""
    out: Points = {}
    for p in metric.data.data_points:
        key = frozenset(p.attributes.items())
        assert key not in out, f"duplicate point {dict(key)} in {metric.name}"
        out[key] = value_of(p)
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
def supervise(provider: MeterProvider) -> Iterator[Callable[..., ProcessMetrics]]:
    """Makes supervisors (``children=True`` and the options given) that close at the end."""
    made: list[ProcessMetrics] = []

    def _supervise(**options: Any) -> ProcessMetrics:
        pm = ProcessMetrics(
            ProcessMetricsOptions(children=True, **options), meter_provider=provider
        )
        made.append(pm)
        return pm

    yield _supervise
    for pm in made:
        pm.close()


@pytest.fixture
def instrument(provider: MeterProvider) -> Iterator[Callable[..., ProcessInstrumentor]]:
    """Instrument with the given options on the test's provider; undone after the test."""

    def _instrument(**options: Any) -> ProcessInstrumentor:
        inst = ProcessInstrumentor()
        inst.instrument(meter_provider=provider, **options)
        return inst

    yield _instrument
    ProcessInstrumentor().uninstrument()


class Sdk:
    """The test's real SDK MeterProvider, its InMemoryMetricReader, and this package on it."""

    def __init__(
        self,
        provider: MeterProvider,
        reader: InMemoryMetricReader,
        instrument: Callable[..., ProcessInstrumentor],
    ) -> None:
        self.provider = provider
        self.reader = reader
        self.instrument = instrument
        """Instrument with the given options on this provider; undone after the test."""

    def collect(self) -> dict[str, Metric]:
        """One collection: this package's metrics by name."""
        return collect(self.reader)


@pytest.fixture
def sdk(
    provider: MeterProvider,
    reader: InMemoryMetricReader,
    instrument: Callable[..., ProcessInstrumentor],
) -> Sdk:
    """The ``provider``, ``reader`` and ``instrument`` fixtures in one."""
    return Sdk(provider, reader, instrument)


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


class Clock:
    """A monotonic clock that moves only when told, for the fault log (its module's ``time``)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


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


def recorded(sdk: Sdk, opens: OpenRecorder) -> tuple[dict[str, Metric], list[str]]:
    """One collection, and the files it opened."""
    with opens.recording() as paths:
        got = sdk.collect()
    return got, paths


def task_listing() -> list[str]:
    """This process's thread ids, as the kernel lists them."""
    return sorted(os.listdir("/proc/self/task"))


# Under mutation testing, a test that spins forever on a mutant fails after
# this much CPU time of its own, instead of running into mutmut's time limit:
# the hang is what the test caught. The slowest test uses about 11 s (test_stalls' long
# collections); the clean run mutmut makes first (no mutant) is not timed.
MUTANT_CPU_SECONDS = 60.0


class Hung(Exception):
    """The test used more than ``MUTANT_CPU_SECONDS`` of CPU under a mutant."""


@pytest.fixture(autouse=True)
def _a_hang_fails_under_mutation_testing() -> Iterator[None]:
    mutant = os.environ.get("MUTANT_UNDER_TEST")
    if not mutant or mutant == "stats" or not hasattr(signal, "ITIMER_VIRTUAL"):
        yield
        return

    def hung(_signum: int, _frame: object) -> None:
        raise Hung(f"over {MUTANT_CPU_SECONDS} s of CPU time under {mutant}")

    previous = signal.signal(signal.SIGVTALRM, hung)
    signal.setitimer(signal.ITIMER_VIRTUAL, MUTANT_CPU_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


# -- every skip names what it waits for (tests/support/expected_skips.py) ---------------
# With PROCESS_TESTS_LOG_DIR set (`make test` sets it), a passing run reads green: the
# summary shows failures and errors only, skips are counted by what they wait for (a
# missing server or browser in full), and every skip reason and the tracebacks of the
# expected failures go to a log file, named at the end.

LOG_DIR_VAR = "PROCESS_TESTS_LOG_DIR"
_unexpected_skips: list[str] = []
_details: list[str] = []
_skips: dict[str, int] = {}
_loud: dict[str, None] = {}
_xfailed: list[str] = []


_run_name: list[str] = []


@pytest.hookimpl(tryfirst=True)  # before the terminal reporter reads the option
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The supervisor-mode tests first: they report every child of the test process,
    and the end-to-end servers that later tests start live on as its children."""
    items.sort(key=lambda item: not item.path.name.startswith("test_children"))


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(LOG_DIR_VAR):
        config.option.reportchars = "fE"
    # The log's name: the one given (make check's halves), the nox cell, else this Python
    # and what was run.
    files = "+".join(os.path.basename(a.split("::")[0]).removesuffix(".py") for a in config.args)
    python = "python{}.{}".format(*sys.version_info[:2])
    given = os.environ.get("PROCESS_TESTS_RUN_NAME") or os.environ.get("NOX_CURRENT_SESSION")
    _run_name[:] = [given or f"{python}-{files or 'tests'}"]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and hasattr(report, "wasxfail"):
        _xfailed.append(report.nodeid)
        _details.append(f"XFAIL {report.nodeid}: {report.wasxfail}\n{report.longreprtext}\n")
    elif report.skipped:
        reason = expected_skips.reason(report)
        what = expected_skips.category(reason)
        _details.append(f"SKIPPED ({what or 'UNEXPECTED'}) {report.nodeid}: {reason}")
        if what is None:
            _unexpected_skips.append(f"{report.nodeid}: {reason}")
        else:
            _skips[what] = _skips.get(what, 0) + 1
            if what in expected_skips.LOUD:
                _loud[reason] = None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unexpected_skips and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _log_path() -> str | None:
    folder = os.environ.get(LOG_DIR_VAR)
    if not folder:
        return None
    name = (_run_name or ["tests"])[0][:80]
    safe = "".join(c if c.isalnum() or c in "-._+" else "_" for c in name)
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, f"{safe}.log")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _unexpected_skips:
        terminalreporter.section(
            "skips with a reason not in tests/support/expected_skips.py", red=True
        )
        for line in _unexpected_skips:
            terminalreporter.line(line[:300], red=True)
        terminalreporter.line(
            "A skip must name the platform, server, package or host feature it waits for; "
            "add its reason to tests/support/expected_skips.py, or make the test run.",
            red=True,
        )
    path = _log_path()
    if path is None or not (_details or _loud):
        return
    with open(path, "w") as log:
        log.write("\n".join(_details) + "\n")
    for reason in _loud:
        terminalreporter.line(f"SKIPPED: {reason[:300]}", yellow=True)
    counted = ", ".join(f"{what} {n}" for what, n in sorted(_skips.items()))
    skipped = f"{sum(_skips.values())} skipped ({counted})" if _skips else "no skips"
    failures = f"{len(_xfailed)} expected failure{'' if len(_xfailed) == 1 else 's'}"
    terminalreporter.line(f"{skipped}, {failures}: reasons and tracebacks in {path}")


# -- process groups: a runtime directory of its own, and forked kids killed after -----


@pytest.fixture
def rundir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh runtime directory: a group of its own for each test."""
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    monkeypatch.setenv("OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR", str(folder))
    return folder


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    """The test's thread jobs (it appends them): each released after the test."""
    started: list[Job] = []
    yield started
    for job in started:
        job.release.set()


@pytest.fixture
def kids() -> Iterator[list[Kid]]:
    """Forked group members made by the test, killed after it."""
    made: list[Kid] = []
    yield made
    for kid in made:
        kid.kill()


# -- the package's log: as lines, and its warnings ------------------------------------

LOGGER = "opentelemetry.instrumentation.process"


class LogLines(logging.Handler):
    """Log records as ``LEVEL message``; `` [traceback]`` added when one was logged and asked."""

    def __init__(self, tracebacks: bool = False) -> None:
        super().__init__(logging.DEBUG)
        self.tracebacks = tracebacks
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        tb = " [traceback]" if self.tracebacks and record.exc_info else ""
        self.lines.append(f"{record.levelname} {record.getMessage()}{tb}")


class Records(logging.Handler):
    """Every record a logger emits, kept whole."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self) -> list[str]:
        """The messages, formatted as the user sees them."""
        return [r.getMessage() for r in self.records]


@contextmanager
def log_lines(tracebacks: bool = False) -> Iterator[LogLines]:
    """The package's log records, at every level, while in the block."""
    handler = LogLines(tracebacks)
    logger = logging.getLogger(LOGGER)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
def logged() -> Iterator[LogLines]:
    with log_lines() as handler:
        yield handler


def package_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The messages of the package's warnings (and worse) that ``caplog`` holds."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith(LOGGER) and r.levelno >= logging.WARNING
    ]
