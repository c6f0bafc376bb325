"""A child process for the real-cgroup tests: one command per stdin line, one JSON line out.

Commands:
  discover       what the package finds: folders, quota, memory limit, PSI scope
  read           one read of every cgroup and PSI file, as the package reads them
  spin SECONDS   burn CPU for SECONDS of wall-clock time, then go idle
  pulse SECONDS  2 ms of CPU every 50 ms for SECONDS: periods that stay within a quota
  alloc MIB      hold MIB mebibytes of memory, every page touched
  free           drop that memory
  cache MIB      write MIB mebibytes to an unlinked temporary file: page cache, kept
  oom MIB        run a grandchild that allocates MIB mebibytes; say how it ended

And through the real instrumentor, on an SDK MeterProvider with an InMemoryMetricReader:
  instrument JSON   ``ProcessInstrumentor().instrument(**JSON)`` (no options: auto mode)
  uninstrument      ``ProcessInstrumentor().uninstrument()``
  collect           one collection: {metric name: [[attributes, value], ...]}
  opens             one collection: the paths it opened, in order (an audit hook)
  forkcollect       fork; the forked process collects once and answers, then exits
  logs              the package's log records since the last ``logs``: [[level, message]]
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.instrumentation.process.linux import cgroup, psi
from opentelemetry.instrumentation.process.linux.files import read_all

_held: list[bytearray] = []
_found: dict[str, Any] = {}

GRANDCHILD = """
import sys
with open("/proc/self/oom_score_adj", "w") as f:
    f.write("1000")  # the OOM killer's first choice, whatever else is in the cgroup
block = bytearray(b"\\x01") * (int(sys.argv[1]) << 20)
"""


def discover() -> dict[str, Any]:
    """Discovery, once per ``discover`` command, as ``instrument()`` does it."""
    paths = cgroup.discover()
    pressure = psi.discover_pressure(paths)
    _found.update(files=cgroup.cgroup_files(paths) + pressure.files, scope=pressure.scope)
    return {
        "cpu": _folder(paths.cpu),
        "cpuacct": _folder(paths.cpuacct),
        "memory": _folder(paths.memory),
        "unified": _folder(paths.unified),
        "cpu_quota": cgroup.cpu_quota(paths),
        "memory_limit": cgroup.memory_limit(paths),
        "limited": cgroup.limited(paths),
        "pressure_scope": pressure.scope,
        "files": [f.path for f in _found["files"]],
    }


def _folder(h: cgroup.Hierarchy | None) -> list[Any] | None:
    return None if h is None else [h.version, str(h.own)]


def read() -> dict[str, Any]:
    """One collection's reads, with the files found by the last ``discover``."""
    values, failures = read_all(_found["files"])
    return {
        "values": values,
        "working_set": cgroup.working_set(values),
        "failures": [[f.path, type(exc).__name__] for f, exc in failures],
    }


def spin(seconds: float) -> dict[str, Any]:
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return {"loops": n}


def pulse(seconds: float) -> dict[str, Any]:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        spin(0.002)
        time.sleep(0.048)
    return {}


def alloc(mib: int) -> dict[str, Any]:
    _held.append(bytearray(b"\x01") * (mib << 20))
    return {"held": sum(len(b) for b in _held)}


def free() -> dict[str, Any]:
    _held.clear()
    return {"held": 0}


_cached: list[Any] = []


def cache(mib: int) -> dict[str, Any]:
    """Page cache charged to the cgroup, on the inactive list (written once, never read)."""
    f = tempfile.TemporaryFile()  # noqa: SIM115 - kept open on purpose
    for _ in range(mib):
        f.write(b"\x02" * (1 << 20))
    f.flush()
    os.fsync(f.fileno())
    _cached.append(f)  # open, so that its pages stay
    return {"cached": mib << 20}


def oom(mib: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", GRANDCHILD, str(mib)], check=False)
    return {"returncode": done.returncode}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[list[Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append([record.levelname, record.getMessage()])


_records = _Records()
_otel: dict[str, Any] = {}


def instrument(options: dict[str, Any]) -> dict[str, Any]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from opentelemetry.instrumentation.process import ProcessInstrumentor

    if "reader" not in _otel:
        logger = logging.getLogger("opentelemetry.instrumentation.process")
        logger.addHandler(_records)
        logger.setLevel(logging.DEBUG)
        _otel["reader"] = InMemoryMetricReader()
        _otel["provider"] = MeterProvider(metric_readers=[_otel["reader"]])
    ProcessInstrumentor().instrument(meter_provider=_otel["provider"], **options)
    return {}


def uninstrument() -> dict[str, Any]:
    from opentelemetry.instrumentation.process import ProcessInstrumentor

    ProcessInstrumentor().uninstrument()
    return {}


def collect() -> dict[str, Any]:
    from opentelemetry.instrumentation.process import SCOPE_NAME

    data = _otel["reader"].get_metrics_data()
    out: dict[str, Any] = {}
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            if sm.scope.name == SCOPE_NAME:
                for m in sm.metrics:
                    out[m.name] = [[dict(p.attributes), p.value] for p in m.data.data_points]
    return out


_opening: list[str] = []
_recording: list[bool] = []
_hooked: list[bool] = []


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _recording and event == "open" and isinstance(args[0], str):
        _opening.append(args[0])


def opens() -> list[str]:
    if not _hooked:
        sys.addaudithook(_audit)  # once: an audit hook cannot be removed
        _hooked.append(True)
    _opening.clear()
    _recording.append(True)
    try:
        collect()
    finally:
        _recording.clear()
    return list(_opening)


def forkcollect() -> dict[str, Any]:
    """One collection in a forked child, which finds its cgroup again."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.write(write_end, json.dumps({"pid": os.getpid(), "metrics": collect()}).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    answer: dict[str, Any] = json.loads(b"".join(chunks))
    return answer


def logs() -> list[list[Any]]:
    found, _records.records = _records.records, []
    return found


COMMANDS: dict[str, Callable[[list[str]], Any]] = {
    "discover": lambda _: discover(),
    "read": lambda _: read(),
    "spin": lambda args: spin(float(args[0])),
    "pulse": lambda args: pulse(float(args[0])),
    "alloc": lambda args: alloc(int(args[0])),
    "free": lambda _: free(),
    "cache": lambda args: cache(int(args[0])),
    "oom": lambda args: oom(int(args[0])),
    "instrument": lambda args: instrument(json.loads(" ".join(args) or "{}")),
    "uninstrument": lambda _: uninstrument(),
    "collect": lambda _: collect(),
    "opens": lambda _: opens(),
    "forkcollect": lambda _: forkcollect(),
    "logs": lambda _: logs(),
}
"""Each command by its name, called with the words after it."""


def main() -> None:
    for line in sys.stdin:
        command, *args = line.split()
        run = COMMANDS.get(command)
        answer = run(args) if run else {"error": f"unknown command {command!r}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
