"""Ctrl-C ends an instrumented program as it ends one without the package: killed by SIGINT.

Python exits by SIGINT (status -2, a shell's 130) when ``KeyboardInterrupt``
ends the program. Two things of the package's could change that, both found
by CPython's ``test_signal`` or by these tests:

- a module imported at a collection: the last collection runs at exit, and a
  class built from a string there (a NamedTuple) resets CPython's record of the
  interrupt, so the program exited with status 1 (``per_thread=True``);
- a Ctrl-C that lands in the gc pause callback: CPython drops what a gc
  callback raises, and the program went on (by default).

Each program runs under a ``sitecustomize.py`` that loads the SDK (and the
package, with every option), as ``opentelemetry-instrument`` would.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .support.everything import every_option, site

PROGRAMS = {
    # Ctrl-C before the first collection: the last one runs at exit.
    "at once": "import os, signal, time\n"
    "os.kill(os.getpid(), signal.SIGINT)\n"
    "for _ in range(999): time.sleep(0.01)\n",
    # Ctrl-C while a loop runs.
    "in a loop": "import asyncio, os, signal\n"
    "async def main():\n"
    "    asyncio.get_running_loop().call_later(0.3, os.kill, os.getpid(), signal.SIGINT)\n"
    "    await asyncio.sleep(30)\n"
    "asyncio.run(main())\n",
    # Ctrl-C during long garbage collections: it lands in the gc callbacks.
    "in garbage collections": "import gc, signal, time\n"
    "heap = [[i] for i in range(1_500_000)]\n"
    "signal.setitimer(signal.ITIMER_REAL, 0.05)\n"
    "signal.signal(signal.SIGALRM, lambda *_: signal.raise_signal(signal.SIGINT))\n"
    "t0 = time.monotonic()\n"
    "while time.monotonic() - t0 < 20: gc.collect()\n",
    # Ctrl-C while collections run, again and again, at a 10 ms interval.
    "while collecting": "import os, signal, time\n"
    "signal.setitimer(signal.ITIMER_REAL, 0.7)\n"
    "signal.signal(signal.SIGALRM, lambda *_: signal.raise_signal(signal.SIGINT))\n"
    "t0 = time.monotonic()\n"
    "while time.monotonic() - t0 < 20: [object() for _ in range(1000)]\n",
}


def _status(tmp_path: Path, options: dict[str, object] | None, program: str) -> int:
    env = site(tmp_path, options)
    env["TEST_SITE_INTERVAL"] = "10"
    done = subprocess.run(
        [sys.executable, "-c", program],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        # SIGINT's default action: a child of a shell without job control ignores it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]
    return done.returncode


@pytest.mark.parametrize("program", PROGRAMS)
def test_ctrl_c_exits_as_without_the_package(tmp_path: Path, program: str) -> None:
    alone = _status(tmp_path, None, PROGRAMS[program])
    assert alone == -signal.SIGINT  # the program's own behaviour
    assert _status(tmp_path, {}, PROGRAMS[program]) == alone, "defaults"
    assert _status(tmp_path, every_option(), PROGRAMS[program]) == alone, "every option"


def test_a_signal_handlers_exit_status_comes_through_a_collection(tmp_path: Path) -> None:
    """A handler calling sys.exit(7) during a collection (a server's SIGTERM handler, say)."""
    program = (
        "import gc, signal, sys, time\n"
        "heap = [[i] for i in range(1_500_000)]\n"
        "signal.signal(signal.SIGALRM, lambda *_: sys.exit(7))\n"
        "signal.setitimer(signal.ITIMER_REAL, 0.05)\n"
        "t0 = time.monotonic()\n"
        "while time.monotonic() - t0 < 20: gc.collect()\n"
    )
    assert _status(tmp_path, None, program) == 7
    assert _status(tmp_path, {}, program) == 7


def test_a_collection_imports_nothing_even_with_every_option_on() -> None:
    """The collection of a periodic reader runs in its own thread: an import there changes
    ``sys.modules`` while the program may walk it (CPython's regrtest does at start-up, and
    died with "dictionary changed size during iteration" when the swap source built its
    sysinfo(2) call at the first collection). A fresh interpreter, as at start-up."""
    program = (
        "import json, sys, threading\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.metrics.export import InMemoryMetricReader\n"
        "from opentelemetry.instrumentation.process import ProcessInstrumentor\n"
        "reader = InMemoryMetricReader()\n"
        "inst = ProcessInstrumentor()\n"
        "inst.instrument(meter_provider=MeterProvider(metric_readers=[reader]),"
        " **json.loads(sys.argv[1]))\n"
        "before = set(sys.modules)\n"
        "for _ in range(2):\n"
        "    t = threading.Thread(target=reader.get_metrics_data); t.start(); t.join()\n"
        "inst.uninstrument()\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, json.dumps(every_option())],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout.splitlines()[-1]) == []
