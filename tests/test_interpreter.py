"""Subinterpreters and interpreter shutdown (interpreter.py): the host ends as it would without us.

A subinterpreter runs ``site``, so ``opentelemetry-instrument``'s start-up, again.
The package measures the process from the main interpreter only, and logs one
line in the others; no option may leave a thread in a subinterpreter, which
would abort the whole process when it ends (``Py_EndInterpreter: not the last
thread``, found by CPython's ``test_threading`` with ``gil_wait=True``).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from opentelemetry.instrumentation.process import interpreter

from .support.everything import every_option, site

SUBINTERPRETERS = """\
import sys
ran = []
try:
    import _testcapi  # the legacy kind, as mod_wsgi's: shares the GIL
except ImportError:
    pass
else:
    for _ in range(3):
        assert _testcapi.run_in_subinterp("import threading; threading.enumerate()") == 0
    ran.append("legacy")
try:
    from concurrent import interpreters  # 3.14+: a GIL of its own
except ImportError:
    pass
else:
    for _ in range(3):
        sub = interpreters.create()
        sub.exec("import threading; threading.enumerate()")
        sub.close()
    ran.append("isolated")
print(",".join(ran))
"""


def _run(
    tmp_path: Path, options: dict[str, object] | None, code: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=site(tmp_path, options),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_this_is_the_main_interpreter() -> None:
    assert interpreter.is_main()


def test_the_line_of_a_subinterpreter_names_what_to_do_as_it_is_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """mod_wsgi's directive as a person types it (a line is %-formatted only with arguments)."""
    with caplog.at_level(logging.INFO, logger=interpreter.__package__):
        interpreter.log_not_main()
    [record] = caplog.records
    assert record.levelno == logging.INFO
    assert record.getMessage().startswith(
        "process metrics: not reported from this subinterpreter; the main interpreter"
    )
    assert record.getMessage().endswith(
        "in the main interpreter: mod_wsgi's WSGIApplicationGroup %{GLOBAL})"
    )


@pytest.mark.parametrize("options", [{}, every_option()], ids=["defaults", "every option"])
def test_subinterpreters_end_cleanly_and_are_not_measured(
    tmp_path: Path, options: dict[str, object]
) -> None:
    done = _run(tmp_path, options, SUBINTERPRETERS)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Fatal Python error" not in done.stderr
    kinds = done.stdout.strip()
    if not kinds:
        pytest.skip("no subinterpreters here: neither _testcapi nor concurrent.interpreters")
    log = (tmp_path / "package.log").read_text()
    said = log.count("not reported from this subinterpreter")
    # One line per subinterpreter whose site ran the start-up (the isolated
    # kind of 3.14 runs no site module).
    assert said >= (3 if "legacy" in kinds else 0), log
    assert said == log.count("mod_wsgi's WSGIApplicationGroup %{GLOBAL})"), log
    assert "WARNING" not in log and "ERROR" not in log, log


def test_the_main_interpreter_ends_cleanly_with_every_option(tmp_path: Path) -> None:
    code = "import asyncio, threading; asyncio.run(asyncio.sleep(0.3))"
    done = _run(tmp_path, every_option(), code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr == "", done.stderr[-2000:]


def test_a_subinterpreter_reports_nothing_and_starts_nothing(tmp_path: Path) -> None:
    pytest.importorskip("_testcapi")
    code = f"""\
import _testcapi, json, sys, threading
before = {{t.ident for t in threading.enumerate()}}
code = '''
import threading
from opentelemetry.instrumentation.process import ProcessInstrumentor
from opentelemetry.instrumentation.process.instruments import ProcessMetrics
had = set(threading.enumerate())
ProcessInstrumentor().instrument(**{every_option()!r})
metrics = ProcessMetrics()
assert metrics.group is None
assert set(threading.enumerate()) == had, threading.enumerate()
'''
assert _testcapi.run_in_subinterp(code) == 0
print(len({{t.ident for t in threading.enumerate()}} - before))
"""
    done = _run(tmp_path, None, code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stdout.strip() == "0"
