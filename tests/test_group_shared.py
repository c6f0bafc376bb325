"""The shared_metrics option, and shared metrics through the real SDK in real processes."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource

from opentelemetry.instrumentation.process import ProcessMetrics
from opentelemetry.instrumentation.process.environment import from_environment
from opentelemetry.instrumentation.process.group import keys
from opentelemetry.instrumentation.process.metrics import METRICS
from opentelemetry.instrumentation.process.options import ProcessMetricsOptions
from opentelemetry.instrumentation.process.sources import SOURCES

from .conftest import LogLines, collect
from .support.examples import Lines, clean_env
from .support.groupkids import Kid

VAR = "OTEL_PYTHON_PROCESS_METRICS_SHARED_METRICS"
SHARED = {m.name for m in METRICS if SOURCES[m.source].shared}


def test_the_shared_sources_are_the_host_the_cgroup_and_the_pressure_ones() -> None:
    """Shared are exactly the sources of the host's and the container's values, by module."""
    from opentelemetry.instrumentation.process.sources import host, saturation

    machine = {s.name for module in (host, saturation) for s in module.SOURCES}
    assert machine and machine <= set(SOURCES)
    for name, source in SOURCES.items():
        assert source.shared == (name in machine), name
    shared_metrics = [m for m in METRICS if SOURCES[m.source].shared]
    assert any(m.name.startswith("system.") for m in shared_metrics)
    assert any(m.name.startswith("container.") for m in shared_metrics)
    assert not any(m.name.startswith("process.") for m in shared_metrics)


def test_the_option_defaults_to_once_and_refuses_other_values_by_name() -> None:
    assert ProcessMetricsOptions().shared_metrics == "once"
    assert ProcessMetricsOptions(shared_metrics="every").shared_metrics == "every"
    with pytest.raises(ValueError, match=r"^shared_metrics: expected one of 'once', 'every'"):
        ProcessMetricsOptions(shared_metrics="twice")


def test_the_environment_variable_any_case_and_a_bad_value_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert from_environment({VAR: " Every "}) == {"shared_metrics": "every"}
    with caplog.at_level(logging.WARNING):
        assert from_environment({VAR: "sometimes"}) == {}
    (line,) = [r.getMessage() for r in caplog.records]
    assert VAR in line and "'sometimes'" in line and "'once'" in line


_held: list[Any] = []


def _collect_names(word: str = "") -> list[str]:
    """A collection here; with ``fork`` or ``cfork``, in a child forked that way instead."""
    if word in ("fork", "cfork"):
        child = Kid(_collect_names, raw=word == "cfork")
        try:
            found: list[str] = child.result
        finally:
            child.stop()
        return found
    return sorted(collect(_held[0]))


def instrumented(
    kids: list[Kid], mode: str = "once", service: str | None = None, collect_now: bool = True
) -> Kid:
    """A child with ProcessMetrics on a real SDK provider; ask it for a collection.

    ``service``: the provider's ``service.name`` (the SDK's default if ``None``).
    With ``collect_now``, its job collects once (its result is the names).
    """

    def job() -> list[str]:
        reader = InMemoryMetricReader()
        resource = Resource.create({} if service is None else {"service.name": service})
        provider = MeterProvider(metric_readers=[reader], resource=resource)
        _held[:] = [
            reader,
            ProcessMetrics(ProcessMetricsOptions(shared_metrics=mode), meter_provider=provider),
        ]
        return _collect_names() if collect_now else []

    kid = Kid(job, serve=_collect_names)
    kids.append(kid)
    _ = kid.result
    return kid


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_through_the_sdk_one_process_reports_the_shared_metrics(
    rundir: Path, kids: list[Kid]
) -> None:
    leader, other = instrumented(kids), instrumented(kids)
    assert "system.memory.usage" in leader.result
    assert not SHARED & set(other.result)
    assert "process.memory.usage" in other.result and "process.cpu.time" in other.result
    leader.kill()
    assert "system.memory.usage" in other.ask("collect")


def test_two_providers_of_one_process_agree(rundir: Path) -> None:
    readers = [InMemoryMetricReader(), InMemoryMetricReader()]
    providers = [MeterProvider(metric_readers=[r]) for r in readers]
    made = [ProcessMetrics(meter_provider=p) for p in providers]
    try:
        for reader in readers:
            assert "system.memory.usage" in collect(reader)
    finally:
        for m in made:
            m.close()
        for p in providers:
            p.shutdown()


def test_a_container_main_process_has_a_parent_key() -> None:
    assert keys.parent_key(0) == f"{keys.boot_id()}-0-0"


def test_the_host_is_the_machine_id_and_the_host_name() -> None:
    # Containers of one image may share a machine id; their host names differ.
    machine = Path("/etc/machine-id")
    name = socket.gethostname()
    if machine.is_file() and machine.read_text().strip():
        assert keys.host_id() == f"{machine.read_text().strip()}/{name}"
    else:
        assert keys.host_id().endswith(name)


# --- one election per service ---------------------------------------------------------


def test_two_services_in_one_cgroup_each_report_their_shared_metrics_once(
    rundir: Path, kids: list[Kid]
) -> None:
    # Another service started first, as a cron job or a Celery worker beside a web server.
    other = instrumented(kids, service="another-service")
    web = [instrumented(kids, service="web"), instrumented(kids, service="web")]
    assert "system.memory.usage" in other.result
    assert "system.memory.usage" in web[0].result
    assert not SHARED & set(web[1].result)
    web[0].kill()
    assert "system.memory.usage" in web[1].ask("collect")
    assert "system.memory.usage" in other.ask("collect")


def test_the_namespace_and_the_environment_make_other_groups_the_instance_does_not() -> None:
    def group_of(**attributes: str) -> Any:
        provider = MeterProvider(resource=Resource.create(attributes))
        made = ProcessMetrics(meter_provider=provider)
        try:
            return made.group
        finally:
            made.close()
            provider.shutdown()

    web = group_of(**{"service.name": "web"})
    assert web is not None and web.service == "service.name=web"
    assert web.user == os.geteuid() and web.key
    assert group_of(**{"service.name": "web", "service.instance.id": "other"}) == web
    shop = group_of(**{"service.name": "web", "service.namespace": "shop"})
    prod = group_of(**{"service.name": "web", "deployment.environment.name": "prod"})
    assert shop is not None and shop.service == "service.namespace=shop service.name=web"
    assert len({web.key, shop.key, prod.key}) == 3  # type: ignore[union-attr]


def test_instrument_says_which_group_it_joined_in_one_debug_line(
    rundir: Path, logged: LogLines
) -> None:
    provider = MeterProvider(resource=Resource.create({"service.name": "said"}))
    made = ProcessMetrics(meter_provider=provider)
    try:
        group = made.group
        assert group is not None
        lines = [line for line in logged.lines if "joins the group" in line]
        assert len(lines) == 1 and lines[0].startswith("DEBUG "), logged.lines
        assert "service.name=said" in lines[0] and f"{group.key}.lock" in lines[0]
        every = ProcessMetrics(ProcessMetricsOptions(shared_metrics="every"))
        try:
            assert every.group is None
        finally:
            every.close()  # left open, it kept its gc callback for the tests after it
    finally:
        made.close()
        provider.shutdown()
    assert made.group is None


def test_the_environment_names_the_service_when_the_provider_is_not_set_yet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.metrics import NoOpMeterProvider

    from opentelemetry.instrumentation.process import service

    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.namespace=a%20b,service.name=x")
    assert service.identity(NoOpMeterProvider()) == "service.namespace=a b service.name=from-env"
    monkeypatch.delenv("OTEL_SERVICE_NAME")
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES")
    unnamed = f"service.name=unknown_service program={keys.program()}"
    assert service.identity(NoOpMeterProvider()) == unnamed
    monkeypatch.setenv("OTEL_SERVICE_NAME", "unknown_service:python")  # the SDK's default
    assert service.identity(NoOpMeterProvider()) == unnamed.replace(
        "unknown_service", "unknown_service:python"
    )


def test_a_process_that_never_collected_does_not_hold_the_role(
    rundir: Path, kids: list[Kid]
) -> None:
    # A management command started first, in the web server's container, that has not
    # collected yet: the server's first collection takes the role.
    command = instrumented(kids, service="web", collect_now=False)
    server = instrumented(kids, service="web")
    assert "system.memory.usage" in server.result
    assert not SHARED & set(command.ask("collect"))


def test_a_group_that_cannot_be_worked_out_reports_as_every_with_one_warning(
    rundir: Path, monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    def unreadable(_service: str) -> Any:
        raise LookupError("unknown encoding: utf-8")  # the standard library after setuid

    monkeypatch.setattr(keys, "group_of", unreadable)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    made = [ProcessMetrics(meter_provider=provider) for _ in range(2)]
    try:
        assert made[-1].group is None
        assert "system.memory.usage" in collect(reader)
    finally:
        for m in made:
            m.close()
        provider.shutdown()
    warned = [line for line in logged.lines if "cannot be worked out" in line]
    assert warned == [
        "WARNING process metrics: the group of this process cannot be worked out (LookupError: "
        "unknown encoding: utf-8); it reports the shared metrics itself (shared_metrics='every')."
    ], logged.lines


def test_a_failing_election_reports_as_every_and_never_raises(
    rundir: Path, monkeypatch: pytest.MonkeyPatch, logged: LogLines
) -> None:
    from opentelemetry.instrumentation.process.group.election import Election

    def broken(_self: Election) -> bool:
        raise RuntimeError("a fault of its own")  # another type: a warning of its own

    monkeypatch.setattr(Election, "leader", broken)
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    made = ProcessMetrics(meter_provider=provider)
    try:
        for _ in range(3):
            assert "system.memory.usage" in collect(reader)
    finally:
        made.close()
        provider.shutdown()
    assert len([line for line in logged.lines if "cannot be worked out" in line]) == 1


QUICK_START = """
import sys, time
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import ConsoleMetricExporter, PeriodicExportingMetricReader
from opentelemetry.instrumentation.process import ProcessInstrumentor

