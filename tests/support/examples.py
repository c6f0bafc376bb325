"""Running the examples as a user does: a clean environment, a free port, lines read in time."""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root, the examples' working directory."""
BIN = Path(sys.executable).parent
"""This venv's scripts: gunicorn, opentelemetry-instrument."""


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any OTEL_* setting of the shell, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    # opentelemetry-instrument resolves `python` on PATH: use this venv's.
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    # A group of its own (mode 0700): an instrumented process elsewhere on the
    # machine, of this user and cgroup, would otherwise be the one that reports
    # the host metrics the examples are checked for.
    env["OTEL_PYTHON_PROCESS_METRICS_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="otel-example-group-")
    env.update(extra)
    return env


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Lines:
    """Lines of a stream, read by a thread so that waiting for one is bounded."""

    def __init__(self, stream: IO[str]) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)

    def next(self, deadline: float) -> str | None:
        try:
            line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None
        self.seen.append(line)
        return line


def start(
    args: list[str], *, stderr: int = subprocess.STDOUT, cwd: Path = ROOT, **env: str
) -> subprocess.Popen[str]:
    """``args`` started from ``cwd`` (the root) in :func:`clean_env` plus ``env``, stdout piped.

    stderr goes with stdout unless ``stderr`` says otherwise (``subprocess.DEVNULL``).
    """
    return subprocess.Popen(
        args, env=clean_env(**env), cwd=cwd, stdout=subprocess.PIPE, stderr=stderr, text=True
    )
