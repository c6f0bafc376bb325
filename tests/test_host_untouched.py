"""The host runs as if the package were not there: its descriptors, its warnings, its exit.

Faults that CPython's own test suites found with the package loaded
(docs/compatibility.md), each in a child Python that loads the package at
start-up with every option, as ``opentelemetry-instrument`` would:

- ``test_subprocess``: the election's lock file sat at descriptor 3 for the
  life of the process, where a program counts on the numbers it gets, and
  lists its own: no descriptor of the election outlives its turn now;
- ``test_subprocess`` under ``-X warn_default_encoding``: a file read without
  an encoding warned in the program's stderr;
- ``test_os``: a forked child whose first collection was the last one, at
  exit, could not start the GIL probe's thread, and logged a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .support.everything import every_option, site

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _run(
    tmp_path: Path, code: str, *flags: str, package: bool = True
) -> subprocess.CompletedProcess[str]:
    env = site(tmp_path, every_option() if package else None)
    env["TEST_SITE_INTERVAL"] = "50"
    return subprocess.run(
        [sys.executable, *flags, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_descriptor_of_the_package_sits_where_the_program_gets_its_own(
    tmp_path: Path,
) -> None:
    """After collections, a pipe gets descriptors 3 and 4, as it would without the package.

    A collection opens files for a moment, in the reader's thread: one that runs
    while the program looks may show in one look, never in all of ten (a
    descriptor kept from turn to turn would). So the program keeps what every
    look saw, and the first pipe that got what it gets without the package. A
    look probes each number with fstat: a listing of /proc/self/fd would open one
    of its own, whose number moves when a collection holds the next one (at a
    load of 3 the look without it lost descriptor 4).
    """
    code = """\
import json, os, time
time.sleep(0.5)  # collections every 50 ms: the election and every source have run
def fds():  # probed, not listed: a listing's own descriptor takes a number that can move
    found = set()
    for n in range(2048):
        try:
            os.fstat(n)
        except OSError:
            continue
        found.add(n)
    return found
looks, pipes = [], []
for _ in range(10):
    looks.append(fds())
    r, w = os.pipe()
    pipes.append([r, w])
    os.close(r); os.close(w)
    time.sleep(0.037)  # not in step with the 50 ms collections
kept = set.intersection(*looks)
low = sorted(n for n in kept if n < 256)
held = sorted(n for n in kept if n >= 256)
pipe = min(pipes)
print(json.dumps({"low": low, "pipe": pipe, "held": held}))
"""
    runs = {}
    for package in (False, True):
        done = _run(tmp_path, code, package=package)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[package] = json.loads(done.stdout.splitlines()[-1])
    alone, with_package = runs[False], runs[True]
    assert with_package["low"] == alone["low"], runs
    assert with_package["pipe"] == alone["pipe"], runs
    assert with_package["held"] == alone["held"], runs  # none of ours held between turns


def test_no_encoding_warning_reaches_the_program(tmp_path: Path) -> None:
    code = "import time; time.sleep(0.5)"
    done = _run(tmp_path, code, "-X", "warn_default_encoding", "-W", "error::EncodingWarning")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "EncodingWarning" not in done.stderr, done.stderr[-2000:]
    log = (tmp_path / "package.log").read_text()
    assert "EncodingWarning" not in log, log


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_whose_first_collection_is_at_exit_logs_nothing(tmp_path: Path) -> None:
    code = """\
import os, time
time.sleep(0.3)
pid = os.fork()
if pid == 0:
    raise SystemExit(0)  # exits through the interpreter: the SDK's last collection runs
os.waitpid(pid, 0)
"""
    done = _run(tmp_path, code)
    assert done.returncode == 0, done.stderr[-2000:]
    log = (tmp_path / "package.log").read_text()
    assert "WARNING" not in log and "ERROR" not in log, log