exporter = ConsoleMetricExporter()
reader = PeriodicExportingMetricReader(exporter, export_interval_millis=15_000)
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
ProcessInstrumentor().instrument()
time.sleep(2)
"""


@pytest.mark.parametrize("mode", ["once", "every"])
def test_the_export_at_exit_has_the_shared_metrics(rundir: Path, mode: str) -> None:
    """The README's quick start, run for 2 s with a 15 s reader: one export, at exit."""
    env = {**os.environ, VAR: mode, "OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR": str(rundir)}
    done = subprocess.run(
        [sys.executable, "-c", QUICK_START], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    names = set(re.findall(r'"name": "([a-z_.]+)"', done.stdout))
    assert "process.cpu.time" in names, done.stdout[-2000:]
    assert {n for n in SHARED if n.startswith("system.")} & names >= {
        "system.cpu.time",
        "system.cpu.utilization",
        "system.memory.usage",
    }, sorted(names)


@pytest.mark.parametrize("how", ["fork", "cfork"])
def test_a_forked_child_of_the_reporter_does_not_report_them_too(
    rundir: Path, kids: list[Kid], how: str
) -> None:
    reporter = instrumented(kids, service="web")
    assert "system.memory.usage" in reporter.result
    forked = reporter.ask(how)
    assert "process.memory.usage" in forked and not SHARED & set(forked)
    assert "system.memory.usage" in reporter.ask("collect")  # the parent keeps the role


_grandchildren: list[Kid] = []
"""In a kid: the kids it made (kept alive while it lives)."""


def _led_by_a_grandchild(kids: list[Kid], service: str) -> int:
    """The pid of a process that reports ``service``'s group and is not of this one's server:
    a child of a child (neither this process's parent, child nor sibling)."""
    kid = Kid(lambda: instrumented(_grandchildren, service=service).pid)
    kids.append(kid)
    pid: int = kid.result
    return pid


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("holder", ["our child", "of another server"])
def test_a_process_that_leaves_the_role_says_who_has_it_and_then_that_it_took_it_over(
    rundir: Path, kids: list[Kid], caplog: pytest.LogCaptureFixture, holder: str
) -> None:
    """In this process, as mutation testing reads it: the line saying who reports the shared
    metrics instead, for which group and how to change it, at DEBUG where that process is of
    the same server (by design) and at INFO otherwise; then the line of the takeover."""
    service = f"said-{os.getpid()}-{time.monotonic_ns()}"  # a group no test before spoke of
    ours = holder == "our child"
    leader = (
        instrumented(kids, service=service).pid if ours else _led_by_a_grandchild(kids, service)
    )
    name = psutil.Process(leader).name()
    reader = InMemoryMetricReader()
    resource = Resource.create({"service.name": service})
    provider = MeterProvider(metric_readers=[reader], resource=resource)
    with caplog.at_level(logging.DEBUG, logger="opentelemetry.instrumentation.process"):
        made = ProcessMetrics(meter_provider=provider)  # finds the role taken: says so now
        try:
            for _ in range(2):
                assert not SHARED & set(collect(reader))
            if ours:
                kids[0].kill()
                assert "system.memory.usage" in collect(reader)
            assert made.group is not None
            group = made.group
        finally:
            made.close()
            provider.shutdown()
    said = [r for r in caplog.records if "the shared metrics" in r.getMessage()]
    level = logging.DEBUG if ours else logging.INFO
    assert [r.levelno for r in said] == [level] * (2 if ours else 1)
    me = os.getpid()
    assert said[0].getMessage() == (
        f"process metrics: this process (pid {me}) does not report the shared metrics "
        f"(system.*, container.*, pressure stalls): process {leader} ({name}) reports them for "
        f"its group, service.name={service} (user {group.user}, cgroup "
        f"{group.cgroup or '(none)'}). The processes of one service elect one reporter; a "
        "program that sets no service.name is told apart by its command line. To report them "
        "here as well, give this program a service.name of its own (OTEL_SERVICE_NAME), or set "
        "shared_metrics='every' (OTEL_PYTHON_PROCESS_METRICS_SHARED_METRICS=every)."
    )
    if ours:
        assert said[1].getMessage() == (
            f"process metrics: this process (pid {me}) now reports the shared metrics of its "
            f"group, service.name={service}: the process that did is gone."
        )


# --- programs that never named themselves ---------------------------------------------

UNNAMED_APP = """
import json, logging, os, sys
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.instrumentation.process import ProcessInstrumentor

print(os.getpid(), flush=True)
logging.basicConfig(level=os.environ["APP_LOG_LEVEL"], format="%(levelname)s %(message)s")
reader = InMemoryMetricReader()
ProcessInstrumentor().instrument(meter_provider=MeterProvider(metric_readers=[reader]))
for _ in sys.stdin:  # a collection for each line
    data = reader.get_metrics_data()
    print(json.dumps(sorted(
        m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
    )), flush=True)
"""


TERMINAL = "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"
"""A parent of its own for a program, as a shell in a terminal is."""


class App:
    """A real program that sets no service.name, as the README's quick start; it collects
    when asked, and logs at ``level`` on its stderr. Started from a terminal of its own
    (its parent), or, with ``terminal=False``, by the test, as a server starts its workers."""

    def __init__(
        self, script: Path, rundir: Path, terminal: bool = True, level: str = "INFO"
    ) -> None:
        env = clean_env(OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR=str(rundir), APP_LOG_LEVEL=level)
        launcher = [sys.executable, "-c", TERMINAL] if terminal else []
        self.proc = subprocess.Popen(
            [*launcher, sys.executable, str(script)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self._lines = Lines(self.proc.stdout)
        first = self._lines.next(time.monotonic() + 60)
        assert first is not None, "the program did not start"
        self.pid = int(first)
        """The program's pid (its terminal's is ``proc.pid``)."""

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(10)

    def collect(self) -> set[str]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        line = self._lines.next(time.monotonic() + 60)
        assert line is not None, f"pid {self.pid} printed no collection"
        return set(json.loads(line))

    def stop(self) -> str:
        """Ends it (its stdin closed); what it logged."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        assert self.proc.stderr is not None
        return self.proc.stderr.read()


@pytest.fixture
def apps() -> Iterator[list[App]]:
    started: list[App] = []
    yield started
    for app in started:
        app.stop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_unnamed_programs_each_report_the_host_and_one_that_does_not_says_why(
    rundir: Path, tmp_path: Path, apps: list[App]
) -> None:
    """Two unrelated programs that set no service.name (two terminals, a test run beside an
    app) each report the shared metrics; a second run of the same program does not, and
    says at INFO, once, which process does, for which group, and how to change it."""
    scripts = {name: tmp_path / f"{name}.py" for name in ("app_one", "app_two")}
    for script in scripts.values():
        script.write_text(UNNAMED_APP)
    one = App(scripts["app_one"], rundir)
    apps.append(one)
    assert "system.memory.usage" in one.collect()
    two = App(scripts["app_two"], rundir)
    apps.append(two)
    assert "system.memory.usage" in two.collect(), "the other program took its host metrics"
    assert "system.memory.usage" in one.collect()
    again = App(scripts["app_one"], rundir)  # the same program, run again: one group
    apps.append(again)
    for _ in range(3):
        got = again.collect()
        assert "process.cpu.time" in got and not SHARED & got
    said = [line for line in again.stop().splitlines() if "shared metrics" in line]
    assert len(said) == 1 and said[0].startswith("INFO "), said
    line = said[0]
    assert f"this process (pid {again.pid}) does not report" in line, line
    assert f"process {one.pid} " in line and str(scripts["app_one"]) in line, line
    assert "OTEL_SERVICE_NAME" in line and "shared_metrics='every'" in line, line
    for app in (one, two):
        assert not [x for x in app.stop().splitlines() if "does not report" in x]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_one_that_finds_the_role_taken_at_a_collection_says_so_then_and_when_it_takes_over(
    rundir: Path, tmp_path: Path, apps: list[App]
) -> None:
    """Nobody reports yet at either's instrument(): the one that finds the role taken at its
    first collection says so then, once; it says it again when it takes the role over."""
    script = tmp_path / "app_one.py"
    script.write_text(UNNAMED_APP)
    first, second = App(script, rundir), App(script, rundir)
    apps += [first, second]
    assert "system.memory.usage" in first.collect()
    for _ in range(2):
        assert not SHARED & second.collect()
    first.kill()
    assert "system.memory.usage" in second.collect()
    lines = [x for x in second.stop().splitlines() if "shared metrics" in x]
    assert len(lines) == 2 and all(x.startswith("INFO ") for x in lines), lines
    assert "does not report" in lines[0] and f"process {first.pid} " in lines[0], lines
    assert f"this process (pid {second.pid}) now reports the shared metrics" in lines[1], lines
    assert str(script) in lines[1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_worker_whose_sibling_reports_says_so_at_debug_only(
    rundir: Path, tmp_path: Path, apps: list[App]
) -> None:
    """Workers of one server (one parent) leave the role to one of them by design: not a
    surprise to tell at INFO."""
    script = tmp_path / "worker.py"
    script.write_text(UNNAMED_APP)
    workers = [App(script, rundir, terminal=False, level="DEBUG") for _ in range(2)]
    apps += workers
    assert "system.memory.usage" in workers[0].collect()
    assert not SHARED & workers[1].collect()
    [line] = [x for x in workers[1].stop().splitlines() if "does not report" in x]
    assert line.startswith("DEBUG ") and f"process {workers[0].pid} " in line, line


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_the_snapshot_command_shows_which_process_reports_each_group(
    rundir: Path, tmp_path: Path, apps: list[App]
) -> None:
    script = tmp_path / "app_one.py"
    script.write_text(UNNAMED_APP)
    one = App(script, rundir)
    apps.append(one)
    assert "system.memory.usage" in one.collect()
    done = subprocess.run(
        [sys.executable, "-m", "opentelemetry.instrumentation.process", "--json"],
        env=clean_env(OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR=str(rundir)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    shared = json.loads(done.stdout)["found"]["shared"]
    assert shared["this"] == "every"
    [reporter] = [r for r in shared["reporters"] if r["pid"] == one.pid]
    assert set(reporter) == {"pid", "name", "group", "user", "cgroup"}  # getting-started
    assert str(script) in reporter["group"] and reporter["user"] == os.geteuid(), reporter
    text = subprocess.run(
        [sys.executable, "-m", "opentelemetry.instrumentation.process"],
        env=clean_env(OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR=str(rundir)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    found = text[text.index("Found here:") :]
    assert f"pid {one.pid} " in found and str(script) in found, found


PROGRAMS = """
import json, multiprocessing
from opentelemetry.instrumentation.process.group import keys

def program(_: int) -> str:
    return keys.program()

if __name__ == "__main__":
    found = {"parent": keys.program()}
    for method in ("fork", "spawn", "forkserver"):
        with multiprocessing.get_context(method).Pool(2) as pool:
            found[method] = sorted(set(pool.map(program, range(4))))
    print(json.dumps(found))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_program_is_its_command_line_which_its_workers_share(tmp_path: Path) -> None:
    """keys.program: the workers of a pool, forked or spawned, have the parent's; another
    script, other arguments or other ``-c`` code make another; a relative path is made whole."""
    script = tmp_path / "pool_app.py"
    script.write_text(PROGRAMS)

    def run(*args: str, cwd: Path = tmp_path) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, *args],
            cwd=cwd,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        found: dict[str, Any] = json.loads(done.stdout)
        return found

    first = run("pool_app.py", "--port", "1")
    parent = first["parent"]
    assert parent.startswith(f"{script}#"), parent
    for method in ("fork", "spawn", "forkserver"):
        assert first[method] == [parent], (method, first)
    assert run(str(script), "--port", "1", cwd=Path("/"))["parent"] == parent  # from elsewhere
    assert run(str(script), "--port", "2")["parent"] != parent
    code = (
        "import json; from opentelemetry.instrumentation.process.group import keys; "
        "print(json.dumps({'parent': keys.program()}))"
    )
    one, other = run("-c", code)["parent"], run("-c", code + " ")["parent"]
    assert one.startswith("-c#") and other.startswith("-c#") and one != other


def test_a_spawned_worker_not_set_up_yet_is_told_by_its_parent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Instrumented at its start (opentelemetry-instrument), before multiprocessing gives it
    its parent's command line: its parent tells it apart."""
    monkeypatch.setattr(sys, "argv", ["-c", "--multiprocessing-fork"])
    found = keys.program()
    assert found.startswith(f"(spawned by pid {os.getppid()})#"), found
    assert found == keys.program()
