"""Long-lived forked children for the group tests: each runs a job, reports, and waits.

A :class:`Kid` runs ``job()`` in a forked child (``os.fork``, or ``c_fork``
to skip Python's at-fork hooks), sends back what it returned as JSON, then
stays alive until :meth:`Kid.stop` (or a signal), so that the locks it took
stay held; meanwhile :meth:`Kid.ask` has it run ``serve(word)``. A kid whose
creator dies lingers for ``linger`` seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
from collections.abc import Callable
from typing import Any

import psutil

from .forkapps import c_fork
from .forked import add_mutation_hits, mutation_hits
from .waiting import eventually

_UNREAD = object()


def _send(fd: int, out: Any) -> None:
    data = json.dumps(out).encode() + b"\n"
    while data:
        data = data[os.write(fd, data) :]


class Kid:
    """One child; ``result`` is what its job returned."""

    def __init__(
        self,
        job: Callable[[], Any],
        *,
        raw: bool = False,
        linger: float = 0.0,
        serve: Callable[[str], Any] | None = None,
    ) -> None:
        report_r, report_w = os.pipe()
        control_r, control_w = os.pipe()
        pid = c_fork() if raw else os.fork()
        if pid == 0:  # the child: never back into pytest
            try:
                os.close(report_r)
                os.close(control_w)
                signal.signal(signal.SIGALRM, signal.SIG_DFL)
                signal.alarm(60)
                try:
                    out: Any = {"ok": job()}
                except BaseException as exc:  # noqa: BLE001 - anything goes back to the parent
                    out = {"error": f"{type(exc).__name__}: {exc}"}
                _send(report_w, {**out, "hits": mutation_hits()})
                while True:
                    word = os.read(control_r, 64).decode().strip()
                    if not word:  # the creator died
                        time.sleep(linger)
                        break
                    if serve is None or word == "stop":
                        break
                    try:
                        out = {"ok": serve(word)}
                    except BaseException as exc:  # noqa: BLE001 - anything goes back
                        out = {"error": f"{type(exc).__name__}: {exc}"}
                    _send(report_w, {**out, "hits": mutation_hits()})
            finally:
                os._exit(0)
        os.close(report_w)
        os.close(control_r)
        self.pid = pid
        self._control = control_w
        self._report = report_r
        self._result: Any = _UNREAD

    @property
    def result(self) -> Any:
        """What the job returned (waits for it)."""
        if self._result is _UNREAD:
            self._result = self._read()
        return self._result

    def _read(self, timeout: float = 20.0) -> Any:
        ready, _, _ = select.select([self._report], [], [], timeout)
        assert ready, f"kid {self.pid} did not report within {timeout} s"
        data = b""
        while not data.endswith(b"\n"):
            chunk = os.read(self._report, 4096)
            assert chunk, f"kid {self.pid} died before reporting"
            data += chunk
        out = json.loads(data)
        add_mutation_hits(out.get("hits", []))  # what only the child ran, tested by this test
        assert "error" not in out, f"kid {self.pid}: {out['error']}"
        return out["ok"]

    def ask(self, word: str) -> Any:
        """What the child's ``serve(word)`` returns."""
        _ = self.result  # the job's report comes first
        os.write(self._control, word.encode())
        return self._read()

    def stop(self) -> None:
        """Let the child exit, and reap it."""
        with contextlib.suppress(OSError):
            os.write(self._control, b"stop")
        self._reap()

    def kill(self, *, reap: bool = True) -> None:
        """SIGKILL the child, and reap it (not ``reap``: a zombie, once the kernel has ended it)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        if reap:
            self._reap()
            return
        status = psutil.Process(self.pid).status
        assert eventually(lambda: status() == psutil.STATUS_ZOMBIE, 20), (
            f"kid {self.pid}: no zombie"
        )

    def _reap(self) -> None:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        for fd in (self._control, self._report):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._control = self._report = -1


def claimed_slot() -> int | None:
    """This process's worker slot, claimed now if need be; ``None`` where none can be."""
    from opentelemetry.instrumentation.process.group import slots

    found = slots.claim()
    return None if found is None else found.slot
