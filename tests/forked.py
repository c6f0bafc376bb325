"""Run a function in a forked child of the test process and get its result back.

A forked child runs the very code the test process imported (under mutation
testing, the mutated copy), so a check made in the child still catches a
wrong value. The child has a hard timeout, so a deadlock fails the test
instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest


def in_child(body: Callable[[], dict[str, Any]], timeout: int = 20) -> dict[str, Any]:
    """Run ``body`` in a forked child; return what it returned (a JSON object)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os.close(read_end)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(timeout)
            try:
                result = body()
            except BaseException as exc:  # noqa: BLE001 - anything goes back to the parent
                result = {"error": f"{type(exc).__name__}: {exc}"}
            data = json.dumps(result).encode()
            while data:
                data = data[os.write(write_end, data) :]
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        pytest.fail(f"the child died by signal {os.WTERMSIG(status)} (SIGALRM: it hung)")
    result: dict[str, Any] = json.loads(data or b"{}")
    if "error" in result:
        pytest.fail(f"the child failed: {result['error']}")
    return result
