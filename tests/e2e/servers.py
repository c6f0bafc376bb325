"""Real servers and child processes for the end-to-end tests: find, start, poll, query, stop.

Everything listens on 127.0.0.1 on a free port. Every process is started with a
parent-death signal (Linux), so that none outlives a test run that was killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, TypeVar

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("SERVERS_CACHE_DIR") or REPO / ".cache" / "servers")
OTELCOL_UNAVAILABLE = CACHE / "otelcol.unavailable"
HOW_TO_GET = "run `bash scripts/get-servers.sh` (or `make servers`)"
VENV_BIN = Path(sys.executable).parent
IN_CI = os.environ.get("CI", "").lower() == "true"
RUNTIME_DIR_VAR = "OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"

T = TypeVar("T")


def locate(env_var: str, name: str) -> tuple[Path | None, str]:
    """The server binary from ``env_var`` or the cache, else ``None`` and why."""
    given = os.environ.get(env_var)
    if given:
        path = Path(given)
        if path.is_file() and os.access(path, os.X_OK):
            return path, ""
        return None, f"{env_var}={given} is not an executable file"
    path = CACHE / "bin" / name
    if path.is_file() and os.access(path, os.X_OK):
        return path, ""
    return None, f"{name} not found: set {env_var}, or {HOW_TO_GET} to install it into {path}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def need(binary: Path | None, why: str) -> Path:
    """``binary``, found; if not, skip the test saying ``why`` (fail it in CI)."""
    if binary is None:
        if IN_CI:
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why)
    return binary


def wait_until(check: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds.

    An ``AssertionError`` raised by ``check`` counts as "not yet"; the last one
    is shown if time runs out.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = check()
            if result:
                return result
            last = result
        except AssertionError as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout:.0f} s waiting for {what}; last: {last}"
            )
        time.sleep(interval)


def _parent_death_signal() -> Callable[[], None] | None:
    """A pre-exec hook: SIGTERM to the child when the test process dies (Linux only).

    Resolved here, in the parent: the hook runs between fork and exec, where
    importing or loading libraries could deadlock.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, signal.SIGTERM)


_PRE_EXEC = _parent_death_signal()


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def child_env(**extra: str) -> dict[str, str]:
    """The environment without the shell's ``OTEL_*`` settings, plus ``extra``.

    ``opentelemetry-instrument python`` resolves ``python`` on PATH, so this
    virtualenv comes first. Traces and logs are off: these tests are about metrics.
    Each call names a runtime directory of its own: the processes started with
    one environment are one group, which elects its own reporter of the shared
    metrics (other test runs on this machine would otherwise take part).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env["OTEL_TRACES_EXPORTER"] = "none"
    env["OTEL_LOGS_EXPORTER"] = "none"
    env[RUNTIME_DIR_VAR] = tempfile.mkdtemp(prefix="otel-e2e-group-")  # mode 0700
    env.update(extra)
    return env


OTLP_INTERVAL_MS = 500
"""The export interval of :func:`otlp_env`, in milliseconds."""


def otlp_env(vm: VictoriaMetrics, service: str, **extra: str) -> dict[str, str]:
    """:func:`child_env` for an app that pushes OTLP/HTTP to ``vm`` as ``service``."""
    return child_env(
        OTEL_SERVICE_NAME=service,
        OTEL_METRICS_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=vm.otlp_url,
        OTEL_METRIC_EXPORT_INTERVAL=str(OTLP_INTERVAL_MS),
        **extra,
    )


class Child:
    """One process, its output (stdout and stderr together) in a log file."""

    def __init__(
        self, name: str, argv: Sequence[str], env: Mapping[str, str], log: Path, cwd: Path = REPO
    ) -> None:
        self.name = name
        self.log = log
        self._out: IO[bytes] = log.open("ab")
        self.proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            preexec_fn=_PRE_EXEC,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def rss(self) -> int:
        return int(psutil.Process(self.pid).memory_info().rss)

    def describe(self) -> str:
        state = "running" if self.alive() else f"exited {self.proc.returncode}"
        return f"{self.name} (pid {self.pid}, {state}); last output:\n{tail(self.log)}"

    def stop(self, timeout: float = 10) -> int:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._out.close()
        return self.proc.returncode

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} did not exit in {timeout} s: {self.describe()}"
            ) from None


class Children:
    """The processes one fixture starts; ``stop_all()`` ends every one of them."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.started: list[Child] = []

    def start(
        self, name: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path = REPO
    ) -> Child:
        child = Child(name, argv, env, self.logdir / f"{name}.log", cwd)
        self.started.append(child)
        return child

    def stop_all(self) -> None:
        for child in reversed(self.started):
            child.stop()


