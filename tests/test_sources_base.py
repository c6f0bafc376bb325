"""What every source shares: the read context's bookkeeping, checked with plain numbers."""

from __future__ import annotations

import logging

import psutil
import pytest

from opentelemetry.instrumentation.process import ProcessMetricsOptions
from opentelemetry.instrumentation.process.facts import read_facts
from opentelemetry.instrumentation.process.faultlog import FaultLog
from opentelemetry.instrumentation.process.sources.base import ReadContext


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


@pytest.fixture
def lines() -> Lines:
    handler = Lines()
    logger = logging.getLogger("tests.sources_base")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return handler


def _context(faults: FaultLog, *, direct: bool = True) -> ReadContext:
    process = psutil.Process()
    facts = read_facts(process, cpu_frequency=False)
    return ReadContext(
        process=process,
        facts=facts,
        options=ProcessMetricsOptions(),
        faults=faults,
        direct=direct,
    )


def test_a_failed_direct_read_is_given_up_alone_and_said_once_per_fault(lines: Lines) -> None:
    faults = FaultLog(logger=logging.getLogger("tests.sources_base"))
    ctx = _context(faults)
    assert ctx.use_direct("threads") and ctx.use_direct("sockets")
    ctx.direct_failed_once("threads", OSError(5, "Input/output error"))
    assert not ctx.use_direct("threads")
    assert ctx.use_direct("sockets")  # only the read that failed is given up
    assert lines.lines == [
        "WARNING process metrics: the direct Linux read 'threads' failed (OSError: "
        "[Errno 5] Input/output error); psutil is used instead from now on."
    ]
    # After a fork the new context tries again, with the same fault log: the same
    # fault is not said twice in a period, another one is.
    again = _context(faults)
    assert again.use_direct("threads")
    again.direct_failed_once("threads", OSError(5, "Input/output error"))
    again.direct_failed_once("threads", PermissionError(13, "Permission denied"))
    assert len(lines.lines) == 2
    assert "'threads' failed (PermissionError: [Errno 13] Permission denied)" in lines.lines[1]


def test_direct_reads_off_are_never_tried() -> None:
    ctx = _context(FaultLog(), direct=False)
    assert not ctx.use_direct("threads")
