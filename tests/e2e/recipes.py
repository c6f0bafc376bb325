"""The pre-fork examples started as a user starts them, and the load that recycles their workers.

Each starter takes the environment the test built (where to export, as which
service, which runtime directory) and an optional ``wrap``: an argv prefix
that the command runs under (a shell that first moves itself into a cgroup,
say). It sets ``port`` on the child where the server listens.
"""

from __future__ import annotations

import re
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from .servers import REPO, VENV_BIN, Child, Children, free_port, need, wait_until

GUNICORN_CONF = REPO / "examples" / "gunicorn" / "gunicorn.conf.py"
CELERY = REPO / "examples" / "celery-worker"
WORKERS = 3


def get(port: int, path: str = "/") -> str:
    """The body of ``GET path`` on 127.0.0.1:``port``, waiting up to 15 s for an answer."""

    def answer() -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
                return str(response.read().decode())
        except OSError as exc:
            raise AssertionError(f"no answer: {exc}") from exc

    return wait_until(answer, 15, f"an answer on port {port}")


def in_cgroup(folder: Path) -> list[str]:
    """An argv prefix that moves the command into the cgroup ``folder``, then runs it."""
    return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(folder)]


def gunicorn(
    children: Children,
    env: Mapping[str, str],
    *,
    recycle: bool = True,
    name: str = "gunicorn",
    wrap: Sequence[str] = (),
) -> Child:
    """The gunicorn example with ``WORKERS`` workers, recycled after 4 requests each."""
    port = free_port()
    argv = [*wrap, str(VENV_BIN / "gunicorn"), "--config", str(GUNICORN_CONF)]
    argv += ["--max-requests", "4"] if recycle else []
    env = {**env, "GUNICORN_BIND": f"127.0.0.1:{port}", "GUNICORN_WORKERS": str(WORKERS)}
    child = children.start(name, argv, env)
    child.port = port  # type: ignore[attr-defined]
    return child


def http_load(child: Child, requests: int) -> None:
    """``requests`` requests to ``child``, spaced so that a worker lives a few export intervals."""
    for _ in range(requests):
        get(child.port)  # type: ignore[attr-defined]
        time.sleep(0.15)


def celery(
    children: Children,
    env: Mapping[str, str],
    broker: Path,
    *,
    name: str = "celery",
    wrap: Sequence[str] = (),
) -> Child:
    """The Celery example's prefork pool, ``WORKERS`` processes, recycled after 4 tasks each."""
    binary = VENV_BIN / "celery"
    need(binary if binary.is_file() else None, "celery is not installed (pip install celery)")
    env = {**env, "CELERY_BROKER_FOLDER": str(broker)}
    argv = [*wrap, str(binary), "--app=tasks", "worker", "--pool=prefork"]
    argv += [f"--concurrency={WORKERS}", "--max-tasks-per-child=4", "--loglevel=INFO"]
    argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    child = children.start(name, argv, env, cwd=CELERY)
    child.env = env  # type: ignore[attr-defined]
    child.children = children  # type: ignore[attr-defined]
    return child


def celery_load(child: Child, tasks: int) -> None:
    """Send ``tasks`` tasks to the Celery ``child`` and wait until they all ran."""
    send = f"import tasks\nfor _ in range({tasks}): tasks.pid.delay()"
    env = child.env  # type: ignore[attr-defined]
    sender = child.children.start("send", [sys.executable, "-c", send], env, cwd=CELERY)  # type: ignore[attr-defined]
    assert sender.wait(60) == 0, sender.describe()

    def ran() -> int:
        done = len(re.findall(r"Task tasks\.pid\[[^]]+\] succeeded", child.output()))
        assert done >= tasks, f"{done} tasks ran"
        return done

    wait_until(ran, 60, "every task to run")