def _http(url: str, data: bytes | None = None, timeout: float = 10) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/x-protobuf"} if data is not None else {}
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


class Server:
    """A server binary started on 127.0.0.1; ``start()`` returns once it answers."""

    name = "server"

    def __init__(self, argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None):
        self.argv = list(argv)
        self.log = log
        self.env = dict(env if env is not None else os.environ)
        self.child: Child | None = None

    def ready(self) -> bool:
        raise NotImplementedError

    def start(self, timeout: float = 20) -> None:
        assert self.child is None or not self.child.alive(), f"{self.name} already running"
        self.child = Child(self.name, self.argv, self.env, self.log)

        def up() -> bool:
            assert self.child is not None
            if not self.child.alive():
                raise RuntimeError(f"{self.name} exited at start: {self.child.describe()}")
            try:
                return self.ready()
            except OSError:
                return False

        try:
            wait_until(up, timeout, f"{self.name} to answer", interval=0.03)
        except BaseException:
            self.child.stop()
            raise

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()

    @contextlib.contextmanager
    def running(self) -> Iterator[Server]:
        self.start()
        try:
            yield self
        finally:
            self.stop()


class VictoriaMetrics(Server):
    """VictoriaMetrics, single node; OTLP/HTTP in, PromQL/MetricsQL out."""

    name = "victoria-metrics"

    def __init__(self, binary: Path, data: Path, log: Path, prometheus_naming: bool) -> None:
        self.port = free_port()
        self.prometheus_naming = prometheus_naming
        argv = [
            str(binary),
            f"-httpListenAddr=127.0.0.1:{self.port}",
            f"-storageDataPath={data}",
            "-retentionPeriod=1d",
            # Without this, samples stay invisible to queries for 30 s.
            "-search.latencyOffset=0s",
            f"-opentelemetry.usePrometheusNaming={str(prometheus_naming).lower()}",
            "-loggerLevel=WARN",
        ]
        super().__init__(argv, log)
        self.url = f"http://127.0.0.1:{self.port}"
        self.otlp_url = f"{self.url}/opentelemetry/v1/metrics"

    def ready(self) -> bool:
        return _http(f"{self.url}/health", timeout=1)[0] == 200

    def get(self, path: str, params: Sequence[tuple[str, str]] = ()) -> bytes:
        url = f"{self.url}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(list(params))
        status, body = _http(url)
        if status != 200:
            raise AssertionError(f"GET {url} -> {status}: {body[:500]!r}")
        return body

    def api(self, path: str, params: Sequence[tuple[str, str]] = ()) -> Any:
        answer = json.loads(self.get(path, params))
        assert answer.get("status") == "success", answer
        return answer["data"]

    def flush(self) -> None:
        """Make every sample received so far visible to queries."""
        self.get("/internal/force_flush")

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query at ``at`` (default: now, to the millisecond)."""
        self.flush()
        at = time.time() if at is None else at
        data = self.api("/api/v1/query", [("query", expr), ("time", f"{at:.3f}")])
        result: list[dict[str, Any]] = data["result"]
        return result

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        self.flush()
        params = [("query", expr), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        data = self.api("/api/v1/query_range", [*params, ("step", f"{step}s")])
        result: list[dict[str, Any]] = data["result"]
        return result

    def names(self, match: str) -> set[str]:
        """Metric names of the series that ``match`` selects."""
        self.flush()
        return set(self.api("/api/v1/label/__name__/values", [("match[]", match)]))

    def series(self, match: str) -> list[dict[str, str]]:
        self.flush()
        result: list[dict[str, str]] = self.api("/api/v1/series", [("match[]", match)])
        return result

    def export(self, match: str, start: float | None = None) -> list[dict[str, Any]]:
        """Raw samples of the series ``match`` selects, since ``start``: metric, values, ms.

        ``end`` is given because by default it is "now" rounded down to the
        second, which leaves out the newest samples.
        """
        self.flush()
        params = [("match[]", match), ("end", f"{time.time() + 60:.3f}")]
        if start is not None:
            params.append(("start", f"{start:.3f}"))
        body = self.get("/api/v1/export", params)
        return [json.loads(line) for line in body.splitlines() if line.strip()]


class Prometheus(Server):
    """Prometheus with exemplar storage, fed by remote write (Debian's build has no OTLP receiver).

    Exemplars are kept in memory, in a circular buffer shared by all series
    (``storage.exemplars.max_exemplars``); ``/api/v1/query_exemplars`` reads them.
    """

    name = "prometheus"

    def __init__(self, binary: Path, folder: Path) -> None:
        self.port = free_port()
        config = folder / "prometheus.yml"
        # No scrape jobs: every sample comes by remote write.
        config.write_text("storage:\n  exemplars:\n    max_exemplars: 100000\n")
        argv = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-remote-write-receiver",
            "--enable-feature=exemplar-storage",
            "--log.level=warn",
        ]
        super().__init__(argv, folder / "prometheus.log")
        self.url = f"http://127.0.0.1:{self.port}"
        self.remote_write_url = f"{self.url}/api/v1/write"

    def ready(self) -> bool:
        return _http(f"{self.url}/-/ready", timeout=1)[0] == 200

    def api(self, path: str, params: Sequence[tuple[str, str]] = ()) -> Any:
        url = f"{self.url}{path}?" + urllib.parse.urlencode(list(params))
        status, body = _http(url)
        if status != 200:
            raise AssertionError(f"GET {url} -> {status}: {body[:500]!r}")
        answer = json.loads(body)
        assert answer.get("status") == "success", answer
        return answer["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """Instant query at ``at`` (default: now)."""
        at = time.time() if at is None else at
        result: list[dict[str, Any]] = self.api(
            "/api/v1/query", [("query", expr), ("time", f"{at:.3f}")]
        )["result"]
        return result

    def exemplars(self, expr: str, start: float, end: float | None = None) -> list[dict[str, Any]]:
        """``/api/v1/query_exemplars``: each series of the selectors in ``expr``, its exemplars."""
        end = time.time() + 60 if end is None else end
        params = [("query", expr), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        result: list[dict[str, Any]] = self.api("/api/v1/query_exemplars", params)
        return result


def collector_config(grpc_port: int, http_port: int, backends: Sequence[str]) -> str:
    """A collector config: OTLP gRPC + HTTP in, batch, OTLP/HTTP out to each backend URL.

    ``otlphttp`` is the exporter's name in every collector version (0.152 calls
    it ``otlp_http`` and keeps ``otlphttp`` as an alias).
    """
    exporters = "".join(
        f"  otlphttp/backend{i}:\n    metrics_endpoint: {url}\n    compression: none\n"
        for i, url in enumerate(backends)
    )
    names = ", ".join(f"otlphttp/backend{i}" for i in range(len(backends)))
    return (
        "receivers:\n"
        "  otlp:\n"
        "    protocols:\n"
        f"      grpc:\n        endpoint: 127.0.0.1:{grpc_port}\n"
        f"      http:\n        endpoint: 127.0.0.1:{http_port}\n"
        "processors:\n"
        "  batch:\n"
        "    timeout: 100ms\n"
        "exporters:\n"
        f"{exporters}"
        "service:\n"
        "  telemetry:\n"
        "    metrics:\n"
        "      level: none\n"
        "  pipelines:\n"
        "    metrics:\n"
        "      receivers: [otlp]\n"
        "      processors: [batch]\n"
        f"      exporters: [{names}]\n"
    )


class Collector(Server):
    """An OpenTelemetry Collector with an OTLP receiver on a gRPC and an HTTP port."""

    name = "otelcol"

    def __init__(
        self,
        binary: Path,
        config: Path,
        log: Path,
        grpc_port: int,
        http_port: int,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__([str(binary), "--config", str(config)], log, env)
        self.grpc_port = grpc_port
        self.http_port = http_port
        self.grpc_endpoint = f"http://127.0.0.1:{grpc_port}"
        self.http_endpoint = f"http://127.0.0.1:{http_port}"

    def ready(self) -> bool:
        # No health endpoint in this build: any HTTP answer to an empty OTLP
        # request means the receivers are up (gRPC starts first).
        status, _ = _http(f"{self.http_endpoint}/v1/metrics", data=b"", timeout=1)
        with socket.create_connection(("127.0.0.1", self.grpc_port), timeout=1):
            pass
        return status > 0


# --- pre-fork servers ----------------------------------------------------------


def worker_pids(master: Child, count: int, timeout: float = 30) -> set[int]:
    """The pids of the ``count`` processes that ``master`` forked, once it has them all."""
    parent = psutil.Process(master.pid)

    def forked() -> set[int]:
        assert master.alive(), master.describe()
        pids = {p.pid for p in parent.children()}
        assert len(pids) == count, f"{master.name} children: {pids}, expected {count}"
        return pids

    return wait_until(forked, timeout, f"{count} workers of {master.name}")


def uwsgi_binary() -> tuple[Path | None, str]:
    """uWSGI from this virtualenv (``pip install uwsgi`` builds it), else from PATH."""
    for path in (VENV_BIN / "uwsgi", shutil.which("uwsgi")):
        if path is not None and os.access(path, os.X_OK):
            return Path(path), ""
    return None, "uwsgi not found: `pip install uwsgi` (it builds from source, 1-3 minutes)"


class Uwsgi:
    """A uWSGI server from an ini file, serving HTTP on a free port of 127.0.0.1.

    ``options`` are more ``--name value`` command-line flags; they add to the ini.
    """

    def __init__(
        self,
        children: Children,
        binary: Path,
        ini: Path,
        env: Mapping[str, str],
        options: Sequence[str] = (),
        name: str = "uwsgi",
    ) -> None:
        self.port = free_port()
        self.stats_port = free_port()
        argv = [str(binary), "--ini", str(ini), "--http-socket", f"127.0.0.1:{self.port}"]
        argv += ["--stats", f"127.0.0.1:{self.stats_port}"]
        self.child = children.start(name, [*argv, *options], env)

    @property
    def pid(self) -> int:
        return self.child.pid

    def get(self, path: str = "/", timeout: float = 10) -> str:
        """One request, retried until the server answers."""
        return self.request(path, timeout)[1]

    def request(self, path: str = "/", timeout: float = 10) -> tuple[dict[str, str], str]:
        """One request, retried until the server answers: its headers and body."""

        def answer() -> tuple[dict[str, str], str]:
            assert self.child.alive(), self.child.describe()
            url = f"http://127.0.0.1:{self.port}{path}"
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    return dict(response.headers.items()), response.read().decode()
            except urllib.error.HTTPError as exc:
                raise AssertionError(f"HTTP {exc.code}: {exc.read()[:200]!r}") from exc
            except OSError as exc:
                raise AssertionError(f"no answer yet: {exc}") from exc

        return wait_until(answer, timeout, f"uWSGI on port {self.port} to answer")

    def workers(self, count: int, timeout: float = 30) -> set[int]:
        return worker_pids(self.child, count, timeout)

    def stats(self) -> dict[str, Any]:
        """uWSGI's stats server: one JSON document per connection."""
        with socket.create_connection(("127.0.0.1", self.stats_port), timeout=5) as conn:
            chunks = []
            while chunk := conn.recv(1 << 16):
                chunks.append(chunk)
        stats: dict[str, Any] = json.loads(b"".join(chunks))
        return stats

    def wait_idle(self, timeout: float = 10) -> None:
        """Until no worker is inside a request: uWSGI skips Python's atexit in a busy one."""

        def idle() -> bool:
            busy = {w["pid"]: w["status"] for w in self.stats()["workers"]}
            assert set(busy.values()) == {"idle"}, f"workers: {busy}"
            return True

        wait_until(idle, timeout, "every uWSGI worker to be idle")
