"""A child process for the real-cgroup tests: one command per stdin line, one JSON line out.

Commands:
  discover       what the package finds: folders, quota, memory limit, PSI scope
  read           one read of every cgroup and PSI file, as the package reads them
  spin SECONDS   burn CPU for SECONDS of wall-clock time, then go idle
  pulse SECONDS  2 ms of CPU every 50 ms for SECONDS: periods that stay within a quota
  alloc MIB      hold MIB mebibytes of memory, every page touched
  free           drop that memory
  oom MIB        run a grandchild that allocates MIB mebibytes; say how it ended
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
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


def oom(mib: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", GRANDCHILD, str(mib)], check=False)
    return {"returncode": done.returncode}


def main() -> None:
    for line in sys.stdin:
        command, *args = line.split()
        if command == "discover":
            answer = discover()
        elif command == "read":
            answer = read()
        elif command == "spin":
            answer = spin(float(args[0]))
        elif command == "pulse":
            answer = pulse(float(args[0]))
        elif command == "alloc":
            answer = alloc(int(args[0]))
        elif command == "free":
            answer = free()
        elif command == "oom":
            answer = oom(int(args[0]))
        else:
            answer = {"error": f"unknown command {command!r}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
