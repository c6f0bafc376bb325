"""Real cgroups for tests, and a child process driven from the test.

:func:`child_cgroup` creates a cgroup under this process's own one, in a v1
controller (``cpu``, ``cpuacct``, ``memory``) or in the v2 hierarchy
(``unified``), and always removes it: it kills what is left inside (only the
test's own processes can be there), waits for it to empty, then ``rmdir``.

:class:`Child` runs ``tests/cgroupchild.py``, which does what the test asks
one stdin line at a time and answers one JSON line each. It uses the
package's own code from inside the cgroup.

The test reads the kernel's files itself (:func:`flat`, :func:`number`), with
its own parsing, as the truth to hold the package's readings against.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CGROUP_ROOT = Path("/sys/fs/cgroup")
CHILD_SCRIPT = Path(__file__).with_name("cgroupchild.py")
ON_LINUX = sys.platform.startswith("linux")


def own_folder(controller: str) -> Path | None:
    """This process's cgroup folder for a v1 controller, or v2 as ``unified``."""
    if not ON_LINUX:
        return None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hier, controllers, path = line.split(":", 2)
        if controller == "unified" and hier == "0":
            mount = CGROUP_ROOT / "unified"
        elif controller in controllers.split(","):
            mount = CGROUP_ROOT / controller
        else:
            continue
        folder = mount / path.lstrip("/")
        return folder if (folder / "cgroup.procs").is_file() else None
    return None


def require(controller: str) -> Path:
    """The folder to create a test cgroup in; skips the test when that cannot be done."""
    if not ON_LINUX:
        pytest.skip("cgroups are Linux only")
    if os.geteuid() != 0:
        pytest.skip("creating a cgroup and moving a process into it needs root")
    folder = own_folder(controller)
    if folder is None:
        pytest.skip(f"no mounted cgroup hierarchy for {controller!r} here")
    return folder


class Cgroup:
    """A cgroup folder that a test created."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def write(self, name: str, value: str) -> None:
        (self.folder / name).write_text(value)

    def read(self, name: str) -> bytes:
        return (self.folder / name).read_bytes()

    def add(self, pid: int) -> None:
        """Move process ``pid`` into the cgroup."""
        self.write("cgroup.procs", str(pid))

    def pids(self) -> set[int]:
        return {int(p) for p in self.read("cgroup.procs").split()}


@contextlib.contextmanager
def child_cgroup(controller: str) -> Iterator[Cgroup]:
    """A new cgroup under this process's own one, removed afterwards whatever happens."""
    parent = require(controller)
    folder = parent / f"otel-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        yield Cgroup(folder)
    finally:
        _remove(folder)


@contextlib.contextmanager
def nested_cgroup(parent: Cgroup) -> Iterator[Cgroup]:
    """A new cgroup inside ``parent`` (a test's own), removed afterwards whatever happens."""
    folder = parent.folder / f"inner-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        yield Cgroup(folder)
    finally:
        _remove(folder)


def _remove(folder: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while folder.exists():
        with contextlib.suppress(FileNotFoundError):
            for pid in (folder / "cgroup.procs").read_text().split():
                # Only the test's own processes were put in this new cgroup.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        try:
            folder.rmdir()
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def flat(data: bytes) -> dict[str, int]:
    """A flat-keyed kernel file (``key value`` lines) as a dict, parsed by the test."""
    return {k.decode(): int(v) for k, v in (line.split() for line in data.splitlines())}


def number(data: bytes) -> int:
    return int(data.strip())


class Child:
    """A Python child process running ``cgroupchild.py``, asked one command at a time."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.pid = self.proc.pid

    def ask(self, command: str) -> Any:
        """Send ``command``, return the child's JSON answer."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(self.timeout):
                raise TimeoutError(f"child gave no answer to {command!r} in {self.timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"child exited ({self.proc.wait()}) on {command!r}")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
